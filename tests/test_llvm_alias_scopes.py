"""Alias scopes for the arena's slots (codegen/llvm_alias_scopes.py): views of different slots are told
apart by scoped-noalias metadata, views of one slot are not, accesses to anything else carry no tag; LLVM
then vectorizes the GMM gradient's loops without run-time overlap checks, and the gradient stays right."""

from __future__ import annotations

import re

import isozyme as iz
from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.llvm import emit_llvm
from isozyme.ssa.parser import parse_module
from isozyme.ssa.verifier import verify
from tests.example_modules import load_example

gmm = load_example("gmm")

SLOTS = """func @slots(%x: f64[?], %n: i64) -> f64 {
entry:
  %arena = alloc i64[24]
  %a = view f64[4] %arena, 0
  %b = view f64[4] %arena, 0
  %c = view f64[4] %arena, %n
  store 1.0, %a[0]
  store 2.0, %b[1]
  store 3.0, %c[2]
  %v = load %x[0]
  ret %v
}
"""


def tags(line: str) -> tuple[str | None, str | None]:
    scope = re.search(r"!alias\.scope (![0-9]+)", line)
    noalias = re.search(r"!noalias (![0-9]+)", line)
    return scope and scope.group(1), noalias and noalias.group(1)  # type: ignore[return-value]


def test_views_of_one_slot_share_a_scope_and_other_slots_are_noalias() -> None:
    module = parse_module(SLOTS, "slots")
    verify(module)
    code = emit_llvm(module, module["slots"], CodegenOptions(), "iz_t_").ir_text
    stores = [line for line in code.splitlines() if line.strip().startswith("store double")]
    a, b, c = (tags(line) for line in stores)
    assert a == b and a[0] is not None and a[1] is not None      # one slot: same scope, no claim between
    assert c[0] not in (None, a[0]) and c[1] != a[1]               # another slot: its own scope
    metadata = dict(re.findall(r"^(![0-9]+) = (.*)$", code, re.M))
    assert metadata[c[0]] == metadata[a[1]] and metadata[a[0]] == metadata[c[1]]  # each noalias to the other
    load = next(line for line in code.splitlines() if "load double" in line)
    assert tags(load) == (None, None)                              # an argument's access: no tag


def test_gmm_gradient_vectorizes_without_overlap_checks_and_stays_right() -> None:
    activity = ("dup", "dup", "dup", "const", "const", "const", "const")
    code = iz.show_ir(gmm.gmm_objective, stage="llvm-opt", activity=activity)
    assert "!alias.scope" in code and "x double>" in code
    assert "found.conflict" not in code  # LLVM's run-time overlap checks between arena views
    data = gmm.gmm_data(3, 2, 5, seed=2, gamma=1.2, m=1)
    iz.testing.gradcheck(gmm.gmm_objective, *data, gmm.log_gamma_distrib(0.5 * (3 + 1 + 1), 3),
                         argnums=(0, 1, 2), show_summary=False)
