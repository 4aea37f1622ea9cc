"""An adjoint's add of a sum of products into memory, lowered as one chain of fused multiply-adds from the
element's old value when the kernel's flags allow it ("reassoc" and "contract"), and as written otherwise
(`codegen/llvm_accumulation.py`).

The LLVM IR of hand-written SSA shows where the chain is made and where it is not (strict flags, one flag
only, an address the loop does not change, a term computed outside the loop); a gradient built with the
flags, whose LLVM IR holds the chain, equals the strict kernel's gradient within rounding and finite
differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import isozyme as iz
from isozyme import Array, f64
from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.llvm import emit_llvm
from isozyme.ssa.parser import parse_module

FUSING = ("contract", "reassoc")

LOOP = """
func @acc(%d: f64[?], %x: f64[?], %y: f64[?], %a: f64, %b: f64, %n: i64, %k: i64) {{
entry:
  %c = fadd %a, %b
  br head
head:
  %i = phi i64 [entry: 0, body: %i.next]
  %go = icmp.slt %i, %n
  cbr %go, body, exit
body:
  %xi = load %x[%i]
  %yi = load %y[%i]
  %p = fmul %a, %xi
  %q = fmul %b, %yi
{body}
  %i.next = iadd %i, 1
  br head
exit:
  ret
}}
"""
"""A loop over i < n; c = a + b is computed before it."""

SUM_OF_PRODUCTS = """\
  %s = fadd %p, %q
  %t = fadd %s, %c
  atomic_add %t, %d[{at}]"""
"""d[at] += a * x[i] + b * y[i] + c, where at is %i (varies with the loop) or %k (does not)."""

ONE_PRODUCT = "  atomic_add %p, %d[%i]"
"""d[i] += a * x[i]."""


def llvm_text(fastmath: tuple[str, ...], at: str = "%i", body: str = SUM_OF_PRODUCTS) -> str:
    """The LLVM IR of @acc's own function (not of the entry points that call it)."""
    module = parse_module(LOOP.format(body=body.format(at=at)))
    code = emit_llvm(module, module["acc"], CodegenOptions(fastmath=fastmath), "iz_t_").ir_text
    start = code.index('@"iz_t_acc"(')
    return code[start:code.index("\n}", start)]


def fused_calls(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines() if '= call double @"llvm.fmuladd.f64"' in line]


def definitions(code: str) -> dict[str, str]:
    """Each LLVM value's defining line, by name."""
    return {line.split(" = ", 1)[0].strip(): line.split(" = ", 1)[1] for line in code.splitlines() if " = " in line}


def adds_into_a_load(code: str, call: str) -> bool:
    """Whether the fmuladd `call` adds into a value loaded from memory (its third operand)."""
    return definitions(code)[call.rsplit("double ", 1)[1].rstrip(")")].startswith("load double")


def test_with_reassoc_and_contract_the_sum_is_a_chain_of_fused_multiply_adds_from_the_old_value() -> None:
    code = llvm_text(FUSING)
    calls = fused_calls(code)
    assert len(calls) == 2, code
    first, second = (call.split(" = ")[0] for call in calls)
    assert adds_into_a_load(code, calls[0])  # from the old value
    assert calls[1].endswith(f"double {first})")  # through both products
    last = next(name for name, line in definitions(code).items() if line.startswith("fadd")
                and f"double {second}," in line)
    assert f"store double {last}," in code  # then %c, and into memory
    assert len(fused_calls(llvm_text(("fast",)))) == 2


def test_one_product_is_one_fused_multiply_add_into_the_old_value() -> None:
    code = llvm_text(FUSING, body=ONE_PRODUCT)
    (call,) = fused_calls(code)
    assert "(double %\"a\", double " in call
    assert adds_into_a_load(code, call)
    assert f"store double {call.split(' = ')[0]}," in code
    assert fused_calls(llvm_text(("reassoc",), body=ONE_PRODUCT)) == []


@pytest.mark.parametrize("fastmath", [(), ("reassoc",), ("contract",), ("afn", "reassoc")])
def test_without_both_flags_the_sum_is_added_as_written(fastmath: tuple[str, ...]) -> None:
    assert fused_calls(llvm_text(fastmath)) == []


def test_an_address_the_loop_does_not_change_keeps_one_add_on_the_carried_path() -> None:
    assert fused_calls(llvm_text(FUSING, at="%k")) == []


def test_a_sum_computed_outside_the_loop_is_one_term_not_computed_again_in_it() -> None:
    """%c = a + b, computed before the loop, is added as one term: a and b are added once, not per iteration."""
    code = llvm_text(FUSING)
    sums = [line for line in code.splitlines() if " fadd " in line and '%"a", %"b"' in line]
    assert len(sums) == 1
    entry_sum = sums[0].split(" = ")[0].strip()
    second = fused_calls(code)[1].split(" = ")[0]
    assert any(" fadd " in line and line.rstrip().endswith(f"double {second}, {entry_sum}")
               for line in code.splitlines())


@iz.kernel
def two_token_dense(out: Array[f64, 2], W: Array[f64, 2], x: Array[f64, 2]):
    # out[t, o] = W[o, :] . x[t, :] for two tokens, each weight loaded once for both: the reverse adds
    # da0 * x[0, i] + da1 * x[1, i] into d_W[o, i]
    for o in iz.prange(W.shape[0]):
        a0 = 0.0
        a1 = 0.0
        for i in range(W.shape[1]):
            w = W[o, i]
            a0 += w * x[0, i]
            a1 += w * x[1, i]
        out[0, o] = a0
        out[1, o] = a1


def scaled_sum(x: Array[f64], a: f64) -> f64:
    s = 0.0
    for i in iz.prange(len(x)):
        s += x[i] * (0.5 * a)
    return s


def test_a_product_computed_before_a_prange_loop_is_added_as_a_value_in_its_worker() -> None:
    """The reverse adds d_s * (0.5 * a) into d_x[i] in the loop; that product is computed before it, and the
    loop's worker function receives the product, not its factors (the gradient fuzzer's failing program:
    "value %differet is used before it is emitted")."""
    fused = iz.kernel(fastmath=FUSING)(scaled_sum)
    x, d_x = np.arange(5.0), np.zeros(5)
    result, (d_a,) = iz.autodiff(fused, iz.Duplicated(x, d_x), iz.Active(3.0))
    assert result == pytest.approx(0.5 * 3.0 * x.sum())
    np.testing.assert_allclose(d_x, np.full(5, 1.5))
    assert d_a == pytest.approx(0.5 * x.sum())


def loss(out: Array[f64, 2], W: Array[f64, 2], x: Array[f64, 2], g: Array[f64, 2]) -> f64:
    two_token_dense(out, W, x)
    total = 0.0
    for t in range(out.shape[0]):
        for o in range(out.shape[1]):
            total += out[t, o] * g[t, o]
    return total


def reference_loss(W: np.ndarray, x: np.ndarray, g: np.ndarray) -> float:
    """`loss` in numpy."""
    return float(np.sum((x @ W.T) * g))


strict_loss = iz.kernel(loss)
fused_loss = iz.kernel(fastmath=FUSING)(loss)
ACTIVITY = ("dup", "dup", "dup", "const")


def gradient(kernel: iz.Kernel, W: np.ndarray, x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d_W, d_x = np.zeros_like(W), np.zeros_like(x)
    out = np.zeros_like(g)
    iz.autodiff(kernel, iz.Duplicated(out, np.zeros_like(out)), iz.Duplicated(W, d_W), iz.Duplicated(x, d_x), g)
    return d_W, d_x


def test_a_fused_gradient_equals_the_strict_one_within_rounding_and_finite_differences() -> None:
    assert fused_calls(iz.show_ir(fused_loss, stage="llvm", activity=ACTIVITY))  # the chain is in this gradient
    assert not fused_calls(iz.show_ir(strict_loss, stage="llvm", activity=ACTIVITY))
    rng = np.random.default_rng(3)
    W, x, g = rng.standard_normal((37, 29)), rng.standard_normal((2, 29)), rng.standard_normal((2, 37))
    strict, fused = gradient(strict_loss, W, x, g), gradient(fused_loss, W, x, g)
    for exact, rounded in zip(strict, fused):
        np.testing.assert_allclose(rounded, exact, rtol=1e-12, atol=1e-12)
    # the loss is linear in W: a central difference of the undecorated function is exact up to rounding
    h, o, i = 1e-3, 5, 11
    plus, minus = W.copy(), W.copy()
    plus[o, i] += h
    minus[o, i] -= h
    difference = (reference_loss(plus, x, g) - reference_loss(minus, x, g)) / (2 * h)
    assert fused[0][o, i] == pytest.approx(difference, rel=1e-9)
