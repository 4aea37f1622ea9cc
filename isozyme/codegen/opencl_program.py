"""The OpenCL program of a kernel: a serial kernel that yields to the host, and one NDRange kernel per
parallel loop (`parallel_loops.py`).

    program = emit_opencl(module, module["heat"], CodegenOptions())
    program.source          # OpenCL C: helpers, the module's other functions, the loop bodies, the kernels
    program.serial          # "iz_serial"
    program.loops[k].name   # "iz_par<k>": parallel loop k, one work item per iteration

Execution (the host's loop is `runtime/opencl_backend.py`). The host runs `iz_serial` as one work item. It
runs the entry function until the function returns or needs the host; then it writes a request into the
control buffer, saves every variable there too, and returns. The requests:

  - LAUNCH k, trip: run `iz_par<k>` over `trip` work items, then resume. The serial kernel resumes at the
    loop's header with the induction variables at their final values and each reduction's sum added,
    takes the exit branch, and goes on. So serial loops around `prange` loops (time stepping) are driven
    by the host, one launch per step, and scalars cross regions in the control buffer;
  - ALLOC site, count, keep: a local array of the entry function lives in a global buffer per `alloc`
    (its site), as large as the largest run asked for; the host (re)allocates and fills it (nan, the
    integer minimum, True or zero: the interpreter's fill; not when `keep` is 1) and resumes. Extents may
    be run-time values. A parallel loop's scratch arrays (a copy per work item) are sites too. After
    arena placement (`optimize/memory_reuse.py`) most local arrays are views: pointers into the arena's
    site at an offset, recomputed on every resume and passed to loop kernels as the site plus the offset;
  - GROW site, new, old: the host gives the site a buffer of `new` elements holding the first `old`;
  - DONE: the return value is in the header.

A resume restores every variable and jumps to the point it stopped at (`RESTORE`, then a `switch`). A
failing check anywhere writes the error record (the first work item claims it) and stops; the host
raises the site's exception. Called functions are plain C functions; local arrays in them and in parallel
loops are private arrays of constant extents (a parallel loop's larger ones are scratch slices), and a call
that passes a private array calls the callee's version taking a `__private` pointer there
(`address_spaces.py`, `render_called_functions`).

The control buffer, in `long` words: the header (`KIND`, `RESUME`, `ARG0..ARG2`, `RETURN`, `TICKETS`, the
groups of a parallel loop that are done, and `HEAP_TOP`, the device heap's words in use), the error
record at `ERROR`, the heap's size (`HEAP_WORDS`), one word per reduction from
`REDUCTIONS`, then one word per saved value (`Layout`). A parallel loop's kernel also gets `part`, a
buffer of one word per accumulator and work group for the partial sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.codegen import opencl
from isozyme.codegen.abi import CodegenOptions
from isozyme.codegen.error_sites import PAYLOAD_WORDS, ErrorSite, register_site
from isozyme.codegen.opencl import (
    CodegenError,
    FunctionRenderer,
    Lowering,
    OpenCLRenderer,
    _flat_index,
    _lower_alloc,
    _uninitialized_fill,
    check_shape,
    check_size,
)
from isozyme.codegen.out_of_ssa import OutOfSSA, out_of_ssa
from isozyme.codegen.parallel_loops import ParallelLoop, live_ins, plan_parallel_loops
from isozyme.optimize.function_attributes import module_memory_effects
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, Module, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType, ScalarType, Type

KIND, RESUME, ARG0, ARG1, ARG2, RETURN, TICKETS, HEAP_TOP = range(8)
ERROR = 8
HEAP_WORDS = ERROR + 1 + PAYLOAD_WORDS
"""The device heap's size in words (the host writes it); functions see these words as `err[-1]` and
`err[9]` (`opencl.py`)."""
assert (ERROR + opencl.HEAP_TOP, ERROR + opencl.HEAP_WORDS) == (HEAP_TOP, HEAP_WORDS)
REDUCTIONS = 24
assert ERROR + 1 + PAYLOAD_WORDS <= REDUCTIONS
HEADER_WORDS = ERROR + 1 + PAYLOAD_WORDS
"""The words the host reads after each run of the serial kernel."""
DONE, LAUNCH, ALLOC, GROW = 1, 2, 3, 4
GROUP_SIZE = 256
"""Work items per group in a kernel with work-group reductions (a power of two)."""


@dataclass
class AllocSite:
    """A local array of the entry function: one global buffer, (re)filled by the host at each `alloc`."""

    element: str
    """Its element type ("f64", ...)."""
    fill: float | int | bool
    """What a fresh array holds (0 with the `zeroed` flag)."""
    location: str | None = None
    """`file:line:col` of the alloc, for a device that cannot hold it."""


@dataclass
class LoopKernel:
    name: str
    location: str
    accumulators: int
    """How many sums its work groups reduce (the work-group size is then `GROUP_SIZE`)."""


@dataclass
class OpenCLProgram:
    """A module's OpenCL C source and what the runtime needs to run it."""

    source: str
    serial: str
    """The serial kernel's name."""
    loops: list[LoopKernel]
    """The NDRange kernels, by loop number."""
    allocs: list[AllocSite]
    """The entry function's local arrays, by site number."""
    control_words: int
    sites: list[ErrorSite] = field(default_factory=list)
    """The error sites, numbered from 1 in list order."""
    serial_loops: list[str] = field(default_factory=list)
    """Why each `prange` loop that runs serially does (`parallel_loops.py`)."""
    uses_heap: bool = False
    """Does a called function allocate local arrays on the device heap (`opencl.py`, `_heap_alloc`)?"""
    writable: frozenset[int] = frozenset()
    """The positions of the entry's array parameters that the program may write (the host copies only
    these back, and refuses read-only numpy arrays for them)."""


# --- saving values in the control buffer ---------------------------------------------------------------


def load_word(ty: Type, word: str) -> str:
    """The value of type `ty` stored in the control word `word` (a C lvalue such as `ctl[40]`)."""
    return {"f64": f"as_double({word})", "f32": f"as_float((int){word})", "i64": word,
            "i32": f"(int){word}", "i1": f"({word} != 0)"}[str(ty)]


def store_word(ty: Type, word: str, value: str) -> str:
    return {"f64": f"{word} = as_long({value});", "f32": f"{word} = (long)as_int({value});",
            "i64": f"{word} = {value};", "i32": f"{word} = (long){value};",
            "i1": f"{word} = {value} ? 1 : 0;"}[str(ty)]


class Layout:
    """The control word of each value the serial kernel saves (scalars; a local array's extents)."""

    def __init__(self, first: int) -> None:
        self.words: dict[tuple[Value, int], int] = {}
        self.next = first

    def add(self, value: Value, part: int = -1) -> None:
        self.words[(value, part)] = self.next
        self.next += 1

    def word(self, value: Value, part: int = -1) -> str:
        return f"ctl[{self.words[(value, part)]}]"

    def load(self, value: Value) -> str:
        return load_word(value.type, self.word(value))


# --- the entry's parameters ----------------------------------------------------------------------------


def kernel_params(lang: OpenCLRenderer, entry: Function) -> list[str]:
    """A kernel's parameters for the entry's arguments: `__global T* p<i>` plus extents, scalars by value
    (a boolean as `uchar`)."""
    params: list[str] = []
    for arg in entry.args:
        if isinstance(arg.type, ArrayType):
            params.append(f"{lang.pointer(arg.type)} restrict p{arg.index}")  # distinct: checked at the call
            params += [f"long p{arg.index}_d{k}" for k in range(arg.type.rank)]
        else:
            params.append(f"{'uchar' if arg.type.is_bool else lang.scalar(arg.type)} p{arg.index}")  # type: ignore
    return params


def argument_declarations(lang: OpenCLRenderer, entry: Function) -> list[str]:
    """The entry's arguments as the variables `a<i>` that function code uses, from the kernel's `p<i>`."""
    lines: list[str] = []
    for arg in entry.args:
        i = arg.index
        if isinstance(arg.type, ArrayType):
            lines.append(f"  {lang.pointer(arg.type)} a{i} = p{i};")
            lines += [f"  long a{i}_d{k} = p{i}_d{k};" for k in range(arg.type.rank)]
        elif arg.type.is_bool:  # type: ignore[union-attr]
            lines.append(f"  bool a{i} = (p{i} != 0);")
        else:
            lines.append(f"  {lang.scalar(arg.type)} a{i} = p{i};")
    return lines


def argument_values(entry: Function) -> list[str]:
    """The `a<i>` variables (and extents) in parameter order, for a call."""
    values: list[str] = []
    for arg in entry.args:
        values.append(f"a{arg.index}")
        if isinstance(arg.type, ArrayType):
            values += [f"a{arg.index}_d{k}" for k in range(arg.type.rank)]
    return values


def function_params(lang: OpenCLRenderer, entry: Function) -> list[str]:
    params: list[str] = []
    for arg in entry.args:
        if isinstance(arg.type, ArrayType):
            params.append(f"{lang.pointer(arg.type)} restrict a{arg.index}")
            params += [f"long a{arg.index}_d{k}" for k in range(arg.type.rank)]
        else:
            params.append(f"{lang.scalar(arg.type)} a{arg.index}")
    return params


def identity(lang: OpenCLRenderer, ty: ScalarType) -> str:
    """The neutral element of the sum: -0.0 (exact: x + -0.0 == x), or 0."""
    return lang.float_literal(-0.0, ty) if ty.is_float else lang.constant(Constant(ty, 0))


def wrapping_add(lang: OpenCLRenderer, ty: ScalarType, a: str, b: str) -> str:
    if ty.is_float:
        return f"({a} + {b})"
    u = lang.unsigned_types[str(ty)]
    return f"({lang.scalar(ty)})(({u}){a} + ({u}){b})"


def atomic_add(lang: OpenCLRenderer, ty: ScalarType, pointer: str, value: str) -> str:
    return f"iz_atomic_add_{lang.storage(ty)}({pointer}, {value});"


# --- the serial kernel ---------------------------------------------------------------------------------


class SerialRenderer(FunctionRenderer):
    """The entry function as the serial kernel `iz_serial` (module docstring)."""

    def __init__(self, lang: OpenCLRenderer, function: Function, plan: OutOfSSA, loops: list[ParallelLoop],
                 reductions: int) -> None:
        super().__init__(lang, function, plan)
        self.loops = loops
        self.by_header = {loop.header: loop for loop in loops}
        self.hidden = {block for loop in loops for block in loop.loop.blocks if block is not loop.header}
        self.layout = Layout(REDUCTIONS + reductions)
        self.site_of: dict[Instruction, int] = {}
        self.allocs: list[AllocSite] = []
        self.resumes = 0
        for loop in loops:
            for alloc, kind in loop.scratch.items():
                if kind == "inner":
                    self.add_site(alloc)

    def alloc_space(self, alloc: Instruction) -> str | None:
        return self.lang.private_space if alloc.block in self.hidden and alloc not in self.site_of else None

    def lowering(self, op: Op) -> Lowering | None:
        return SERIAL_LOWERINGS.get(op) or super().lowering(op)

    def add_site(self, alloc: Instruction) -> None:
        self.site_of[alloc] = len(self.allocs)
        element: ScalarType = alloc.type.element  # type: ignore[attr-defined]
        fill = 0 if "zeroed" in alloc.flags else _uninitialized_fill_value(element)
        self.allocs.append(AllocSite(str(element), fill, str(alloc.loc) if alloc.loc else None))

    def target(self, source: Block, successor: Block) -> str:
        loop = self.by_header.get(successor)
        if loop is not None and source not in loop.loop:
            return f"P{loop.number}"
        if successor in self.hidden:
            return "L_trap"
        return self.labels[successor]

    def fail_return(self) -> str:
        return "return;"

    def render(self) -> list[str]:
        self.declare_all()
        self._plan_layout()
        self.render_blocks([block for block in self.blocks if block not in self.hidden])
        for loop in self.loops:
            self._launch(loop)
        trap = register_site(self.lang.sites, ErrorSite("assert", None, "prange", {
            "message": "internal error: the serial kernel reached the body of a parallel loop"}))
        self.lines += ["L_trap:;", f"  err[0] = {trap}; return;", "SAVE:;", *self._save(), "  return;",
                       "RESTORE:;", *self._restore(), "  switch (ctl[1]) {",
                       *(f"    case {r}: goto R{r};" for r in range(1, self.resumes + 1)), "  }", "  goto L_trap;"]
        params = [*kernel_params(self.lang, self.function), *self.site_params(), "__global long* ctl",
                  "__global long* heap"]
        head = [f"__kernel void iz_serial({', '.join(params)}) {{", f"  __global long* err = ctl + {ERROR};",
                *argument_declarations(self.lang, self.function)]
        start = ["  if (err[0] != 0) return;", f"  if (ctl[{RESUME}] != 0) goto RESTORE;"]
        return [*head, *self.decls, *start, *self.lines, "}"]

    def site_params(self) -> list[str]:
        return [f"{self.lang.pointer(alloc.type)} restrict s{site}" for alloc, site in self.site_of.items()]  # type: ignore

    def _plan_layout(self) -> None:
        for block in self.blocks:
            if block in self.hidden:
                continue
            for inst in block.instructions:
                if inst.op in (Op.ALLOC, Op.VIEW):  # a view's data pointer follows from its arena's site
                    if inst.op is Op.ALLOC:
                        self.add_site(inst)
                    for k in range(inst.type.rank):  # type: ignore[attr-defined]
                        self.layout.add(inst, k)
                elif isinstance(inst.type, ArrayType):
                    raise CodegenError(f"{inst.op}: an array-valued {inst.op} in a kernel with parallel loops or "
                                       "local arrays is not supported by the OpenCL backend yet")
                elif not inst.type.is_void:
                    self.layout.add(inst)

    def _save(self) -> list[str]:
        lines = []
        for (value, part), word in self.layout.words.items():
            if part >= 0:
                lines.append(f"  ctl[{word}] = {self.names[value]}_d{part};")
            else:
                lines.append("  " + store_word(value.type, f"ctl[{word}]", self.names[value]))
        return lines

    def _restore(self) -> list[str]:
        lines = [f"  {self.names[alloc]} = s{site};" for alloc, site in self.site_of.items()]
        for (value, part), word in self.layout.words.items():
            if part >= 0:
                lines.append(f"  {self.names[value]}_d{part} = ctl[{word}];")
            else:
                lines.append(f"  {self.names[value]} = {load_word(value.type, f'ctl[{word}]')};")
        for view in self.function.instructions():  # after the arenas and the offsets
            if view.op is Op.VIEW and view.block not in self.hidden:
                lines.append(f"  {self.names[view]} = {view_pointer(self, view, self.name(view.operands[-2]))};")
        return lines

    def yield_to_host(self, kind: int, *args: str) -> None:
        """Ask the host for something, save, return; the host's next launch resumes right here."""
        self.resumes += 1
        words = "".join(f" ctl[{ARG0 + i}] = {arg};" for i, arg in enumerate(args))
        self.emit(f"ctl[{KIND}] = {kind};{words} ctl[{RESUME}] = {self.resumes}; goto SAVE;")
        self.lines.append(f"R{self.resumes}:;")

    def _launch(self, loop: ParallelLoop) -> None:
        self.lines.append(f"P{loop.number}:;")
        trip = self.name(loop.trip)
        anchor = next(p for p in loop.header.phis if "parallel" in p.flags)
        self.check(f"{trip} >= 0", anchor, "assert", [], message="a prange loop whose trip count is negative "
                   "never ends")
        for alloc, kind in loop.scratch.items():  # one copy per work item
            count = scratch_count(self, alloc, kind)
            check_size(self, alloc, [trip, f"({count})"])
            self.yield_to_host(ALLOC, str(self.site_of[alloc]), f"({count}) * {trip}", "1" if kind == "inner" else "0")
        for reduction in loop.reductions:
            self.emit(f"ctl[{REDUCTIONS + reduction.slot}] = 0;")
        self.yield_to_host(LAUNCH, str(loop.number), trip)
        for iv in loop.inductions:
            phi = self.name(iv.phi)
            self.emit(f"{phi} = (long)((ulong){phi} + (ulong){trip} * (ulong){self.name(iv.step)});")
        for reduction in loop.reductions:
            ty: ScalarType = reduction.phi.type  # type: ignore[assignment]
            phi = self.name(reduction.phi)
            self.emit(f"{phi} = {wrapping_add(self.lang, ty, phi, reduction_word(ty, reduction.slot))};")
        self.emit(f"goto {self.labels[loop.header]};")


def view_pointer(r: FunctionRenderer, view: Instruction, arena: str, offset: str | None = None) -> str:
    """The data pointer of `view`: the arena's words (`arena`, a global pointer) from its offset on."""
    return f"({r.lang.pointer(view.type)})({arena} + {offset or r.name(view.operands[-1])})"  # type: ignore[arg-type]


def scratch_count(r: FunctionRenderer, alloc: Instruction, kind: str) -> str:
    """The elements of one work item's copy of a scratch array: the product of its extents (operands of an
    alloc in the loop; the saved extents of a flagged array allocated before it)."""
    if kind == "inner":
        return " * ".join(f"max({r.name(e)}, 0L)" for e in alloc.operands) or "1"
    return " * ".join(f"{r.name(alloc)}_d{k}" for k in range(alloc.type.rank)) or "1"  # type: ignore[attr-defined]


def reduction_word(ty: ScalarType, slot: int) -> str:
    """The value of a reduction's control word (f32: the low half of the word)."""
    word = f"ctl[{REDUCTIONS + slot}]"
    return f"(*(__global float*)(ctl + {REDUCTIONS + slot}))" if str(ty) == "f32" else load_word(ty, word)


def _uninitialized_fill_value(element: ScalarType) -> float | int | bool:
    if element.is_float:
        return float("nan")
    if element.is_int:
        return -(1 << (element.bits - 1))
    return True


def _serial_alloc(r: FunctionRenderer, inst: Instruction) -> None:
    """In the serial kernel: extents, then ask the host for the site's buffer, filled."""
    assert isinstance(r, SerialRenderer)
    if inst.block in r.hidden:
        return _lower_alloc(r, inst)
    name = r.names[inst]
    extents = [r.name(v) for v in inst.operands]
    check_shape(r, inst, inst.operands)
    if not inst.uses:  # kept for its checks only (`optimize/dead_code_elimination.py`)
        return None
    for k, extent in enumerate(extents):
        r.emit(f"{name}_d{k} = {extent};")
    count = " * ".join(f"{name}_d{k}" for k in range(len(extents)))
    r.yield_to_host(ALLOC, str(r.site_of[inst]), count, "0")
    return None


def _serial_grow(r: FunctionRenderer, inst: Instruction) -> None:
    assert isinstance(r, SerialRenderer)
    array, count = inst.operands
    name, wanted = r.name(array), r.name(count)
    r.emit(f"if ({wanted} > {name}_d0) {{")
    r.emit(f"  long grown = max({wanted}, 2 * {name}_d0); long old = {name}_d0; {name}_d0 = grown;")
    r.yield_to_host(GROW, str(r.site_of[array]), "grown", "old")  # type: ignore[index]
    r.lines.insert(len(r.lines) - 1, "  }")  # the resume label follows the block


def _serial_ret(r: FunctionRenderer, inst: Instruction) -> None:
    if inst.operands:
        value = inst.operands[0]
        r.emit(store_word(value.type, f"ctl[{RETURN}]", r.name(value)))
    r.emit(f"ctl[{KIND}] = {DONE}; return;")


SERIAL_LOWERINGS: dict[Op, Lowering] = {Op.ALLOC: _serial_alloc, Op.GROW: _serial_grow, Op.RET: _serial_ret}


# --- a parallel loop -----------------------------------------------------------------------------------


class BodyRenderer(FunctionRenderer):
    """One iteration of a parallel loop as `iz_body<k>(gid, ...)`, and its kernel `iz_par<k>`."""

    def __init__(self, lang: OpenCLRenderer, function: Function, plan: OutOfSSA, loop: ParallelLoop,
                 serial: SerialRenderer, reduction: str) -> None:
        super().__init__(lang, function, plan)
        self.loop = loop
        self.serial = serial
        self.naive = reduction == "atomic"
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
                  "__global long* part", "__global long* heap", "long trip"]
        attribute = f"__attribute__((reqd_work_group_size({GROUP_SIZE}, 1, 1))) " if self.accumulators else ""
        lines = [f"__kernel {attribute}void iz_par{k}({', '.join(params)}) {{",
                 *argument_declarations(lang, self.function),
                 *(f"  {ty} in{j} = {expression};" for j, (ty, expression) in enumerate(self.inputs)),
                 "  long size = (long)get_global_size(0);"]
        lines += [f"  {lang.scalar(ty)} acc{j} = {identity(lang, ty)};" for j, (ty, _) in enumerate(self.accumulators)]
        args = ["g", *argument_values(self.function), *(f"s{s}" for s in self.serial.site_of.values()), "ctl",
                "heap", *(f"in{j}" for j in range(len(self.inputs))),
                *(f"&acc{j}" for j in range(len(self.accumulators)))]
        lines.append(f"  for (long g = (long)get_global_id(0); g < trip; g += size) iz_body{k}({', '.join(args)});")
        if not self.accumulators:
            return [*lines, "}"]
        lines += ["  int lid = (int)get_local_id(0);", "  long group = (long)get_group_id(0);",
                  "  long groups = (long)get_num_groups(0);", "  __local int last;"]
        for ty in dict.fromkeys(str(ty) for ty, _ in self.accumulators):
            lines.append(f"  __local {lang.storage_types[ty]} red_{ty}[{GROUP_SIZE}];")
        for j, (ty, _) in enumerate(self.accumulators):
            lines += [*self._group_sum(ty, f"acc{j}"),
                      f"  if (lid == 0) {store_word(ty, f'part[{j} * groups + group]', f'red_{ty}[0]')}"]
        lines += ["  if (lid == 0) {", "    mem_fence(CLK_GLOBAL_MEM_FENCE);",
                  f"    last = atom_inc((volatile __global long*)(ctl + {TICKETS})) == groups - 1;", "  }",
                  "  barrier(CLK_LOCAL_MEM_FENCE);", "  if (!last) return;",
                  "  volatile __global long* done = part;"]
        for j, (ty, value) in enumerate(self.accumulators):
            total = f"total{j}"
            lines += [f"  {lang.scalar(ty)} {total} = {identity(lang, ty)};",
                      f"  for (long g = lid; g < groups; g += {GROUP_SIZE}) "
                      f"{total} = {wrapping_add(lang, ty, total, load_word(ty, f'done[{j} * groups + g]'))};",
                      *self._group_sum(ty, total),
                      "  if (lid == 0) {", *self._group_target(ty, value, f"red_{ty}[0]"), "  }"]
        return [*lines, f"  if (lid == 0) ctl[{TICKETS}] = 0;", "}"]

    def _group_sum(self, ty: ScalarType, value: str) -> list[str]:
        """The sum of `value` over the work group, left in `red_<ty>[0]` (a tree in local memory)."""
        red = f"red_{ty}"
        return ["  barrier(CLK_LOCAL_MEM_FENCE);", f"  {red}[lid] = {value};", "  barrier(CLK_LOCAL_MEM_FENCE);",
                f"  for (int s = {GROUP_SIZE // 2}; s > 0; s >>= 1) {{",
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
    """A private C array, or this work item's copy in the scratch buffer, filled as a fresh array."""
    assert isinstance(r, BodyRenderer)
    if inst not in r.loop.scratch:
        return _lower_alloc(r, inst)
    name = r.names[inst]
    check_shape(r, inst, inst.operands)
    for k, extent in enumerate(inst.operands):
        r.emit(f"{name}_d{k} = {r.name(extent)};")
    count = scratch_count(r, inst, "inner")
    r.emit(f"{name} = s{r.serial.site_of[inst]} + gid * ({count});")
    element: ScalarType = inst.type.element  # type: ignore[attr-defined]
    fill = "0" if "zeroed" in inst.flags else _uninitialized_fill(r, element)
    r.emit(f"for (long k = 0; k < {count}; k++) {name}[k] = ({r.lang.storage(element)}){fill};")
    return None


def _body_atomic_add(r: FunctionRenderer, inst: Instruction) -> None:
    assert isinstance(r, BodyRenderer)
    value, array, *indices = inst.operands
    element: ScalarType = array.type.element  # type: ignore[attr-defined]
    mode = r.loop.modes.get(inst, "atomic")
    offset = _flat_index(r, inst, array, tuple(indices))
    target = f"{r.name(array)}[{offset}]"
    if mode == "group" and not r.naive:
        acc = r.accumulator(inst)
        r.emit(f"*{acc} = {wrapping_add(r.lang, element, f'*{acc}', r.name(value))};")
    elif mode == "owned":
        r.emit(f"{target} = {wrapping_add(r.lang, element, target, r.name(value))};")
    else:
        r.emit(atomic_add(r.lang, element, f"&{target}", r.name(value)))


BODY_LOWERINGS: dict[Op, Lowering] = {Op.ALLOC: _body_alloc, Op.ATOMIC_ADD: _body_atomic_add}


# --- the program ---------------------------------------------------------------------------------------


def render_called_functions(lang: OpenCLRenderer, plans: dict[Function, OutOfSSA]) -> list[str]:
    """Every version of a called function that the calls rendered so far need (`address_spaces.py`): their
    prototypes, then their definitions. Rendering one may request others, until none is pending; a function
    that no rendered code calls is not emitted."""
    prototypes: list[str] = []
    definitions: list[str] = []
    while versions := lang.versions.drain():
        for version in versions:
            renderer = FunctionRenderer(lang, version.function, plans[version.function], version.spaces)
            prototypes.append(f"{renderer.signature()};")
            definitions += ["", *renderer.render()]
    return [*prototypes, *definitions]


def emit_opencl(module: Module, entry: Function, options: CodegenOptions, reduction: str = "group") -> OpenCLProgram:
    """The OpenCL program of `module` with `entry` as the kernel (module docstring). `reduction="atomic"`
    replaces work-group reductions by one atomic add per work item (a baseline for benchmarks).
    Out-of-SSA and the parallel-loop rewrite change `module` in place (it stays valid SSA with the same
    semantics); the caller passes a module it owns."""
    for function in module:
        if function.return_type.is_array:
            raise CodegenError(f"@{function.name} returns an array, which compiled code cannot do")
    writable = frozenset(module_memory_effects(module)[entry].writes)
    lang = OpenCLRenderer(options)
    plans = {fn: out_of_ssa(fn) for fn in module if fn is not entry}
    plan = out_of_ssa(entry)
    loops, serial_reasons = plan_parallel_loops(entry)
    serial = SerialRenderer(lang, entry, plan, loops, sum(len(loop.reductions) for loop in loops))
    serial_lines = serial.render()
    bodies = [BodyRenderer(lang, entry, plan, loop, serial, reduction) for loop in loops]
    body_lines = [["", *body.render(), "", *body.kernel()] for body in bodies]
    lines = [*lang.prelude_lines, *lang.helpers(), "", *render_called_functions(lang, plans)]
    for body in body_lines:
        lines += body
    lines += ["", *serial_lines]
    kernels = [LoopKernel(f"iz_par{b.loop.number}", b.loop.location, len(b.accumulators)) for b in bodies]
    return OpenCLProgram("\n".join(lines) + "\n", "iz_serial", kernels, serial.allocs, serial.layout.next,
                         lang.sites, serial_reasons, lang.uses_heap, writable)
