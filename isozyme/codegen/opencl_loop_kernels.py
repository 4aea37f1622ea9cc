"""One NDRange kernel per parallel loop: the body of one iteration as `iz_body<k>(gid, ...)`
(`BodyRenderer`), and the kernel `iz_par<k>` that runs it for every iteration and reduces the sums.

Every iteration runs exactly once: work item g runs iterations g, g + size, ... of the `trip` (as many
groups as the device keeps busy). What the loop reads from before it is computed once by the kernel and
passed to every iteration. A reduction or a group-mode atomic add (`parallel_loops.py`) is summed
privately per work item, then per work group in local memory, and the last group to finish adds the
groups' partial sums in group order (`reduction="atomic"`: one atomic add per work item instead, a
baseline). A loop's blocks are rendered here, never in the serial kernel.
"""

from __future__ import annotations

from isozyme.codegen.abi import CodegenError
from isozyme.codegen.opencl_control import (
    ARG0,
    ARG1,
    CHAIN_MACRO,
    CHAINED_TRIP,
    ERROR,
    GPU_FENCE,
    GROUP_SIZE,
    KIND,
    LAUNCH,
    REDUCTIONS,
    SEQUENCE,
    SERVED,
    TICKETS,
    argument_declarations,
    argument_values,
    atomic_add,
    function_params,
    identity,
    kernel_params,
    load_word,
    store_word,
    wrapping_add,
)
from isozyme.codegen.opencl_function import FunctionRenderer, Lowering
from isozyme.codegen.opencl_language import OpenCLRenderer
from isozyme.codegen.opencl_lowerings import LOWERINGS, check_shape, flat_index, lower_alloc, uninitialized_fill
from isozyme.codegen.opencl_serial import SerialRenderer, scratch_count, view_pointer
from isozyme.codegen.out_of_ssa import OutOfSSA
from isozyme.codegen.parallel_loops import ParallelLoop, live_ins
from isozyme.ssa.flags import accesses_element_of
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType, ScalarType


class BodyRenderer(FunctionRenderer):
    """One iteration of a parallel loop as `iz_body<k>(gid, ...)`, and its kernel `iz_par<k>`."""

    def __init__(self, lang: OpenCLRenderer, function: Function, plan: OutOfSSA, loop: ParallelLoop,
                 serial: SerialRenderer, reduction: str, group_size: int = GROUP_SIZE) -> None:
        super().__init__(lang, function, plan, LOWERINGS)
        self.loop = loop
        self.group_size = group_size
        """Work items per group of the kernel when it has work-group sums (a power of two)."""
        self.serial = serial
        self.naive = reduction == "atomic"
        self.atomics = False
        """Does an iteration make atomic adds (`_body_atomic_add`)? Set while rendering."""
        self.interleaved: dict[Value, str] = {}
        """Scratch arrays whose work items' copies are interleaved, and their element stride (`_body_alloc`)."""
        self.trip_name = ""
        """The loop's trip count, as the body reads it (set by `render`)."""
        self.inputs: list[tuple[str, str]] = []
        """What the kernel reads once and passes to every iteration: C type and expression."""
        self.accumulators: list[tuple[ScalarType, Instruction | Phi]] = []
        """What each work item sums privately: the reductions' phis, then the group-mode atomic adds."""
        if not self.naive:
            self.accumulators = [(r.phi.type, r.phi) for r in loop.reductions]  # type: ignore[misc]
            self.accumulators += [(a.operands[1].type.element, a) for a in loop.group_adds]  # type: ignore

    def alloc_space(self, alloc: Instruction) -> str | None:
        return self.lang.private_space if alloc.block in self.loop.loop and alloc not in self.loop.scratch else None

    def lowering(self, op: Op) -> Lowering | None:
        return BODY_LOWERINGS.get(op) or super().lowering(op)

    def target(self, source: Block, successor: Block) -> str:
        if successor is self.loop.header:
            return "L_next"
        if successor not in self.loop.loop:
            return "L_exit"
        return self.labels[successor]

    def fail_return(self) -> str:
        return "return;"

    def element_stride(self, array: Value) -> str | None:
        return self.interleaved.get(array)

    def accumulator(self, value: Value) -> str:
        return f"acc{[v for _, v in self.accumulators].index(value)}"  # type: ignore[arg-type]

    def render(self) -> list[str]:
        self.declare_all()
        layout = self.serial.layout
        prologue = [f"  __global long* err = ctl + {ERROR};"]
        for value in live_ins(self.loop):  # passed in by the kernel, which reads them once
            if isinstance(value, Instruction) and value.op is Op.ALLOC:
                name, rank = self.names[value], value.type.rank  # type: ignore[attr-defined]
                base = self.input(self.lang.pointer(value.type), f"s{self.serial.site_of[value]}")  # type: ignore
                for k in range(rank):
                    prologue.append(f"  {name}_d{k} = {self.input('long', layout.word(value, k))};")
                own = f" + gid * ({scratch_count(self, value, 'private')})" if value in self.loop.scratch else ""
                prologue.append(f"  {name} = {base}{own};")
            elif isinstance(value, Instruction) and value.op is Op.VIEW:
                name, (arena, offset) = self.names[value], value.operands[-2:]
                base = self.input(self.lang.pointer(arena.type), f"s{self.serial.site_of[arena]}")  # type: ignore
                at = self.name(offset) if isinstance(offset, Constant) else self.input("long", layout.load(offset))
                prologue += [f"  {name}_d{k} = {self.input('long', layout.word(value, k))};"
                             for k in range(value.type.rank)]  # type: ignore[attr-defined]
                prologue.append(f"  {name} = {view_pointer(self, value, base, at)};")
            elif isinstance(value.type, ArrayType):
                raise CodegenError("an array value that is not a local array reaches a parallel loop")
            else:
                given = self.input(self.lang.scalar(value.type), layout.load(value))
                prologue.append(f"  {self.names[value]} = {given};")
        # iteration `gid` in a loop that counts up; in one that counts down (a reverse loop), iteration
        # trip-1-gid, so that neighbouring work items still touch ascending addresses
        ascending = all(iv.constant_step is None or iv.constant_step >= 0 for iv in self.loop.inductions)
        trip = self.loop.trip
        if not isinstance(trip, (Constant, Argument)):
            trip_name = self.input("long", layout.load(trip))
        else:
            trip_name = self.name(trip)
        self.trip_name = trip_name
        iteration = "gid" if ascending else f"({trip_name} - 1 - gid)"
        for iv in self.loop.inductions:
            start, step = self.input("long", layout.load(iv.phi)), self.name(iv.step)
            prologue.append(f"  {self.names[iv.phi]} = (long)((ulong){start} + (ulong){iteration} * (ulong){step});")
        for reduction in self.loop.reductions:
            prologue.append(f"  {self.names[reduction.phi]} = {identity(self.lang, reduction.phi.type)};")  # type: ignore
        handled = {iv.phi for iv in self.loop.inductions} | {r.phi for r in self.loop.reductions}
        for phi in self.loop.header.phis:  # a constant in every iteration (parallel_loops.py)
            if phi not in handled:
                prologue.append(f"  {self.names[phi]} = {self.input(self.lang.scalar(phi.type), layout.load(phi))};")
        prologue.append(f"  goto {self.labels[self.loop.header]};")
        blocks = [block for block in self.blocks if block in self.loop.loop]
        self.render_blocks(blocks)
        finish: list[str] = []
        for reduction in self.loop.reductions:
            ty: ScalarType = reduction.phi.type  # type: ignore[assignment]
            phi = self.names[reduction.phi]
            if self.naive:
                pointer = f"(volatile __global {self.lang.storage(ty)}*)(ctl + {REDUCTIONS + reduction.slot})"
                finish.append("  " + atomic_add(self.lang, ty, pointer, phi))
            else:
                acc = self.accumulator(reduction.phi)
                finish.append(f"  *{acc} = {wrapping_add(self.lang, ty, f'*{acc}', phi)};")
        self.lines += ["L_next:;", *finish, "  return;", "L_exit:;", "  return;"]
        params = ["long gid", *function_params(self.lang, self.function), *self.serial.site_params(),
                  "__global long* ctl", "__global long* heap",
                  *(f"{ty} in{j}" for j, (ty, _) in enumerate(self.inputs)),
                  *(f"{self.lang.scalar(ty)}* acc{j}" for j, (ty, _) in enumerate(self.accumulators))]
        head = f"__attribute__((always_inline)) void iz_body{self.loop.number}({', '.join(params)}) {{"
        return [head, *self.decls, *prologue, *self.lines, "}"]

    def input(self, ty: str, expression: str) -> str:
        """A value the kernel computes once (`expression`, in the kernel) and passes to every iteration."""
        self.inputs.append((ty, expression))
        return f"in{len(self.inputs) - 1}"

    def kernel(self) -> list[str]:
        """`iz_par<k>`: each work item runs iterations gid, gid + size, ... (as many groups as the device
        keeps busy); then each accumulator is reduced per group, each group writes its partial sum and takes
        a ticket (one atomic per group), and the last group adds the partial sums up, in group order."""
        lang, k = self.lang, self.loop.number
        params = [*kernel_params(lang, self.function), *self.serial.site_params(), "__global long* ctl",
                  "__global long* part", "__global long* heap", "long trip", "long sequence"]
        attribute = f"__attribute__((reqd_work_group_size({self.group_size}, 1, 1))) " if self.accumulators else ""
        # replayed (`trip` -1, or -2 chained): run only if the serial kernel's request `sequence` is this loop's
        # launch (words that no loop kernel writes, so every work item decides alike), and mark it served
        replayed = [f"  bool chained = trip == {CHAINED_TRIP};", "  if (trip < 0) {",
                    f"    if (ctl[{KIND}] != {LAUNCH} || ctl[{ARG0}] != {k} || ctl[{SEQUENCE}] != sequence) "
                    "{ trip = 0; chained = false; }",
                    f"    else {{ trip = ctl[{ARG1}]; if (get_global_id(0) == 0) ctl[{SERVED}] = sequence; }}", "  }"]
        lines = [f"__kernel {attribute}void iz_par{k}({', '.join(params)}) {{", *replayed,
                 *argument_declarations(lang, self.function),
                 *(f"  {ty} in{j} = {expression};" for j, (ty, expression) in enumerate(self.inputs)),
                 "  long size = (long)get_global_size(0);"]
        lines += [f"  {lang.scalar(ty)} acc{j} = {identity(lang, ty)};" for j, (ty, _) in enumerate(self.accumulators)]
        args = ["g", *argument_values(self.function), *(f"s{s}" for s in self.serial.site_of.values()), "ctl",
                "heap", *(f"in{j}" for j in range(len(self.inputs))),
                *(f"&acc{j}" for j in range(len(self.accumulators)))]
        lines.append(f"  for (long g = (long)get_global_id(0); g < trip; g += size) iz_body{k}({', '.join(args)});")
        if not self.accumulators:
            return [*lines, *self._chain(), "}"]
        lines += ["  int lid = (int)get_local_id(0);", "  long group = (long)get_group_id(0);",
                  "  long groups = (long)get_num_groups(0);", "  __local int last;",
                  f"#ifdef {CHAIN_MACRO}", "  if (chained) barrier(CLK_GLOBAL_MEM_FENCE);  // for the fence below",
                  "#endif"]
        for ty in dict.fromkeys(str(ty) for ty, _ in self.accumulators):
            lines.append(f"  __local {lang.storage_types[ty]} red_{ty}[{self.group_size}];")
        for j, (ty, _) in enumerate(self.accumulators):
            lines += [*self._group_sum(ty, f"acc{j}"),
                      f"  if (lid == 0) {store_word(ty, f'part[{j} * groups + group]', f'red_{ty}[0]')}"]
        lines += ["  if (lid == 0) {", "    mem_fence(CLK_GLOBAL_MEM_FENCE);",
                  f"#ifdef {CHAIN_MACRO}", f"    if (chained) {GPU_FENCE}  // the group's stores, for the last group",
                  "#endif",
                  f"    last = atom_inc((volatile __global long*)(ctl + {TICKETS})) == groups - 1;", "  }",
                  "  barrier(CLK_LOCAL_MEM_FENCE);", "  if (!last) return;",
                  "  volatile __global long* done = part;"]
        for j, (ty, value) in enumerate(self.accumulators):
            total = f"total{j}"
            lines += [f"  {lang.scalar(ty)} {total} = {identity(lang, ty)};",
                      f"  for (long g = lid; g < groups; g += {self.group_size}) "
                      f"{total} = {wrapping_add(lang, ty, total, load_word(ty, f'done[{j} * groups + g]'))};",
                      *self._group_sum(ty, total),
                      "  if (lid == 0) {", *self._group_target(ty, value, f"red_{ty}[0]"), "  }"]
        return [*lines, "  if (lid == 0) {", f"    ctl[{TICKETS}] = 0;", f"#ifdef {CHAIN_MACRO}",
                f"    if (chained) {{ {GPU_FENCE} {self.serial.continuation_call(self.loop)} }}", "#endif",
                "  }", "}"]

    def _chain(self) -> list[str]:
        """A chained launch of a kernel without work-group sums: the group's stores gathered by a barrier
        and fenced once by its first work item (as CUDA's grid sync does), the last group to finish (a
        ticket per group) runs the serial kernel on, as a replayed resume would. (With a fence in every
        work item, as before, the GMM gradient's forward loop at n=100k, 2.5M work items, took as long:
        0.54-0.55 ms against 0.39-0.41 unchained, H200.)"""
        return [f"#ifdef {CHAIN_MACRO}", "  if (chained) {", "    barrier(CLK_GLOBAL_MEM_FENCE);",
                "    if (get_local_id(0) == 0) {", f"      {GPU_FENCE}",
                f"      if (atom_inc((volatile __global long*)(ctl + {TICKETS})) == (long)get_num_groups(0) - 1) {{",
                f"        {GPU_FENCE}", f"        ctl[{TICKETS}] = 0;",
                f"        {self.serial.continuation_call(self.loop)}", "      }", "    }", "  }", "#endif"]

    def _group_sum(self, ty: ScalarType, value: str) -> list[str]:
        """The sum of `value` over the work group, left in `red_<ty>[0]` (a tree in local memory)."""
        red = f"red_{ty}"
        return ["  barrier(CLK_LOCAL_MEM_FENCE);", f"  {red}[lid] = {value};", "  barrier(CLK_LOCAL_MEM_FENCE);",
                f"  for (int s = {self.group_size // 2}; s > 0; s >>= 1) {{",
                f"    if (lid < s) {red}[lid] = {wrapping_add(self.lang, ty, f'{red}[lid]', f'{red}[lid + s]')};",
                "    barrier(CLK_LOCAL_MEM_FENCE);", "  }"]

    def _group_target(self, ty: ScalarType, value: Value, total: str) -> list[str]:
        """Add a group's total to its target: a reduction's control word, or the array element."""
        lang = self.lang
        if isinstance(value, Phi):
            slot = next(r.slot for r in self.loop.reductions if r.phi is value)
            return ["    " + atomic_add(lang, ty, f"(volatile __global {lang.storage(ty)}*)(ctl + {REDUCTIONS + slot})",
                                        total)]
        _, array, *indices = value.operands
        base, extents = self._wrapper_array(array)
        names = [self._wrapper_value(i) for i in indices]
        inside = " && ".join(f"0 <= {i} && {i} < {d}" for i, d in zip(names, extents, strict=True))
        offset = names[0]
        for index, extent in zip(names[1:], extents[1:], strict=True):
            offset = f"({offset}) * {extent} + {index}"
        return [f"    if ({inside}) " + atomic_add(lang, ty, f"&{base}[{offset}]", total)]

    def _wrapper_value(self, value: Value) -> str:
        if isinstance(value, Constant):
            return self.lang.constant(value)
        if isinstance(value, Argument):
            return f"a{value.index}"
        return self.serial.layout.load(value)

    def _wrapper_array(self, array: Value) -> tuple[str, list[str]]:
        rank = array.type.rank  # type: ignore[attr-defined]
        if isinstance(array, Argument):
            return f"a{array.index}", [f"a{array.index}_d{k}" for k in range(rank)]
        site = self.serial.site_of.get(array)  # type: ignore[arg-type]
        if site is None:
            raise CodegenError("a work-group reduction into an array that is neither an argument nor a local array")
        return f"s{site}", [self.serial.layout.word(array, k) for k in range(rank)]


def _body_alloc(r: FunctionRenderer, inst: Instruction) -> None:
    """A private C array, or this work item's copy in the scratch buffer, filled as a fresh array.

    The buffer holds `trip` copies of `count` elements. Where the array is only loaded from, stored into and
    added into, the copies are interleaved: element k of iteration `gid` at `k * trip + gid`, so that the
    work items of a warp, which run neighbouring iterations, touch neighbouring addresses (one coalesced
    access per element). Otherwise (the array is passed to a call, a phi, ...) iteration `gid`'s copy is
    the `count` elements from `gid * count` on, as a callee expects. Measured on one H100 (f64): the
    reverse kernel of `benchmarks/tuned/gmm_gpu_kernels.gmm_staged`'s gradient, whose work items each add into
    a scratch copy of d values, took 2.04 ms interleaved against 4.21 ms contiguous at n=1000 d=64 K=100,
    and 1.13 against 2.85 ms at n=100000 d=10 K=25 (the whole gradient: 3.01 against 5.22 ms, and 1.98
    against 3.97 ms)."""
    assert isinstance(r, BodyRenderer)
    if inst not in r.loop.scratch:
        return lower_alloc(r, inst)
    name = r.names[inst]
    check_shape(r, inst, inst.operands)
    for k, extent in enumerate(inst.operands):
        r.emit(f"{name}_d{k} = {r.name(extent)};")
    count = scratch_count(r, inst, "inner")
    site = f"s{r.serial.site_of[inst]}"
    element: ScalarType = inst.type.element  # type: ignore[attr-defined]
    fill = f"({r.lang.storage(element)})" + ("0" if "zeroed" in inst.flags else uninitialized_fill(r, element))
    if _only_element_uses(inst):
        r.interleaved[inst] = r.trip_name
        r.emit(f"{name} = {site} + gid;")
        r.emit(f"for (long k = 0; k < {count}; k++) {name}[k * {r.trip_name}] = {fill};")
        return None
    r.emit(f"{name} = {site} + gid * ({count});")
    r.emit(f"for (long k = 0; k < {count}; k++) {name}[k] = {fill};")
    return None


def _only_element_uses(array: Instruction) -> bool:
    """Is `array` only loaded from, stored into, added into and asked its extents?"""
    return all(user.op is Op.DIM or accesses_element_of(user, array) for user in array.users)


def _body_atomic_add(r: FunctionRenderer, inst: Instruction) -> None:
    assert isinstance(r, BodyRenderer)
    value, array, *indices = inst.operands
    element: ScalarType = array.type.element  # type: ignore[attr-defined]
    mode = r.loop.modes.get(inst, "atomic")
    offset = flat_index(r, inst, array, tuple(indices))
    target = f"{r.name(array)}[{offset}]"
    if mode == "group" and not r.naive:
        acc = r.accumulator(inst)
        r.emit(f"*{acc} = {wrapping_add(r.lang, element, f'*{acc}', r.name(value))};")
    elif mode == "owned":
        r.emit(f"{target} = {wrapping_add(r.lang, element, target, r.name(value))};")
    else:
        r.atomics = True
        r.emit(atomic_add(r.lang, element, f"&{target}", r.name(value)))


BODY_LOWERINGS: dict[Op, Lowering] = {Op.ALLOC: _body_alloc, Op.ATOMIC_ADD: _body_atomic_add}
