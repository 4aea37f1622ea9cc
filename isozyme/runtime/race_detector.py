"""The race detector: the reference interpreter running every parallel loop the way a GPU may run it.

    ISOZYME_CHECK_RACES=1 python -m pytest ...      # every kernel and derivative on `interp` is checked
    with iz.testing.check_races(): ...               # the same, in a block (tests)

A green run on PoCL (2 cores, work items almost in order) proves nothing about a GPU, where the work items
of a `prange` loop run in any order and at once. With race checking on, the `interp` backend runs the
program the OpenCL backend would run: the same preparation (one latch and a preheader per loop, local
arrays placed in their arena, out-of-SSA's split edges) and the same parallel-loop plan
(`codegen/parallel_loops.py`: which loops run as NDRange kernels, which `x[I] = x[I] + v` became
`atomic_add`s, which local arrays every work item has its own copy of). Each loop the plan runs in
parallel then runs as its work items would:

  - its iterations in a shuffled order (seeded: the same order on every run), each starting from what
    the plan gives a work item: induction variables at `start + gid * step`, reductions at 0 (their sums
    are added to the value the loop started with afterwards), the constant phis at their constant;
  - a local array of the loop's plan that every work item has a copy of ("private": a shadow allocated
    before the loop) is a fresh zeroed array in every iteration, as the work item's scratch copy is;
  - every access to memory made outside the iteration's own fresh arrays is recorded per element (by
    address, so views of one arena and their arrays are one memory): which iteration wrote it, read it,
    added to it atomically. A write by one iteration to an element that another iteration reads, writes or
    adds to, a read of an element that another wrote or added to, or an atomic add to an element another
    read or wrote plainly raises `DataRace`, naming the array, the element, the kernel lines of both
    accesses and both iterations. Atomic adds commute with each other (the plan's `owned`, `group` and
    `atomic` modes differ only in how they are made safe, and `owned` is checked like any access: it
    claims one work item per element); reductions of scalars are the plan's own.

A loop that the plan runs serially (and every other loop) runs as the interpreter always runs it. Arrays
are compared by address, so a kernel's result is the same as without checking, up to the order of float
additions in reductions and atomic adds.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from isozyme.codegen.out_of_ssa import out_of_ssa
from isozyme.codegen.parallel_loops import ParallelLoop, plan_parallel_loops
from isozyme.optimize.loop_canonicalization import canonicalize_loop_structure
from isozyme.optimize.memory_reuse import place_module_in_arena
from isozyme.ssa.interpreter import (
    Env,
    Interpreter,
    InterpreterError,
    RuntimeValue,
    check_arguments,
    located,
    read,
)
from isozyme.ssa.ir import Block, Function, Instruction, Module
from isozyme.ssa.ops import Op
from isozyme.ssa.semantics import SEMANTICS, apply_rule

ENVIRONMENT_VARIABLE = "ISOZYME_CHECK_RACES"


class DataRace(RuntimeError):
    """Two iterations of a parallel loop touch one element, at least one of them writing, not both adding
    atomically (module docstring)."""


def races_checked() -> bool:
    """Is race checking on (`ISOZYME_CHECK_RACES` set to anything but "", "0")?"""
    return os.environ.get(ENVIRONMENT_VARIABLE, "") not in ("", "0")


def checks_races(backend: str) -> bool:
    """Does `backend` check races now (the interpreter only)? Part of the keys of compiled entries."""
    return backend == "interp" and races_checked()


@contextmanager
def check_races() -> Iterator[None]:
    """Race checking on inside the block (kernels compiled for `interp` in it check their parallel loops)."""
    before = os.environ.get(ENVIRONMENT_VARIABLE)
    os.environ[ENVIRONMENT_VARIABLE] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[ENVIRONMENT_VARIABLE]
        else:
            os.environ[ENVIRONMENT_VARIABLE] = before


def interpreted(module: Module, function: Function) -> Callable[[Sequence[object]], object]:
    """Run `function` (of `module`, which this may change in place) on argument values: with the race
    detector when race checking is on now, else with the plain interpreter."""
    plans = prepare(module, function) if races_checked() else None

    def run(args: Sequence[object]) -> object:
        values = check_arguments(function, args)
        interpreter = Interpreter() if plans is None else RaceCheckingInterpreter(plans=plans)
        with np.errstate(all="ignore"):
            return interpreter.call(function, values)
    return run


def prepare(module: Module, function: Function) -> dict[Block, ParallelLoop]:
    """What the OpenCL backend does to `module` before it renders code (`runtime/opencl_backend._emit`,
    `codegen/opencl_program.emit_opencl`), in place: the plans of `function`'s parallel loops, by header."""
    canonicalize_loop_structure(function)
    place_module_in_arena(module)
    out_of_ssa(function)
    plans, _ = plan_parallel_loops(function)
    return {plan.header: plan for plan in plans}


# --- accesses -----------------------------------------------------------------------------------------------


@dataclass
class _Access:
    """An iteration's access to an element: which iteration, and the instruction."""

    iteration: int
    inst: Instruction


@dataclass
class _Element:
    """What the iterations of the running loop did to one element: the first writer, and the first two
    iterations that read it and that added to it atomically (two suffice to name another one)."""

    index: tuple[int, ...]
    writer: _Access | None = None
    readers: list[_Access] = field(default_factory=list)
    adders: list[_Access] = field(default_factory=list)


KINDS = {"writer": "wrote", "readers": "read", "adders": "added to"}


@dataclass
class _Launch:
    """One run of a parallel loop: the iteration running now and what the iterations did to memory."""

    plan: ParallelLoop
    iteration: int = -1
    elements: dict[int, _Element] = field(default_factory=dict)
    fresh: list[np.ndarray] = field(default_factory=list)
    """Arrays allocated by the iterations, kept alive until the loop ends so no address is reused."""


def _address(array: np.ndarray, index: tuple[int, ...]) -> int:
    return int(array.__array_interface__["data"][0]) + sum(i * s for i, s in zip(index, array.strides))


class RaceCheckingInterpreter(Interpreter):
    """The interpreter with each planned parallel loop run as shuffled work items (module docstring)."""

    def __init__(self, plans: dict[Block, ParallelLoop], seed: int = 0) -> None:
        super().__init__()
        self.plans = plans
        self.random = random.Random(seed)
        self.launch: _Launch | None = None
        self.handlers.update({Op.LOAD: self._load, Op.STORE: self._store, Op.ATOMIC_ADD: self._atomic_add,
                              Op.ALLOC: self._alloc})

    def _step(self, block: Block, pred: Block | None, env: Env) -> object:
        plan = self.plans.get(block)
        if plan is None or self.launch is not None or pred is None or pred in plan.loop:
            return super()._step(block, pred, env)
        self._run_in_parallel(plan, pred, env)
        return self._run_body(block, env)  # the header once more, with the values after the last iteration

    # --- the loop --------------------------------------------------------------------------------------

    def _run_in_parallel(self, plan: ParallelLoop, entering: Block, env: Env) -> None:
        """Every iteration in a shuffled order, then the header phis set as after the last iteration."""
        trip = read(env, plan.trip)
        if trip < 0:  # type: ignore[operator]
            raise InterpreterError(f"the prange loop at {plan.location} has a negative trip count {trip}")
        starts = {phi: read(env, phi.incoming_value(entering)) for phi in plan.header.phis}
        steps = {iv.phi: read(env, iv.step) for iv in plan.inductions}
        private = {alloc: env[alloc] for alloc, kind in plan.scratch.items() if kind == "private" and alloc in env}
        sums: dict[object, list[RuntimeValue]] = {r.phi: [] for r in plan.reductions}
        order = list(range(trip))  # type: ignore[arg-type]
        self.random.shuffle(order)
        self.launch = launch = _Launch(plan)
        try:
            for gid in order:
                launch.iteration = gid
                for alloc, array in private.items():
                    env[alloc] = copy = np.zeros_like(array)
                    launch.fresh.append(copy)
                for phi in plan.header.phis:
                    env[phi] = self._item_start(plan, phi, starts, steps, gid)
                latch = self._run_iteration(plan, env)
                for phi, partial in sums.items():
                    partial.append(read(env, phi.incoming_value(latch)))  # type: ignore[attr-defined]
        finally:
            self.launch = None
            env.update(private)
        for phi in plan.header.phis:
            env[phi] = starts[phi]
        for iv in plan.inductions:
            env[iv.phi] = _wrapped(iv.phi, starts[iv.phi], trip * steps[iv.phi])  # type: ignore[operator]
        for phi, partials in sums.items():
            total = starts[phi]
            for partial in partials:
                total = _wrapped(phi, total, partial)
            env[phi] = total

    def _item_start(self, plan: ParallelLoop, phi: object, starts: dict, steps: dict, gid: int) -> RuntimeValue:
        if phi in steps:
            return _wrapped(phi, starts[phi], gid * steps[phi])
        if any(r.phi is phi for r in plan.reductions):
            return -0.0 if phi.type.is_float else 0  # type: ignore[attr-defined]  # the sum's identity
        return starts[phi]  # a constant in every iteration (parallel_loops.constant_phis)

    def _run_iteration(self, plan: ParallelLoop, env: Env) -> Block:
        """From the header (its phis set) round to the back edge; the latch it came from."""
        block = plan.header
        while True:
            outcome = self._run_body(block, env)
            if outcome is plan.header:
                return block
            if not isinstance(outcome, Block) or outcome not in plan.loop:
                raise InterpreterError(f"an iteration of the prange loop at {plan.location} left the loop")
            self._enter(outcome, block, env)
            block = outcome

    # --- memory ----------------------------------------------------------------------------------------

    def _element(self, inst: Instruction, array: np.ndarray, index: tuple[int, ...]) -> _Element | None:
        launch = self.launch
        if launch is None:
            return None
        index = tuple(int(i) for i in index)
        if len(index) != array.ndim or not all(0 <= i < e for i, e in zip(index, array.shape)):
            return None  # the plain handler raises IndexError
        address = _address(array, index)
        element = launch.elements.get(address)
        if element is None:
            element = launch.elements[address] = _Element(index)
        return element

    def _check(self, inst: Instruction, element: _Element, kind: str, conflicts: Sequence[str]) -> None:
        launch = self.launch
        assert launch is not None
        me = launch.iteration
        for attribute in conflicts:
            recorded = getattr(element, attribute)
            for other in [recorded] if attribute == "writer" else recorded:
                if other is not None and other.iteration != me:
                    self._race(inst, element, kind, other, KINDS[attribute])

    def _race(self, inst: Instruction, element: _Element, kind: str, other: _Access, did: str) -> None:
        launch = self.launch
        assert launch is not None
        array = inst.operands[0] if inst.op is Op.LOAD else inst.operands[1]
        name = f"%{array.name}" if array.name else "an array"
        index = ", ".join(map(str, element.index))
        where = str(other.inst.loc) if other.inst.loc is not None else f"%{other.inst.name or other.inst.op}"
        raise DataRace(located(inst, f"data race in the prange loop at {launch.plan.location}: iteration "
                                     f"{launch.iteration} {kind} {name}[{index}], which iteration "
                                     f"{other.iteration} {did} ({where})"))

    def _record(self, element: _Element, attribute: str, inst: Instruction) -> None:
        launch = self.launch
        assert launch is not None
        access = _Access(launch.iteration, inst)
        if attribute == "writer":
            element.writer = element.writer or access
            return
        recorded: list[_Access] = getattr(element, attribute)
        if len(recorded) < 2 and all(a.iteration != access.iteration for a in recorded):
            recorded.append(access)

    def _load(self, interp: Interpreter, inst: Instruction, env: Env) -> RuntimeValue:
        array, *index = (read(env, v) for v in inst.operands)
        element = self._element(inst, array, tuple(index))  # type: ignore[arg-type]
        if element is not None:
            self._check(inst, element, "reads", ("writer", "adders"))
            self._record(element, "readers", inst)
        return BASE_HANDLERS[Op.LOAD](interp, inst, env)  # type: ignore[return-value]

    def _store(self, interp: Interpreter, inst: Instruction, env: Env) -> None:
        _, array, *index = (read(env, v) for v in inst.operands)
        element = self._element(inst, array, tuple(index))  # type: ignore[arg-type]
        if element is not None:
            self._check(inst, element, "writes", ("writer", "readers", "adders"))
            self._record(element, "writer", inst)
        BASE_HANDLERS[Op.STORE](interp, inst, env)

    def _atomic_add(self, interp: Interpreter, inst: Instruction, env: Env) -> None:
        _, array, *index = (read(env, v) for v in inst.operands)
        element = self._element(inst, array, tuple(index))  # type: ignore[arg-type]
        if element is not None:
            self._check(inst, element, "adds to", ("writer", "readers"))
            self._record(element, "adders", inst)
        BASE_HANDLERS[Op.ATOMIC_ADD](interp, inst, env)

    def _alloc(self, interp: Interpreter, inst: Instruction, env: Env) -> RuntimeValue:
        array = BASE_HANDLERS[Op.ALLOC](interp, inst, env)
        if self.launch is not None:
            self.launch.fresh.append(array)  # type: ignore[arg-type]
        return array  # type: ignore[return-value]


BASE_HANDLERS = Interpreter().handlers
"""The plain interpreter's handlers, which the checking ones call."""


def _wrapped(phi: object, a: RuntimeValue, b: RuntimeValue) -> RuntimeValue:
    """a + b in the phi's type, as the IR adds (integers wrap)."""
    ty = phi.type  # type: ignore[attr-defined]
    op = Op.FADD if ty.is_float else Op.IADD
    return apply_rule(SEMANTICS[op], ty, [a, b])  # type: ignore[arg-type]

