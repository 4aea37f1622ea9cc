"""Which `prange` loops of a kernel run as NDRange kernels on OpenCL, and how their iterations combine.

    plans, serial = plan_parallel_loops(function)     # after out_of_ssa(function)

A loop is a candidate when its header has a phi flagged `parallel` (the frontend flags a `prange` counter;
the reverse pass flags the reverse counter of a `prange` loop) and no loop around it runs in parallel
already: a top-level `prange` loop, or one nested only in serial loops (time stepping). Each work item
runs one iteration; `gid` numbers them from 0. A candidate runs in parallel only if everything about it
can be shown to be right, else it runs serially inside the serial kernel and `serial` says why (the
runtime warns once). It runs in parallel when:

  - it is counted (`ssa/trip_count.py`): one latch, one entering block, the header its only exit (no
    `break`/`return` in the body), a trip count computed before it starts;
  - every header phi is an induction variable (`start + gid * step` in work item `gid`) or a *reduction*:
    a value that the body only adds to (`fadd`/`fsub`, `iadd`/`isub` chains, through phis of branches),
    read nowhere else in the loop. Each work item starts it at 0 and hands its sum to a work-group
    reduction; the result is added to the value the loop started with (the order of the additions changes).
    A header phi that always holds one constant (`constant_phis`) is that constant in every work item;
  - the extents of the local arrays it allocates are loop-invariant, and it grows none. Each work item gets
    its own copy: a private C array for small constant extents (`PRIVATE_LIMIT` elements at most), else a
    slice of a *scratch* buffer holding one copy per work item;
  - a call in it writes no array but the local arrays allocated in it (each work item's own) that it
    passes (`_written_parameters`; what a callee reads is not checked for races);
  - a local array allocated outside it and stored to in it (or both read and added to) is an AD tape (flag
    `tape`: distinct iterations write distinct elements by construction), the shadow of a local array of
    the loop (flag `private`: it is zero at the start and end of every run, so each work item gets its own
    zeroed scratch copy), or every
    access to it in the loop uses one index value that is injective in `gid` at one position, or the
    quotient and remainder of such a value at two (the array is split between work items;
    `injective_indices.py`).

Argument arrays are trusted: `prange` promises independent iterations, and the stores of a derivative
follow the primal's. What changes is accumulation: `x[I] = x[I] + v` (a `load`, an add and a `store` of the
same element, nothing between them touching x), and `atomic_add`, become `atomic_add v, x[I]` with a mode:

  - `owned`: x is a work item's own copy, or every access to x in the loop uses one injective index at one
    position: a plain add;
  - `group`: every index is loop-invariant (a parameter that every work item reads, in the reverse pass):
    a private sum per work item, a work-group reduction, one atomic add per group;
  - `atomic`: anything else: an atomic add (`cl_ext_float_atomics` or a compare-and-swap loop).

The rewrite keeps the serial semantics (`atomic_add` adds), so the module stays valid for any backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.codegen.injective_indices import (
    ACCESSES,
    WorkItemIndices,
    array_operand,
    owner_position,
    work_item_indices,
)
from isozyme.ssa.builder import Builder
from isozyme.ssa.flags import is_local_array, local_extents
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import Op
from isozyme.ssa.reductions import is_reduction
from isozyme.ssa.trip_count import (
    InductionVariable,
    TripCount,
    analyze_trip_count,
    induction_variable,
    is_loop_invariant,
)
from isozyme.ssa.types import ArrayType

PRIVATE_LIMIT = 64
"""Local arrays of a parallel loop with at most this many elements (constant extents) are private C arrays."""


@dataclass(eq=False)
class Reduction:
    """A header phi that the body only adds to."""

    phi: Phi
    slot: int
    """Its word in the control buffer's reduction area (numbered over the whole program)."""


@dataclass(eq=False)
class ParallelLoop:
    """A loop that runs as one NDRange kernel, one iteration per work item."""

    number: int
    loop: Loop
    trip: Value
    """The trip count, computed at the end of the entering block."""
    inductions: list[InductionVariable]
    reductions: list[Reduction]
    modes: dict[Instruction, str] = field(default_factory=dict)
    """Each `atomic_add` of the loop: "owned", "group" or "atomic" (module docstring)."""
    scratch: dict[Instruction, str] = field(default_factory=dict)
    """The local arrays each work item has a copy of in a scratch buffer: "inner" (allocated in the loop)
    or "private" (a flagged array allocated before it, zero-filled per launch)."""

    @property
    def header(self) -> Block:
        return self.loop.header

    @property
    def group_adds(self) -> list[Instruction]:
        """The `atomic_add`s reduced per work group, in program order."""
        return [inst for inst, mode in self.modes.items() if mode == "group"]

    @property
    def location(self) -> str:
        """The `prange`'s source location; a reverse loop's counter has none: its body's first line."""
        phi = next((p for p in self.header.phis if "parallel" in p.flags), None)
        if phi is not None and phi.loc:
            return str(phi.loc)
        body = next((inst.loc for block in self.loop.blocks for inst in block.instructions if inst.loc), None)
        return f"{body} (block {self.header.name})" if body else f"block {self.header.name}"


class NotParallel(Exception):
    """Why a candidate loop runs serially."""


def plan_parallel_loops(function: Function, first_slot: int = 0) -> tuple[list[ParallelLoop], list[str]]:
    """The loops of `function` that run in parallel (rewritten as the module docstring says, trip counts
    emitted) and, for each candidate that runs serially, why. Run after `out_of_ssa`."""
    nest = LoopNest(function)
    constants = constant_phis(function)
    plans: list[ParallelLoop] = []
    serial: list[str] = []
    pending = list(nest.top_level)
    while pending:
        loop = pending.pop(0)
        if not any("parallel" in phi.flags for phi in loop.header.phis):
            pending[:0] = loop.children
            continue
        try:
            plan = _plan(loop, len(plans), first_slot + sum(len(p.reductions) for p in plans), constants)
        except NotParallel as reason:
            phi = next(p for p in loop.header.phis if "parallel" in p.flags)
            serial.append(f"the prange loop at {phi.loc or loop.header.name} runs serially: {reason}")
            pending[:0] = loop.children
            continue
        plans.append(plan)
    return plans, serial


def _plan(loop: Loop, number: int, first_slot: int, constants: dict[Phi, Constant]) -> ParallelLoop:
    trip = analyze_trip_count(loop)
    if not isinstance(trip, TripCount):
        raise NotParallel(str(trip))
    inductions: list[InductionVariable] = []
    reductions: list[Reduction] = []
    for phi in loop.header.phis:
        iv = induction_variable(loop, phi)
        if iv is not None:
            inductions.append(iv)
        elif is_reduction(phi, loop):
            reductions.append(Reduction(phi, first_slot + len(reductions)))
        elif phi in constants:
            continue  # the same constant in every iteration: each work item starts with it too
        else:
            raise NotParallel(f"%{phi.name or 'value'} is carried from one iteration to the next")
    for block in loop.blocks:
        for inst in list(block.instructions):
            if inst.op is Op.STORE:
                _fold_accumulation(inst)
    for block in loop.blocks:
        _sink_stores(block)
    scratch = _check_body(loop)
    modes = _accumulation_modes(loop, work_item_indices(loop, inductions), scratch)
    entering = loop.entering_blocks[0]
    count = trip.emit(Builder().before(entering.terminator))  # type: ignore[arg-type]
    return ParallelLoop(number, loop, count, inductions, reductions, modes, scratch)


def constant_phis(function: Function) -> dict[Phi, Constant]:
    """The phis that hold one constant whenever they run: every operand is that constant (bit for bit: -0.0
    is not 0.0) or such a phi. Found optimistically, as SCCP does on phis: each phi starts unknown, meets its
    operands' values (a constant, a phi's current value, anything else: not constant) until nothing changes.
    (Adjoints of a loop's temporaries that are -0.0 at the start of every iteration, carried round loops
    and through branches in ways the optimizer does not see through.)"""
    unknown, varying = object(), object()
    phis = [phi for block in function.blocks for phi in block.phis]
    state: dict[Phi, object] = {phi: unknown for phi in phis}

    def value_of(operand: Value) -> object:
        if isinstance(operand, Constant):
            return (str(operand.type), repr(operand.value))
        return state.get(operand, varying)  # type: ignore[call-overload]

    changed = True
    while changed:
        changed = False
        for phi in phis:
            if state[phi] is varying:
                continue
            met = unknown
            for operand in phi.operands:
                value = value_of(operand)
                if value is unknown:
                    continue
                met = value if met is unknown or met == value else varying
                if met is varying:
                    break
            if met is not unknown and met != state[phi]:
                state[phi] = met
                changed = True
    constants: dict[Phi, Constant] = {}
    for phi in phis:
        if state[phi] not in (unknown, varying):
            constants[phi] = next(v for v in _phi_sources(phi) if isinstance(v, Constant))
    return constants


def _phi_sources(phi: Phi) -> list[Value]:
    """The non-phi values reaching `phi` through phis."""
    seen: set[Value] = set()
    work: list[Value] = [phi]
    sources: list[Value] = []
    while work:
        value = work.pop()
        if value in seen:
            continue
        seen.add(value)
        if isinstance(value, Phi):
            work.extend(value.operands)
        else:
            sources.append(value)
    return sources


def _check_body(loop: Loop) -> dict[Instruction, str]:
    """Refuse what cannot run in parallel (module docstring); the local arrays that get scratch copies."""
    scratch: dict[Instruction, str] = {}
    for block in loop.blocks:
        for inst in block.instructions:
            if inst.op is Op.ALLOC:
                if "growable" in inst.flags or not all(is_loop_invariant(e, loop) for e in inst.operands):
                    raise NotParallel("it allocates a local array whose extents change from one iteration to "
                                      "the next")
                if not is_private_array(inst):
                    scratch[inst] = "inner"
            if inst.op is Op.GROW:
                raise NotParallel("it grows a stack tape (a loop of unknown trip count inside it)")
            if inst.op is Op.CALL:
                written = _written_parameters(inst.callee, {})
                if written is None or not all(_allocated_in(inst.operands[k], loop) for k in written):
                    raise NotParallel(f"@{inst.callee.name}, called in it, writes arrays")
    for array in _arrays_accessed(loop):
        if isinstance(array, Phi):
            raise NotParallel(f"it accesses an array through the phi %{array.name or 'array'}")
        if not _is_alloc(array):
            _check_argument_array(array, loop)
            continue
        if array.block in loop or "tape" in array.flags:  # type: ignore[union-attr]
            continue
        if "private" in array.flags:  # type: ignore[union-attr]
            scratch[array] = "private"  # type: ignore[index]
            continue
        uses = [u for u in array.users if u.block is not None and u.block in loop]
        ops = {u.op for u in uses}
        racy = Op.STORE in ops or {Op.LOAD, Op.ATOMIC_ADD} <= ops  # a local array is no `prange` promise
        if racy and owner_position(array, loop, None) is None:
            raise NotParallel(f"every iteration writes the local array %{array.name or 'array'}")
        if any(u.op is Op.CALL for u in uses):
            raise NotParallel(f"it passes the local array %{array.name or 'array'} to a call")
    return scratch


def _may_race(ops: set[Op]) -> bool:
    """Do these accesses to an argument array by every iteration conflict unless each has elements of its
    own? Loads alone do not, atomic adds alone commute, and stores alone are what `prange` promises apart."""
    return (Op.STORE in ops and len(ops & {Op.LOAD, Op.ATOMIC_ADD}) > 0) or {Op.LOAD, Op.ATOMIC_ADD} <= ops


def _check_argument_array(array: Value, loop: Loop) -> None:
    """An argument array both stored to and read (or added to) in the loop, not at one index of its own per
    work item: a read-modify-write that did not become one `atomic_add` (`_fold_accumulation`), or an
    element that one iteration writes and another reads. `prange` promises only that iterations store to
    different elements; the adjoint of a load that every iteration makes is an update of one shadow element
    by every work item, which must not become a plain load and store (a GPU loses updates): serial."""
    uses = [u for u in array.users if u.block is not None and u.block in loop]
    ops = {Op.LOAD if u.op is Op.CALL else u.op for u in uses if u.op in ACCESSES or u.op is Op.CALL}  # a callee
    if _may_race(ops) and owner_position(array, loop, None) is None:  # reads (one that writes is refused)
        raise NotParallel(f"its iterations may read and write the same elements of %{array.name or 'array'}")


def is_private_array(alloc: Instruction) -> bool:
    """Is this local array of a parallel loop a private C array (small, constant extents)?"""
    if not all(isinstance(e, Constant) for e in local_extents(alloc)):
        return False
    size = 1
    for extent in local_extents(alloc):
        size *= max(int(extent.value), 0)  # type: ignore[attr-defined]
    return size <= PRIVATE_LIMIT


def _is_alloc(value: Value) -> bool:
    """A local array: an alloc, or a view into an arena (`optimize/memory_reuse.py` places allocs outside
    parallel loops only, so a view is never a work item's own array)."""
    return is_local_array(value)


def _may_overlap(a: Value, b: Value) -> bool:
    """May the arrays share memory? Only when they are one value, either is a phi (any array), or both are
    views of one arena (whose bytes serve buffers that are live at different times)."""
    if a is b or isinstance(a, Phi) or isinstance(b, Phi):
        return True
    views = [v for v in (a, b) if isinstance(v, Instruction) and v.op is Op.VIEW]
    return len(views) == 2 and views[0].operands[-2] is views[1].operands[-2]


def _written_parameters(function: Function, memo: dict[Function, set[int] | None]) -> set[int] | None:
    """The positions of the array parameters that `function` may write: stores and atomic adds, and calls
    that write what it passes on (its own local arrays are its own). None when it may write another array
    (through an array phi, which may be any array; or in a recursive call)."""
    if function in memo:
        return memo[function]
    memo[function] = None  # while walking it: a recursive call may write anything
    written: set[int] = set()
    for inst in function.instructions():
        if inst.op in (Op.STORE, Op.ATOMIC_ADD):
            targets = [array_operand(inst)]
        elif inst.op is Op.CALL:
            inner = _written_parameters(inst.callee, memo)
            if inner is None:
                return None
            targets = [inst.operands[k] for k in inner]
        else:
            continue
        for array in targets:
            if isinstance(array, Argument):
                written.add(array.index)
            elif not _is_alloc(array):
                return None
    memo[function] = written
    return written


def _allocated_in(array: Value, loop: Loop) -> bool:
    """Is `array` a local array allocated in the loop, so that each work item has its own (a private C array
    or a slice of a scratch buffer)?"""
    return isinstance(array, Instruction) and array.op is Op.ALLOC and array.block in loop


def _arrays_accessed(loop: Loop) -> list[Value]:
    arrays: dict[Value, None] = {}
    for block in loop.blocks:
        for inst in block.instructions:
            if inst.op in ACCESSES:
                arrays[array_operand(inst)] = None
    return list(arrays)


def _accumulation_modes(loop: Loop, indices: WorkItemIndices,
                        scratch: dict[Instruction, str]) -> dict[Instruction, str]:
    modes: dict[Instruction, str] = {}
    for block in loop.blocks:
        for inst in block.instructions:
            if inst.op is not Op.ATOMIC_ADD:
                continue
            array = inst.operands[1]
            if array in scratch or (_is_alloc(array) and array.block in loop):
                modes[inst] = "owned"
                continue
            others = [u for u in array.users if u.block is not None and u.block in loop
                      and u.op in (Op.LOAD, Op.STORE)]
            if not others and all(is_loop_invariant(i, loop) for i in inst.operands[2:]):
                modes[inst] = "group"
            elif owner_position(array, loop, indices) is not None:
                modes[inst] = "owned"
            else:
                modes[inst] = "atomic"
    return modes


NEGATION = {Op.FSUB: Op.FNEG, Op.ISUB: Op.INEG}
"""`x - v` is `x + (-v)` (IEEE: exactly; integers: wrapping), so a subtracting accumulation folds too."""


def _fold_accumulation(store: Instruction) -> None:
    """`store (load x[I]) + v, x[I]` or `store (load x[I]) - v, x[I]` in one block, nothing touching x
    between: `atomic_add v, x[I]` (`atomic_add -v, x[I]`). (The reverse of `t = x[i] - means[k]` in a
    parallel loop subtracts from d_means: left a plain load and store, every work item raced on it.)"""
    value, array, *indices = store.operands
    if not isinstance(value, Instruction) or value.block is not store.block \
            or value.op not in (Op.FADD, Op.IADD, *NEGATION):
        return
    if len(value.users) != 1:
        return
    pairs = [(value.operands[0], value.operands[1])]
    if value.op not in NEGATION:
        pairs.append((value.operands[1], value.operands[0]))
    for load, addend in pairs:
        if isinstance(load, Instruction) and load.op is Op.LOAD and load.block is store.block \
                and load.operands[0] is array and _sameaccess_indices(load.operands[1:], indices) \
                and len(load.users) == 1 and addend is not load and _untouched_between(load, store, array):
            builder = Builder(loc=store.loc).before(store)
            if value.op in NEGATION:
                addend = builder.emit(NEGATION[value.op], addend)
            builder.atomic_add(addend, array, *indices)
            store.erase()
            value.erase()
            load.erase()
            return


def _sink_stores(block: Block) -> None:
    """Move each store to the end of its block when nothing after it touches its array. Array arguments and
    local arrays of a kernel are distinct memory. (A derivative reads an adjoint and zeroes it at once,
    `load d_y[i]; store 0.0, d_y[i]`; a GPU stalls on a store that follows a load of the same element that is
    still in flight, and the loads after it then wait: 4 times slower on an H200.) An array phi might be any
    array, so nothing moves past an access through one; views of one arena may share bytes (a dead buffer's
    last store, moved past a live one's load, would clobber it), so none moves past another. A check that
    fails after the store's old place now stops the work item before the store: only what an error leaves
    in memory differs."""
    instructions = block.instructions
    terminator = block.terminator
    for store in [inst for inst in instructions if inst.op is Op.STORE][::-1]:
        array = store.operands[1]
        after = instructions[instructions.index(store) + 1:-1]
        if terminator is None or isinstance(array, Phi) or any(
                inst.op in (Op.CALL, Op.GROW, Op.VIEW)
                or (inst.op in ACCESSES and _may_overlap(array_operand(inst), array)) for inst in after):
            continue
        store.move_before(terminator)


def _sameaccess_indices(a: tuple[Value, ...], b: list[Value]) -> bool:
    return len(a) == len(b) and all(x is y or (isinstance(x, Constant) and isinstance(y, Constant)
                                               and x.type == y.type and x.value == y.value) for x, y in zip(a, b))


def _untouched_between(load: Instruction, store: Instruction, array: Value) -> bool:
    instructions = load.block.instructions  # type: ignore[union-attr]
    between = instructions[instructions.index(load) + 1:instructions.index(store)]
    return not any(inst.op is Op.CALL or (inst.op in ACCESSES and array_operand(inst) is array)
                   for inst in between)


def live_ins(plan: ParallelLoop) -> list[Value]:
    """Values the loop uses that are defined before it (neither constants nor arguments), in first-use order."""
    found: dict[Value, None] = {}
    for block in plan.loop.blocks:
        for inst in block.instructions:
            for operand in inst.operands:
                if not isinstance(operand, (Constant, Argument)) and is_loop_invariant(operand, plan.loop):
                    found[operand] = None
    for iv in plan.inductions:
        if not isinstance(iv.step, (Constant, Argument)):
            found[iv.step] = None
    return list(found)


def is_array(value: Value) -> bool:
    return isinstance(value.type, ArrayType)
