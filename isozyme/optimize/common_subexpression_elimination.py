"""cse: dominator-scoped value numbering. An instruction that recomputes what a dominating one computed is
replaced by it and deleted.

After cse, no two instructions of these kinds compute the same value where one dominates the other:

  - scalar ops without memory effects, `dim`, and calls to `readnone` callees, keyed by op, type,
    attributes, flags and operands (constants by type and bits, so 0.0 and -0.0 differ; other values by
    identity). Commutative ops sort their operands and `a > b` is keyed as `b < a`. Trapping ones
    (`ifloordiv`) are numbered too: when the dominating one did not trap, the later one computes the same.
  - loads, keyed by array value, indices and type. A store makes its value available to later loads of
    the same array and indices (store-to-load forwarding). Availability ends at a store or `atomic_add`
    to an array that may alias (memory_effects.py), at a `grow` of it, at a call that may write it, and,
    entering a block with several predecessors, for every array that a block on some path from its
    immediate dominator to it (not through the dominator; for a loop header: the whole loop) may write,
    and for every array when more than REGION_LIMIT blocks lie on those paths.

Never numbered: `alloc` (every one is a new array), phis, stores, `atomic_add`, `grow`, `assert`, calls that
are not `readnone`. Requires verified SSA; keeps it; the CFG is unchanged.
"""

from __future__ import annotations

from isozyme.optimize.memory_effects import MemoryWrites, memory_writes
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.trip_count import CANONICAL_DIRECTION, SWAPPED_PREDICATE, Key, constant_key, is_scalar_op
from isozyme.ssa.types import Type


def operand_key(value: Value) -> Key:
    """Constants by type and bits, other values by identity."""
    if isinstance(value, Constant):
        return constant_key(value.type, value.value)
    return ("value", id(value))


def _is_numbered(inst: Instruction) -> bool:
    if isinstance(inst, Phi) or inst.is_terminator:
        return False
    if inst.op is Op.CALL:
        return "readnone" in inst.callee.flags
    return is_scalar_op(inst) or inst.op is Op.DIM


def value_key(inst: Instruction) -> Key | None:
    """The value number key of `inst`, or None when it is not numbered (module docstring)."""
    if not _is_numbered(inst):
        return None
    op, operands = inst.op, [operand_key(operand) for operand in inst.operands]
    if op in CANONICAL_DIRECTION:
        op, operands = SWAPPED_PREDICATE[op], operands[::-1]
    elif OP_INFO[op].commutative:
        operands.sort(key=repr)
    attrs = tuple(sorted((name, id(value) if isinstance(value, Function) else value)
                         for name, value in inst.attrs.items()))
    return (op, inst.type, attrs, frozenset(inst.flags), tuple(operands))


def load_key(array: Value, indices: tuple[Value, ...], element: Type) -> Key:
    return ("load", id(array), element, tuple(operand_key(index) for index in indices))


class _ScopedValues:
    """Value numbers whose additions are undone when the dominator subtree they were made in is left
    (LLVM's ScopedHashTable): one table for the whole walk, so a deep dominator tree (thousands of `if`s
    in a row) costs no more than a wide one."""

    def __init__(self) -> None:
        self.table: dict[Key, Value] = {}
        self.log: list[Key] = []

    def get(self, key: Key) -> Value | None:
        return self.table.get(key)

    def add(self, key: Key, value: Value) -> None:
        self.table[key] = value
        self.log.append(key)

    def mark(self) -> int:
        return len(self.log)

    def undo(self, mark: int) -> None:
        """Back to the state of `mark`."""
        while len(self.log) > mark:
            del self.table[self.log.pop()]


class _AvailableLoads:
    """Values known to be in memory by load key, grouped by array: a write looks at each array it may
    write once, not at each load. Every change is logged, so `undo` returns to an earlier state (as
    `_ScopedValues` does)."""

    def __init__(self) -> None:
        self.entries: dict[Key, Value] = {}
        self.by_array: dict[Value, dict[Key, None]] = {}
        self.log: list[tuple[Key, Value, Value | None]] = []
        """(key, array, the key's value before the change, None when it had none)"""

    def get(self, key: Key) -> Value | None:
        return self.entries.get(key)

    def add(self, key: Key, array: Value, value: Value) -> None:
        self.log.append((key, array, self.entries.get(key)))
        self.entries[key] = value
        self.by_array.setdefault(array, {})[key] = None

    def kill(self, writes: MemoryWrites) -> None:
        """Forget what `writes` may overwrite."""
        if writes.is_empty:
            return
        for array in [array for array in self.by_array if writes.may_write(array)]:
            for key in self.by_array.pop(array):
                self.log.append((key, array, self.entries.pop(key)))

    def mark(self) -> int:
        return len(self.log)

    def undo(self, mark: int) -> None:
        """Back to the state of `mark`."""
        while len(self.log) > mark:
            key, array, before = self.log.pop()
            if before is None:
                del self.entries[key]
                group = self.by_array[array]
                del group[key]
                if not group:
                    del self.by_array[array]
            else:
                self.entries[key] = before
                self.by_array.setdefault(array, {})[key] = None


REGION_LIMIT = 1000
"""Blocks `_forget_writes_between` looks at before it takes a join's region to write everything (the join
then forgets every load): the regions of a chain of joins overlap, so walking each in full costs the
square of the chain's length (the reverse of a 10,000-operand `and`)."""


def _forget_writes_between(block: Block, tree: DominatorTree, block_writes: dict[Block, MemoryWrites],
                           loads: _AvailableLoads) -> None:
    """Forget the loads that a block on some path from `block`'s immediate dominator to `block` (not
    through it) may overwrite; the walk ends when no load is left to forget."""
    idom = tree.idom[block]
    seen: set[Block] = set()
    worklist = [pred for pred in tree.preds[block] if tree.is_reachable(pred)]
    while worklist and loads.entries:
        current = worklist.pop()
        if current is idom or current in seen:
            continue
        if len(seen) == REGION_LIMIT:
            loads.kill(MemoryWrites(everything=True))
            return
        seen.add(current)
        loads.kill(block_writes[current])
        worklist.extend(pred for pred in tree.preds[current] if tree.is_reachable(pred))


def _replace(inst: Instruction, value: Value) -> None:
    inst.replace_all_uses_with(value)
    inst.erase()


def _number_block(block: Block, values: _ScopedValues, loads: _AvailableLoads) -> bool:
    """Value-number the instructions of `block` in order; True if one was replaced."""
    changed = False
    for inst in list(block.instructions):
        if inst.op is Op.LOAD:
            key = load_key(inst.operands[0], inst.operands[1:], inst.type)
            available = loads.get(key)
            if available is not None:
                _replace(inst, available)
                changed = True
            else:
                loads.add(key, inst.operands[0], inst)
            continue
        key = value_key(inst)
        if key is not None:
            known = values.get(key)
            if known is not None:
                _replace(inst, known)
                changed = True
            else:
                values.add(key, inst)
            continue
        loads.kill(memory_writes([inst]))
        if inst.op is Op.STORE:
            stored, array, *indices = inst.operands
            loads.add(load_key(array, tuple(indices), stored.type), array, stored)
    return changed


def common_subexpression_elimination(function: Function) -> bool:
    """Replace the redundant instructions of `function` (module docstring); True if any was replaced."""
    tree = DominatorTree(function)
    if not tree.rpo:
        return False
    block_writes = {block: memory_writes(block.instructions) for block in tree.rpo}
    changed = False
    values, loads = _ScopedValues(), _AvailableLoads()
    # (block, None) to number it; (block, marks) to leave its subtree, undoing what it added
    stack: list[tuple[Block, tuple[int, int] | None]] = [(tree.rpo[0], None)]
    while stack:
        block, marks = stack.pop()
        if marks is not None:
            values.undo(marks[0])
            loads.undo(marks[1])
            continue
        stack.append((block, (values.mark(), loads.mark())))
        if sum(1 for pred in tree.preds[block] if tree.is_reachable(pred)) > 1:
            # A join: other paths from the dominator may have written memory.
            _forget_writes_between(block, tree, block_writes, loads)
        changed |= _number_block(block, values, loads)
        stack.extend((child, None) for child in tree.children[block])
    return changed
