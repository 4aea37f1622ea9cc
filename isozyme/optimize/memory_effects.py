"""The memory model that licm and cse share: which arrays may alias, and what calls read and write.

Arrays are values of array type: function arguments, `alloc` results, and (in principle) phis of arrays.
Distinct array arguments never alias (DESIGN 1.1: the call boundary checks `np.shares_memory`), and an
`alloc` result is a new array, distinct from every argument and every other alloc. So two array values whose
roots are arguments or allocs alias exactly when they are the same value. Any other array value (a phi of
arrays) has an unknown root and may alias every array. So has a `view` (memory_reuse.py's arena placement,
which runs after every pass): views of one arena share its bytes.

A call's effects come from its callee's flags (DESIGN 3): `readnone` reads and writes nothing, `readonly`
writes nothing, `argmemonly` touches only the arrays passed to it. A readonly call reads at most the arrays
passed to it, since the kernel language has no global memory (DESIGN 1.2). A call that may write and is not
`argmemonly` is, conservatively, taken to write every array.

A `grow` keeps its array's elements, but moves them to new memory: it counts as a write of its array, so
loads are neither hoisted over nor forwarded across it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from isozyme.ssa.ir import Argument, Instruction, Value
from isozyme.ssa.ops import Op


def array_root(array: Value) -> Value | None:
    """The argument or `alloc` that `array` is, or None when that is unknown (may alias anything)."""
    if isinstance(array, Argument) or (isinstance(array, Instruction) and array.op is Op.ALLOC):
        return array
    return None


def may_alias(a: Value, b: Value) -> bool:
    """May two array values be the same array?"""
    root_a, root_b = array_root(a), array_root(b)
    return root_a is None or root_b is None or root_a is root_b


@dataclass(frozen=True)
class CallEffects:
    """What a call may do to memory."""

    reads: bool
    """May read the arrays passed to it."""
    writes: bool
    """May write memory."""
    writes_only_arguments: bool
    """When it writes, only arrays passed to it (`argmemonly`)."""


def call_effects(call: Instruction) -> CallEffects:
    """The effects of `call`, from its callee's flags (module docstring)."""
    flags = call.callee.flags
    if "readnone" in flags:
        return CallEffects(reads=False, writes=False, writes_only_arguments=True)
    if "readonly" in flags:
        return CallEffects(reads=True, writes=False, writes_only_arguments=True)
    return CallEffects(reads=True, writes=True, writes_only_arguments="argmemonly" in flags)


def array_operands(inst: Instruction) -> list[Value]:
    """The operands of array type (a call's array arguments)."""
    return [operand for operand in inst.operands if operand.type.is_array]


@dataclass
class MemoryWrites:
    """The arrays some instructions may write."""

    everything: bool = False
    """True when one of them may write any array (a call without `argmemonly`, a store to an unknown root)."""
    arrays: list[Value] = field(default_factory=list)
    """Array values written, when not `everything`."""

    def add(self, inst: Instruction) -> None:
        """Record the writes of `inst`, if it has any."""
        if inst.op in (Op.STORE, Op.ATOMIC_ADD):
            self._add_array(inst.operands[1])
        elif inst.op is Op.GROW:  # moves the array's elements to new memory: a write of all of them
            self._add_array(inst.operands[0])
        elif inst.op is Op.CALL:
            effects = call_effects(inst)
            if effects.writes and not effects.writes_only_arguments:
                self.everything = True
            elif effects.writes:
                for array in array_operands(inst):
                    self._add_array(array)

    def _add_array(self, array: Value) -> None:
        if array_root(array) is None:
            self.everything = True
        self.arrays.append(array)

    def merge(self, other: MemoryWrites) -> None:
        """Add the writes of `other`."""
        self.everything |= other.everything
        self.arrays.extend(other.arrays)

    def may_write(self, array: Value) -> bool:
        """May one of the instructions write (an array aliasing) `array`?"""
        return self.everything or any(may_alias(array, written) for written in self.arrays)

    @property
    def is_empty(self) -> bool:
        return not self.everything and not self.arrays


def memory_writes(instructions: Iterable[Instruction]) -> MemoryWrites:
    """The arrays `instructions` may write."""
    writes = MemoryWrites()
    for inst in instructions:
        writes.add(inst)
    return writes
