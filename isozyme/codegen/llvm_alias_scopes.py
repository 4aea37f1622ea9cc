"""LLVM alias scopes for the arena's slots: accesses to local arrays in different slots never overlap.

After `optimize/memory_reuse.place_in_arena` the local arrays of a function are `view`s into one arena,
a single `malloc` block: LLVM sees pointers into one object and cannot tell two views apart, so it guards
each vectorized loop that reads one view and writes another with run-time overlap checks, or gives up
(measured on the GMM gradient: a shadow `d_qxcentered` against the tapes and `d_icf` loops). Yet views of
different slots are disjoint by construction: a slot's bytes are `[offset, offset + size)` with the
offsets prefix sums of the slot sizes, so no two slots share a byte. Views of one slot may share bytes
(their arrays are never live together), so they get no claim about each other.

`ArenaScopes` gives each slot of a function, named by its (arena, offset) operands (the offset of a slot
is one SSA value, or a constant, shared by its views), an LLVM scope in one domain per function (LangRef,
"Scoped no-alias metadata"), and tags each load and store whose array is a view directly: `!alias.scope`
its slot's scope, `!noalias` every other slot's. An access through anything else (an argument, an
unplaced alloc, a phi or a call result) gets no tag, so nothing is claimed about it. The claim holds for
in-bounds accesses; an out-of-bounds one is undefined behaviour already (checked mode catches it).
"""

from __future__ import annotations

from llvmlite import ir

from isozyme.ssa.ir import Constant, Function, Instruction, Value
from isozyme.ssa.ops import Op

SlotKey = tuple[object, object]
"""A slot: its arena value and its offset (the SSA value, or the number of a constant offset)."""


def slot_of(view: Instruction) -> SlotKey:
    """The slot `view` lies in (its last two operands are the arena and the word offset)."""
    arena, offset = view.operands[-2], view.operands[-1]
    return arena, ("constant", offset.value) if isinstance(offset, Constant) else offset


class ArenaScopes:
    """The scope metadata of the slots of one function's arena (module docstring)."""

    def __init__(self, module: ir.Module, function: Function, symbol: str) -> None:
        views = [inst for inst in function.instructions() if inst.op is Op.VIEW]
        slots = list(dict.fromkeys(slot_of(view) for view in views))
        self._tags: dict[SlotKey, tuple[ir.MDValue, ir.MDValue]] = {}
        if len(slots) < 2:  # one slot or none: nothing to tell apart
            return
        domain = module.add_metadata([ir.MetaDataString(module, f"{symbol}.arena")])
        scopes = [module.add_metadata([ir.MetaDataString(module, f"{symbol}.arena.slot{i}"), domain])
                  for i in range(len(slots))]
        for index, slot in enumerate(slots):
            others = scopes[:index] + scopes[index + 1:]
            self._tags[slot] = (module.add_metadata([scopes[index]]), module.add_metadata(others))

    def tag(self, access: ir.Instruction, array: Value) -> None:
        """Tag a load or store of `array`'s elements when `array` is a view of this arena."""
        if not self._tags or not isinstance(array, Instruction) or array.op is not Op.VIEW:
            return
        scope, others = self._tags[slot_of(array)]
        access.set_metadata("alias.scope", scope)
        access.set_metadata("noalias", others)
