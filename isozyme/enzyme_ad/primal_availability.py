"""Primal availability: which primal values the reverse pass can have without a tape, the questions behind
ways 1 to 3 of the cache planner (`cache.py`'s docstring), and which loops a tape needs a dimension for.

`PrimalAvailability` answers for one function being differentiated: is a value usable as it is in every
reverse block (`is_direct`), can it be had without a tape where a `ReverseContext` runs (`is_available`:
directly, from loop counters and induction variables, or recomputed from cheap ops and loads of memory
that nothing writes afterwards), does memory still hold what a load read (`unwritten_after`), may an array
be used as it is (`array_available`), and which stores keep a value for the reverse pass to reload.
`PrimalValues` (`cache.py`) asks these questions while it emits the reverse pass's code; this module only
reads the IR and changes none of it. Invariant: a value said to be available is one that `cache.py` can
rebuild at the use, in the iteration being reversed, from values it has at hand and memory that still
holds what the forward pass read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.enzyme_ad.prepare import LoopFrame
from isozyme.enzyme_ad.triangular_index import TriangularIndex, positive_test, triangular_index
from isozyme.optimize.function_attributes import MemoryEffects, module_memory_effects
from isozyme.optimize.memory_effects import array_root, call_effects
from isozyme.ssa.cfg import reachable_from
from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.trip_count import bounded_by, induction_variable, same_value

CHEAP_OPS: frozenset[Op] = frozenset({
    Op.IADD, Op.ISUB, Op.IMUL, Op.IFLOORDIV, Op.IFLOORMOD, Op.UDIV, Op.INEG, Op.IABS, Op.IMIN, Op.IMAX, Op.SHL, Op.ASHR,
    Op.AND, Op.OR, Op.XOR, Op.FADD, Op.FSUB, Op.FMUL, Op.FNEG, Op.FABS, Op.FMIN, Op.FMAX, Op.FLOOR, Op.CEIL,
    Op.ICMP_EQ, Op.ICMP_NE, Op.ICMP_SLT, Op.ICMP_SLE, Op.ICMP_SGT, Op.ICMP_SGE, Op.FCMP_OEQ, Op.FCMP_UNE,
    Op.FCMP_OLT, Op.FCMP_OLE, Op.FCMP_OGT, Op.FCMP_OGE, Op.SELECT, Op.SITOFP, Op.FPTOSI, Op.FPEXT, Op.FPTRUNC,
    Op.SEXT, Op.TRUNC, Op.ZEXT, Op.DIM,
})
"""Ops the reverse pass recomputes rather than tapes. The trapping integer ops and `fptosi` are safe to
repeat: the forward pass ran them on the same operands without trapping."""


def is_cheap(inst: Instruction) -> bool:
    """Is `inst` recomputed rather than taped when its operands are at hand: a CHEAP_OPS op, or `pow` by
    the constant 2.0 or 3.0 (which isozyme defines as the products x*x and x*x*x, `ssa/semantics.py`)?"""
    if inst.op is Op.POW:
        exponent = inst.operands[1]
        return isinstance(exponent, Constant) and exponent.value in (2.0, 3.0)
    return inst.op in CHEAP_OPS


MAX_TAPED_LEAVES = 2
"""A cheap op whose unavailable operands come from at most this many loads and phis is recomputed from
them (taped) rather than taped itself."""

RECOMPUTE_DEPTH = 12
"""How deep a chain of cheap ops is recomputed before the planner tapes its result instead. The packed
triangle's index `d + col * d - col * (col + 1) // 2 + row - col - 1` is 8 ops deep under its load: at 6,
`icf[k, that]` was taped, a value per (point, row, col), 1.7 GB for GMM's pairs kernel at d=64 K=100."""


@dataclass(eq=False)
class ReverseContext:
    """Where reverse code is being emitted: the primal block being reversed and its loops' counters."""

    block: Block
    """The primal block whose reverse is being built."""
    counters: dict[Loop, Value] = field(default_factory=dict)
    """For each loop around `block`, the value its counter had in the iteration being reversed."""


class PrimalAvailability:
    """Which primal values reverse code can have without a tape, for one function (module docstring)."""

    def __init__(self, function: Function, tree: DominatorTree, nest: LoopNest, frames: dict[Loop, LoopFrame],
                 return_block: Block) -> None:
        self.function, self.tree, self.nest, self.frames = function, tree, nest, frames
        self.return_block = return_block
        self.counters = {frame.counter: frame for frame in frames.values()}
        writers = writers_by_root(function)
        # with each writer its block now: the reverse pass replaces some writers (a split call becomes its
        # augmented call), and a replaced one still writes there
        self.writers = None if writers is None else \
            {root: [(inst, inst.block) for inst in insts] for root, insts in writers.items()}
        self.written_roots = None if writers is None else set(writers)
        self._reach: dict[Block, set[Block]] = {}
        self._triangular: dict[Value, TriangularIndex | None] = {}

    def _counted_here(self, loop: Loop, context: ReverseContext) -> bool:
        """Is the iteration of `loop` known where `context` runs: its reverse counter, or its trip count
        after it (a loop of unknown trip count records no counter to recompute from)?"""
        return loop in context.counters or self.frames[loop].trip is not None

    def _reloadable(self, value: Instruction, context: ReverseContext) -> bool:
        """Is `value` a load from an array the function never writes, whose indices are at hand or
        induction variables (way 3 with the induction rule of way 2: `icf[k, idx]` with `idx += 1` in the
        loop)? Loading again costs no tape where taping the value costs one element per iteration."""
        if value.op is not Op.LOAD or not self.unwritten_after(value) or not self.array_available(value.operands[0]):
            return False
        for index in value.operands[1:]:
            induction = self._induction(index)
            if not self.is_available(index, context) \
                    and (induction is None or not self._counted_here(induction[0], context)):
                return False
        return True

    def _kept_store(self, value: Instruction, context: ReverseContext) -> Instruction | None:
        """A `store value, A[i1, ..., ik]` after `value` in its block whose element still holds `value` when
        the reverse pass runs, so the reverse reloads it instead of taping it (`h1[j, b] = sigmoid(..)`):
        no other write to A's root can run after the store, the store writes a different element in every
        iteration of the loops around it (`_distinct_per_iteration`), A is available to reverse code and
        its indices are at hand where the reverse needs them (as for `_reloadable`). None otherwise."""
        if value.op is Op.LOAD or value.block is None or self.writers is None:
            return None
        block = value.block
        for use in value.uses:
            store = use.user
            if store.op is not Op.STORE or use.index != 0 or store.block is not block \
                    or block.position(store) < block.position(value):
                continue
            if self.array_available(store.operands[1]) and self._unwritten_after(store, store.operands[1]) \
                    and self._distinct_per_iteration(store) \
                    and all(self._index_at_hand(index, context) for index in store.operands[2:]):
                return store
        return None

    def forwarding_store(self, load: Instruction) -> tuple[Instruction, Loop] | None:
        """(S, J) when `load`, `A[e]` of a 1-D array, reads what the store S, `A[j] = v`, wrote, with j the
        counter of the loop J: then the reverse pass can have the load's value as v in the iteration e of J
        (recomputed, or taped once for all such loads), where a tape of the load's own would hold copies of
        v (GMM's centred point, `xcentered[j] = x[i, j] - means[k, j]`, read by `qtimesx` in two loops).
        It holds when
        - S is the only write to A's root, and runs once in every iteration of J (its block is in J, in no
          loop inside it, and dominates J's latches), and J leaves only from its header, after its trip
          count of iterations;
        - the load is in the loops around J but not in J, and J has run in their iteration whenever the load
          runs (`_entered_before`), so nothing wrote A since J did;
        - e is the counter of a loop C of J's trip count and the load is in C's body (not its header, where
          the counter reaches the trip count): e is an element S wrote.
        None otherwise."""
        if load.op is not Op.LOAD or len(load.operands) != 2 or self.writers is None or load.block is None:
            return None
        root = array_root(load.operands[0])
        writers = self.writers.get(root, []) if root is not None else []
        if len(writers) != 1 or writers[0][0].op is not Op.STORE or len(writers[0][0].operands) != 3:
            return None
        store = writers[0][0]
        loop = self._read_after_loop(load, store)
        if loop is None:
            return None
        return store, loop

    def _entered_before(self, loop: Loop, trip: Value, block: Block) -> bool:
        """Has `loop` run, in the iteration of the loops around it, whenever `block` runs with `trip` > 0?
        Yes when its header dominates `block`, or when its guard does: a block, in the same loops, ending
        in `cbr trip > 0` whose true edge enters the loop (directly or through a preheader)."""
        if self.tree.dominates(loop.header, block):
            return True
        for guard in loop.parent.blocks if loop.parent is not None else self.function.blocks:
            terminator = guard.terminator
            if terminator is None or terminator.op is not Op.CBR or self.nest.loop_of(guard) is not loop.parent \
                    or not self.tree.dominates(guard, block):
                continue
            enters = terminator.successors[0]
            if enters is not loop.header and enters.successors != (loop.header,):
                continue
            condition = terminator.operands[0]
            if isinstance(condition, Instruction) and positive_test(condition, trip):
                return True
        return False

    def _distinct_per_iteration(self, store: Instruction) -> bool:
        """Does `store` write a different element in every iteration of every loop around it? Each loop
        claims an index position of its own holding its induction variable (nonzero constant step), or
        that plus or minus a value defined outside the loop: then two runs of the store in different
        iterations of some loop (the same iterations of the loops outside it) differ in that index. Two
        loops may share a position that holds a row-major pair of their counters (`_radix_pair`, the
        attention's `probs[b, h * S + i, j]`)."""
        indices = store.operands[2:]
        shared: dict[Loop, int] = {}
        for position, index in enumerate(indices):
            pair = self._radix_pair(index, store)
            if pair is not None:
                shared.setdefault(pair[0], position)
                shared.setdefault(pair[1], position)
        claimed: set[int] = set()
        for loop in loops_around(self.nest, store.block):  # type: ignore[arg-type]
            position = next((p for p, index in enumerate(indices)
                             if p not in claimed and self._steps_with(index, loop)), None)
            if position is None:
                position = shared.get(loop)
            if position is None:
                return False
            claimed.add(position)
        return True

    def _radix_pair(self, index: Value, store: Instruction) -> tuple[Loop, Loop] | None:
        """(O, I) when `index` is `c + o * E + i` (its three terms in any order of `iadd`s): `c` and `E`
        defined outside the loop O, `o` an induction variable of O with a nonzero constant step, `i` the counter of
        a loop I around `store` inside O, whose trip count is `E` (or `max(E, 0)`), and `store` not in I's
        header (where the counter reaches the trip count). Then 0 <= i < E wherever the store runs, so
        two runs in different iterations of O, or of I (the same iterations of the loops outside),
        write different values of `index`: the position serves both loops."""
        terms: list[Value] = []
        pending = [index]
        while pending and len(terms) <= 3:
            value = pending.pop()
            if isinstance(value, Instruction) and value.op is Op.IADD:
                pending.extend(value.operands)
            else:
                terms.append(value)
        if len(terms) > 3:
            return None
        for product in terms:
            if not isinstance(product, Instruction) or product.op is not Op.IMUL:
                continue
            for outer_iv, extent in (product.operands, product.operands[::-1]):
                induction = self._induction(outer_iv)
                if induction is None or not isinstance(induction[2], Constant) or induction[2].value == 0:
                    continue
                outer = induction[0]
                if not _defined_outside(extent, outer):
                    continue  # rows of a length that varies with o may overlap
                rest = [term for term in terms if term is not product]
                for counter in rest:
                    frame = self.counters.get(counter)  # type: ignore[arg-type]
                    inner = frame.loop if frame is not None else None
                    if inner is None or inner is outer or not outer.contains(inner) \
                            or not inner.contains(store.block) or store.block is inner.header \
                            or frame.trip is None or not bounded_by(frame.trip, extent) \
                            or any(not _defined_outside(term, outer) for term in rest if term is not counter):
                        continue
                    return outer, inner
        return None

    def _steps_with(self, index: Value, loop: Loop) -> bool:
        """Is `index` an induction variable of `loop` with a nonzero constant step, or `iv + c`, `c + iv`,
        `iv - c` or `c - iv` for such an `iv` and a `c` defined outside `loop`?"""
        while True:  # down a chain of `iadd`s and `isub`s, without recursion (it may be long)
            induction = self._induction(index)
            if induction is not None:
                step = induction[2]
                return induction[0] is loop and isinstance(step, Constant) and step.value != 0
            if not isinstance(index, Instruction) or index.op not in (Op.IADD, Op.ISUB):
                return False
            left, right = index.operands
            if _defined_outside(right, loop):
                index = left
            elif _defined_outside(left, loop):
                index = right  # (when both are, neither steps with the loop)
            else:
                return False

    def _index_at_hand(self, index: Value, context: ReverseContext) -> bool:
        """Is `index` available without a tape, or an induction variable of a loop counted where `context`
        runs (the index rule of `_reloadable`)?"""
        induction = self._induction(index)
        return self.is_available(index, context) \
            or (induction is not None and self._counted_here(induction[0], context))

    def _cheaper_from_leaves(self, value: Instruction, context: ReverseContext) -> bool:
        """Is `value` a cheap op better recomputed from the few loads and phis it is made of, taped
        instead of it? Those sources are often shared by several values the reverse pass needs (`right - q`
        and `q - left` both of `q`), so taping them tapes fewer elements (way 3 of the module docstring)."""
        if not is_cheap(value) or value.op is Op.DIM:
            return False
        leaves: set[Value] = set()
        if not self._collect_leaves(value, context, leaves, 0):
            return False
        return len(leaves) <= MAX_TAPED_LEAVES

    def _collect_leaves(self, value: Value, context: ReverseContext, leaves: set[Value], depth: int) -> bool:
        if value.type.is_array:
            return self.array_available(value)
        if self.is_available(value, context):
            return True
        if not isinstance(value, Instruction) or depth >= RECOMPUTE_DEPTH:
            return False
        if isinstance(value, Phi) or value.op is Op.LOAD or not is_cheap(value):
            leaves.add(value)  # `1 + exp(-z)` from the tape of `exp(-z)`, which the reverse needs anyway
            return len(leaves) <= MAX_TAPED_LEAVES
        return all(self._collect_leaves(operand, context, leaves, depth + 1) for operand in value.operands)

    def is_direct(self, value: Value) -> bool:
        """Is `value` usable as it is in every reverse block (way 1)?"""
        if not isinstance(value, Instruction) or value.block is None:
            return isinstance(value, (Argument, Constant))
        block = value.block
        return self.nest.loop_of(block) is None and self.tree.dominates(block, self.return_block)

    def is_available(self, value: Value, context: ReverseContext) -> bool:
        """Can `value` be had without a tape (ways 1 to 3)?"""
        return self._available(value, context, 0, {})

    def _available(self, value: Value, context: ReverseContext, depth: int,
                   memo: dict[tuple[Value, int], bool]) -> bool:
        """`is_available` at `depth` in a chain of recomputed ops; `memo` holds the answers of this query
        (an index chain reaches the same operand along many paths: `col * (col + 1)` and `col * d`)."""
        key = (value, depth)
        if key not in memo:
            memo[key] = self._available_here(value, context, depth, memo)
        return memo[key]

    def _available_here(self, value: Value, context: ReverseContext, depth: int,
                        memo: dict[tuple[Value, int], bool]) -> bool:
        if isinstance(value, (Argument, Constant)) or self.is_direct(value):
            return True
        frame = self.counters.get(value)
        if frame is not None:
            return frame.loop in context.counters or (frame.trip is not None
                                                      and self._available(frame.trip, context, depth + 1, memo))
        if not isinstance(value, Instruction) or depth >= RECOMPUTE_DEPTH:
            return False
        triangular = self.triangular(value)
        if triangular is not None:
            return self._counted_here(triangular.loop, context) \
                and self._available(triangular.start, context, depth + 1, memo) \
                and self._available(triangular.bound, context, depth + 1, memo)
        induction = self._induction(value)
        if induction is not None:
            loop, start, step = induction
            if loop not in context.counters and self.frames[loop].trip is None:
                return False  # after a loop of unknown trip count: taped
            return self._available(start, context, depth + 1, memo) and self._available(step, context, depth + 1, memo)
        if isinstance(value, Phi):
            return False
        if value.op is Op.LOAD:
            if not self.unwritten_after(value) or not self.array_available(value.operands[0]):
                return False
            return all(self._available(index, context, depth + 1, memo) for index in value.operands[1:])
        if not is_cheap(value):
            return False
        return all(self.array_available(operand) if operand.type.is_array
                   else self._available(operand, context, depth + 1, memo) for operand in value.operands)

    def unwritten_after(self, load: Instruction) -> bool:
        """Does memory still hold what `load` read when the reverse pass runs? Yes when no write to its
        array's root can run after it: none in a block reachable from the load's block, nor later in that
        block (`qdiag`, filled before the loops that read it)."""
        return self._unwritten_after(load, load.operands[0])

    def _unwritten_after(self, access: Instruction, array: Value) -> bool:
        """Can no write to the root of `array` other than `access` itself run after `access`?"""
        root = array_root(array)
        if root is None or self.writers is None:
            return False
        block = access.block
        assert block is not None
        reach = self._reachable(block)
        position = block.position(access)
        for writer, written in self.writers.get(root, ()):
            if writer is access:
                continue
            later = written in reach or \
                (written is block and (writer.block is not block or block.position(writer) > position))
            if later and not self._writes_another_slab(access, writer, written, root) \
                    and not self._wrote_before(access, writer):
                return False
        return True

    def _wrote_before(self, load: Instruction, store: Instruction) -> bool:
        """Did `store` write the element `load` reads before the load ran, and never write it again? Then
        the store, running later, is no write that changes what the load read. Yes when the store writes a
        different element in every iteration of the loops around it (`_distinct_per_iteration`), so once
        written, an element stays, and the load reads what the loop J around the store wrote whole
        (`_read_after_loop`): `probs[b, r, j]` written in `for j in range(i + 1)`, read in the next loop
        of the same trip count."""
        return load.op is Op.LOAD and store.op is Op.STORE and store.operands[1] is load.operands[0] \
            and self._read_after_loop(load, store) is not None and self._distinct_per_iteration(store)

    def _read_after_loop(self, load: Instruction, store: Instruction) -> Loop | None:
        """J when `load`, `A[..., e, ...]`, reads an element the store S, `A[..., j, ...]`, wrote, with j
        the counter of the loop J and the other indices the same values, defined outside J and the load's
        loops, in the iteration of the loops around J where the load runs. It holds when
        - S runs once in every iteration of J (its block is in J, in no loop inside it, and dominates J's
          latches), and J leaves only from its header, after its trip count of iterations;
        - the load is in the loops around J but not in J, and J has run in their iteration whenever the load
          runs (`_entered_before`);
        - e is the counter of a loop C of J's trip count and the load is in C's body (not its header, where
          the counter reaches the trip count): e is an element S wrote.
        None otherwise."""
        read, stored = load.operands[1:], store.operands[2:]
        if len(read) != len(stored) or load.block is None or store.block is None:
            return None
        differing = [p for p, (a, b) in enumerate(zip(read, stored)) if not same_value(a, b)]
        if len(differing) != 1:
            return None
        position = differing[0]
        stored_frame, read_frame = self.counters.get(stored[position]), self.counters.get(read[position])  # type: ignore[arg-type]
        if stored_frame is None or read_frame is None or stored_frame.trip is None \
                or not same_value(read_frame.trip, stored_frame.trip):
            return None
        loop, reader = stored_frame.loop, read_frame.loop
        stored_in, read_in = store.block, load.block
        if self.nest.loop_of(stored_in) is not loop or read_in is reader.header or not reader.contains(read_in) \
                or loop.contains(read_in) or not self._entered_before(loop, stored_frame.trip, read_in) \
                or not all(self.tree.dominates(stored_in, latch) for latch in loop.latches):
            return None
        if loops_around(self.nest, read_in)[:loop.depth - 1] != loops_around(self.nest, loop.header)[:-1]:
            return None
        if any(not loop.contains(successor) for block in loop.blocks if block is not loop.header
               for successor in block.successors):
            return None  # an exit other than the header's (break, return): maybe fewer iterations
        if any(p != position and (not _defined_outside(a, loop) or not _defined_outside(a, reader)
                                  or not _defined_outside(b, loop) or not _defined_outside(b, reader))
               for p, (a, b) in enumerate(zip(read, stored))):
            return None
        return loop

    def _writes_another_slab(self, access: Instruction, writer: Instruction, written: Block, root: Value) -> bool:
        """Can `writer`, when it runs after `access`, never touch the element `access` touched, because both
        index one position by the same counter of a top-level loop around them (a layer loop writing
        `a[l, ...]` in iteration l)? Both use `root` itself, a position holds `iv + c_access` and
        `iv + c_writer` (`iv` an induction variable of the loop with a constant step, the c constants);
        in a later iteration (k steps on) the writer's index equals the access's only when k * step ==
        c_access - c_writer, and in the same iteration (when the writer is reachable from the access
        without going around the loop) only when the constants are equal. The loop must be top-level: it
        runs once per call, so its counter never takes a value twice."""
        if writer.op not in (Op.STORE, Op.ATOMIC_ADD) or writer.operands[1] is not root \
                or _accessed_array(access) is not root:
            return False
        for mine, theirs in zip(_indices(access), writer.operands[2:]):
            ours, other = _counter_offset(mine), _counter_offset(theirs)
            if ours is None or other is None or ours[0] is not other[0]:
                continue
            induction = self._induction(ours[0])
            if induction is None or induction[0].parent is not None or access.block not in induction[0] \
                    or written not in induction[0] or not isinstance(induction[2], Constant) \
                    or induction[2].value == 0:
                continue
            loop, step, delta = induction[0], induction[2].value, ours[1] - other[1]
            if delta % step == 0 and delta // step >= 1:
                continue  # a later iteration writes this slab
            if delta == 0 and (written is access.block
                               or written in _reachable_within_iteration(access.block, loop)):  # type: ignore[arg-type]
                continue  # the same iteration writes it after the access
            return True
        return False

    def _reachable(self, block: Block) -> set[Block]:
        if block not in self._reach:
            self._reach[block] = reachable_from(block)
        return self._reach[block]

    def array_available(self, array: Value) -> bool:
        """Can reverse code use the array value `array` itself: an argument, or a local array allocated once
        (outside loops, on every path)? (Arrays are never taped.)"""
        return isinstance(array, Argument) or self.is_direct(array)

    def _induction(self, value: Value) -> tuple[Loop, Value, Value] | None:
        """(loop, start, step) when `value` is an integer induction variable of its loop's header: it
        is `start + counter * step` in every iteration (SCEV's add recurrence), so it needs no tape."""
        if not isinstance(value, Phi) or value.block is None or not value.type.is_int:
            return None
        loop = self.nest.loop_of(value.block)
        if loop is None or loop.header is not value.block:
            return None
        iv = induction_variable(loop, value)
        return (loop, iv.start, iv.step) if iv is not None else None

    def triangular(self, value: Value) -> TriangularIndex | None:
        """`value` as the running index of a packed triangle (`triangular_index.py`), or None."""
        if value not in self._triangular:
            self._triangular[value] = triangular_index(value, self.nest, self.frames)
        return self._triangular[value]

    def _same_in_every_iteration(self, value: Instruction, loop: Loop) -> bool:
        """Does the load `value` read the same element, unchanged, in every iteration of `loop` (its array
        and indices are defined outside the loop, and nothing in the loop writes the array)? Then its
        tape needs no index for that loop: every iteration stores the same value into one element (`h[j]`
        read in `for o: for j:`, written only before). Not for a `prange` loop (its iterations would
        write one element at once) nor in the header of the innermost loop (which runs once more)."""
        if value.op is not Op.LOAD or self.writers is None or value.block is loop.header \
                or any("parallel" in phi.flags for phi in loop.header.phis):
            return False
        if any(self._varies_with(operand, loop, 0) for operand in value.operands):
            return False
        root = array_root(value.operands[0])
        return root is not None and not any(written in loop for _, written in self.writers.get(root, ()))

    def _varies_with(self, value: Value, loop: Loop, depth: int) -> bool:
        """May `value` differ between iterations of `loop` (for the same iterations of the loops inside
        it)? Not when defined outside it, nor for an induction variable of an inner loop whose start and
        step do not (its counter is kept in the tape's index), nor for pure ops of such values."""
        if not isinstance(value, Instruction) or value.block not in loop:
            return False
        if depth >= RECOMPUTE_DEPTH:
            return True
        induction = self._induction(value)
        if induction is not None and induction[0] is not loop:
            return self._varies_with(induction[1], loop, depth + 1) or self._varies_with(induction[2], loop, depth + 1)
        if isinstance(value, Phi) or not value.info.pure:
            return True
        return any(self._varies_with(operand, loop, depth + 1) for operand in value.operands)


def written_roots(function: Function) -> set[Value] | None:
    """The array roots some store or atomic add of the function writes; None when a write goes through an
    array of unknown root (a phi of arrays), which may be any array: then no load counts as unwritten."""
    writers = writers_by_root(function)
    return None if writers is None else set(writers)


def writers_by_root(function: Function) -> dict[Value, list[Instruction]] | None:
    """The instructions that write each array root (stores, atomic adds, grows, calls: the arguments their
    callee's summary says it may write, `function_attributes.py`); None as `written_roots` says."""
    written: dict[Value, list[Instruction]] = {}
    summaries: dict[Function, MemoryEffects] | None = None
    for inst in function.instructions():
        if not OP_INFO[inst.op].writes_memory:
            continue
        if inst.op is Op.CALL:
            effects = call_effects(inst)
            if not effects.writes:
                continue
            if not effects.writes_only_arguments:
                return None
            callee = inst.callee
            if summaries is None and isinstance(callee, Function) and callee.module is not None:
                summaries = module_memory_effects(callee.module)
            summary = summaries.get(callee) if summaries is not None else None  # type: ignore[arg-type]
            roots = [array_root(array) for position, array in enumerate(inst.operands)
                     if array.type.is_array and (summary is None or position in summary.writes)]
        else:
            roots = [array_root(inst.operands[0 if inst.op is Op.GROW else 1])]
        if None in roots:
            return None
        for root in roots:
            written.setdefault(root, []).append(inst)  # type: ignore[arg-type]
    return written


def _accessed_array(access: Instruction) -> Value:
    return access.operands[1] if access.op in (Op.STORE, Op.ATOMIC_ADD) else access.operands[0]


def _indices(access: Instruction) -> list[Value]:
    return access.operands[2:] if access.op in (Op.STORE, Op.ATOMIC_ADD) else access.operands[1:]


def _counter_offset(index: Value) -> tuple[Value, int] | None:
    """(phi, c) when `index` is an integer phi plus or minus a constant `c` (0 for the phi itself)."""
    if isinstance(index, Phi):
        return index, 0
    if not isinstance(index, Instruction) or index.op not in (Op.IADD, Op.ISUB):
        return None
    left, right = index.operands
    if isinstance(left, Phi) and isinstance(right, Constant):
        return left, right.value if index.op is Op.IADD else -right.value
    if index.op is Op.IADD and isinstance(right, Phi) and isinstance(left, Constant):
        return right, left.value
    return None


def _reachable_within_iteration(block: Block, loop: Loop) -> set[Block]:
    """The blocks of `loop` reachable from `block` without taking an edge to the loop's header."""
    seen: set[Block] = set()
    pending = [block]
    while pending:
        current = pending.pop()
        for successor in current.terminator.successors if current.terminator is not None else ():
            if successor is not loop.header and successor in loop and successor not in seen:
                seen.add(successor)
                pending.append(successor)
    return seen


def _defined_outside(value: Value, loop: Loop) -> bool:
    """Is `value` the same in every iteration of `loop` (a constant, an argument, or defined outside it)?"""
    return not (isinstance(value, Instruction) and value.block in loop)


def loops_around(nest: LoopNest, block: Block) -> list[Loop]:
    """The loops containing `block`, outermost first."""
    loops = []
    loop = nest.loop_of(block)
    while loop is not None:
        loops.append(loop)
        loop = loop.parent
    return loops[::-1]
