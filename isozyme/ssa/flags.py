"""The flags that carry meaning across passes and backends, and the predicates on them: a growable `alloc`
(a tape), a checked array access, a function kept out of line or carrying a custom derivative rule; and
which values are local arrays, what their extents are, and which instructions access one element of an
array.

Flags are plain strings in `Instruction.flags` and `Function.flags` (the printer writes them, the parser
reads them back), so a pass that does not know a flag keeps it; the names here are the only spellings.
"""

from __future__ import annotations

from collections.abc import Collection

from isozyme.ssa.ir import Function, Instruction, Value
from isozyme.ssa.ops import Op

ZEROED = "zeroed"
"""The flag of an `alloc` that fills its array with zeros (`iz.zeros`, and the shadows of local arrays); a
plain one leaves it undefined."""

PARALLEL = "parallel"
"""The flag of a `prange` loop's header phi (its iterations may run at once, on different work items)."""

GROWABLE = "growable"
"""The flag of an `alloc` whose array `grow` may enlarge (`%t = alloc f64[16] growable`)."""

CHECKED = "checked"
"""The flag of a `load`, `store` or `atomic_add` whose indices are checked (`@iz.kernel(boundscheck=True)`):
the backends check it whatever the module's mode, and no pass deletes it for being unused."""

ACCESS_OPS = frozenset({Op.LOAD, Op.STORE, Op.ATOMIC_ADD})
"""The ops that index an array, which `CHECKED` may flag."""


def accesses_element_of(inst: Instruction, array: Value, ops: Collection[Op] = ACCESS_OPS) -> bool:
    """Is `inst` one of `ops` (loads, stores, atomic adds) on an element of `array`, which it uses nowhere
    else (not as an index, nor as the value stored)?"""
    if inst.op not in ops:
        return False
    at = 0 if inst.op is Op.LOAD else 1
    return inst.operands[at] is array and array not in (*inst.operands[:at], *inst.operands[at + 1:])


def mark_checked(function: Function) -> None:
    """Flag every array access of `function` `CHECKED`."""
    for inst in function.instructions():
        if inst.op in ACCESS_OPS:
            inst.flags.add(CHECKED)


NOINLINE = "noinline"
"""The function flag that keeps every call of the function (the `inline` pass and AD leave them)."""

CUSTOM_VJP_FLAG = "vjp."
"""Prefix of the function flag naming the function's custom reverse rule, `vjp.<rule>` (enzyme_ad/custom.py)."""

CUSTOM_JVP_FLAG = "jvp."
"""Prefix of the function flag naming the function's custom forward rule, `jvp.<rule>` (enzyme_ad/custom.py)."""


def is_growable_alloc(value: Value) -> bool:
    """Is `value` the result of an `alloc` with the `growable` flag?"""
    return isinstance(value, Instruction) and value.op is Op.ALLOC and GROWABLE in value.flags


def is_local_array(value: Value) -> bool:
    """Is `value` a local array: an `alloc`, or a `view` into an arena (which is an alloc itself)?"""
    return isinstance(value, Instruction) and value.op in (Op.ALLOC, Op.VIEW)


def local_extents(array: Instruction) -> tuple[Value, ...]:
    """The extents of an `alloc` or a `view` (a view's operands end with its arena and offset)."""
    return array.operands[:-2] if array.op is Op.VIEW else array.operands
