"""func-attrs: infer every function's memory attributes, bottom-up over the call graph.

After func-attrs the memory flags of each function are exactly what this analysis proves. They are
recomputed from scratch on every run: flags written by hand or left by an earlier run are replaced, never
trusted, so a flag that stopped holding (or started to) is corrected. Other flags are kept.

- `readnone`: the function neither reads nor writes memory its caller can see, itself or through calls.
- `readonly`: it may read that memory but never writes it. Set only when `readnone` is not (readnone
  implies readonly, as in LLVM): a pass asking "does it write?" checks both.
- `argmemonly`: every memory access, its own or its callees', is to memory reachable from its array
  arguments or allocated during the call. The IR has no global memory, so every function satisfies it; it
  is set on every function that is not `readnone` (which implies it), so that LICM and CSE may rely on
  "a call touches only the arrays passed to it" (distinct array arguments never alias, DESIGN 1.1).

"Memory the caller can see" is the memory of the array arguments. Memory allocated during the call (the
function's own `alloc`s, arrays returned by its callees) is private: loads, stores, atomic adds and grows of
it do not count, nor do calls that are passed only private arrays. A function returning an array is neither
readnone nor readonly: every call may return a new array, so two calls must not be merged into one.

Method: a summary per function, the sets of array parameters it may read and may write. The array operand
of each access points into some of the function's array arguments (its provenance, followed through phis
and through calls returning arrays, which may return any array passed to them); a call contributes its
callee's summary, mapped through the call's operands. Components of the call graph are summarized callees
first, the members of a component one after another in module order. Recursion is conservative: a call to
a member not summarized yet (the function itself included) is assumed to read and write every array passed
to it. That keeps every summary sound, so later members may use earlier ones; a scalar-only recursion such
as `fib` can still be readnone.

The flags say nothing about traps or termination: a readonly function may fail an assert or an
out-of-bounds load. Requires verified IR; changes only function flags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from isozyme.optimize.call_graph import bottom_up_components
from isozyme.ssa.ir import Argument, Function, Instruction, Module, Value
from isozyme.ssa.ops import OP_INFO, Op

MEMORY_FLAGS = frozenset({"readnone", "readonly", "argmemonly"})
"""The flags this pass owns."""

DIRECT_ACCESSES: dict[Op, tuple[int, bool, bool]] = {
    Op.LOAD: (0, True, False),
    Op.STORE: (1, False, True),
    Op.ATOMIC_ADD: (1, True, True),
    Op.GROW: (0, True, True),  # copies the elements of a local array: private memory (an alloc)
    Op.VIEW: (-2, False, True),  # clears its arena's words when zeroed: private memory (an alloc)
}
"""Ops that access memory themselves: the operand holding the array, whether it reads, whether it writes."""

ARRAY_SOURCES: dict[Op, Callable[[Instruction], Iterable[Value]]] = {
    Op.ALLOC: lambda inst: (),
    Op.VIEW: lambda inst: (inst.operands[-2],),  # the bytes of its arena, an alloc
    Op.PHI: lambda inst: inst.operands,
    Op.CALL: lambda inst: (operand for operand in inst.operands if operand.type.is_array),
}
"""For each op that can produce an array: the arrays its result may be (an alloc is new memory)."""


@dataclass
class MemoryEffects:
    """What a function may do to the memory of its array parameters (by parameter position)."""

    reads: set[int] = field(default_factory=set)
    """Positions of the array parameters whose memory it may read."""
    writes: set[int] = field(default_factory=set)
    """Positions of the array parameters whose memory it may write."""
    returns_array: bool = False
    """Whether it returns an array (a fresh one or an alias): calls then cannot be merged."""

    def flags(self) -> set[str]:
        """The memory flags these effects justify (module docstring)."""
        if self.returns_array or self.writes:
            return {"argmemonly"}
        return {"readonly", "argmemonly"} if self.reads else {"readnone"}


Access = tuple[Value, bool, bool]
"""An array operand, whether it is read, whether it is written."""


def array_provenance(function: Function) -> dict[Value, frozenset[Argument]]:
    """For every array value of `function`, the array arguments it may point into (empty: private memory)."""
    provenance: dict[Value, frozenset[Argument]] = {arg: frozenset({arg}) for arg in function.args
                                                    if arg.type.is_array}
    arrays = [inst for inst in function.instructions() if inst.type.is_array]
    changed = True
    while changed:  # phis in loops may see each other: iterate to the fixed point
        changed = False
        for inst in arrays:
            if inst.op not in ARRAY_SOURCES:
                raise KeyError(f"func-attrs: no provenance rule for {inst.op}, which produces an array")
            sources = [provenance.get(source, frozenset()) for source in ARRAY_SOURCES[inst.op](inst)]
            merged = frozenset().union(*sources)
            if merged != provenance.get(inst):
                provenance[inst] = merged
                changed = True
    return provenance


def _call_accesses(call: Instruction, summaries: dict[Function, MemoryEffects]) -> list[Access]:
    """The arrays a call reads and writes, by its callee's summary; all of them when there is none yet."""
    effects = summaries.get(call.callee)
    accesses = []
    for position, operand in enumerate(call.operands):
        if operand.type.is_array:
            reads = effects is None or position in effects.reads
            writes = effects is None or position in effects.writes
            accesses.append((operand, reads, writes))
    return accesses


def memory_accesses(inst: Instruction, summaries: dict[Function, MemoryEffects]) -> list[Access]:
    """The arrays `inst` reads or writes, directly or through its callee."""
    if inst.op in DIRECT_ACCESSES:
        position, reads, writes = DIRECT_ACCESSES[inst.op]
        return [(inst.operands[position], reads, writes)]
    if inst.op is Op.CALL:
        return _call_accesses(inst, summaries)
    info = OP_INFO[inst.op]
    if info.reads_memory or info.writes_memory:
        raise KeyError(f"func-attrs: no memory rule for {inst.op}")
    return []


def summarize(function: Function, summaries: dict[Function, MemoryEffects]) -> MemoryEffects:
    """The memory effects of `function`, given its callees' summaries (a missing one: assume the worst)."""
    provenance = array_provenance(function)
    effects = MemoryEffects(returns_array=function.return_type.is_array)
    for inst in function.instructions():
        for array, reads, writes in memory_accesses(inst, summaries):
            params = {arg.index for arg in provenance.get(array, frozenset())}
            if reads:
                effects.reads |= params
            if writes:
                effects.writes |= params
    return effects


def module_memory_effects(module: Module) -> dict[Function, MemoryEffects]:
    """Every function's summary, component by component, callees first."""
    summaries: dict[Function, MemoryEffects] = {}
    for component in bottom_up_components(module):
        for function in component:  # a member not summarized yet (itself included) is assumed the worst
            summaries[function] = summarize(function, summaries)
    return summaries


def function_attributes(module: Module) -> bool:
    """Set the memory flags of every function of `module` from scratch; True if any flag changed."""
    changed = False
    for function, effects in module_memory_effects(module).items():
        flags = (function.flags - MEMORY_FLAGS) | effects.flags()
        if flags != function.flags:
            function.flags = flags
            changed = True
    return changed
