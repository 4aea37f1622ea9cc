"""The entry function as the serial kernel `iz_serial` (`SerialRenderer`), which runs as one work item and
yields to the host for every launch of a parallel loop, every local array and every grow
(`opencl_program.py` describes the execution), and the part of it after each launch as a function that a
chained launch's last work group runs (`SerialRenderer.continuation`).

Before it returns to the host the serial kernel saves in the control buffer (`opencl_control.py`) the
scalars live after that point and the local arrays' extents (`serial_liveness.py`; and what the loop kernel
it launches reads), and the resume restores them and jumps to the point it stopped at (`RESTORE`, then a
`switch` whose case restores that point's scalars), so it continues as if it had never stopped. The blocks
of a parallel loop other than its header are never run here: the host runs them as the loop's kernel
(`opencl_loop_kernels.py`).
"""

from __future__ import annotations

import re

from isozyme.codegen.abi import CodegenError
from isozyme.codegen.error_sites import ErrorSite, register_site
from isozyme.codegen.opencl_control import (
    ALLOC,
    ARG0,
    CLEAR,
    DONE,
    ERROR,
    GROW,
    HEAP_WORDS,
    KIND,
    LAUNCH,
    REDUCTIONS,
    RESUME,
    RETURN,
    SEQUENCE,
    SERVED,
    START,
    AllocSite,
    Layout,
    argument_declarations,
    kernel_params,
    load_word,
    store_word,
    wrapping_add,
)
from isozyme.codegen.opencl_function import FunctionRenderer, Lowering
from isozyme.codegen.opencl_language import OpenCLRenderer
from isozyme.codegen.opencl_lowerings import LOWERINGS, check_shape, check_size, lower_alloc, lower_view
from isozyme.codegen.out_of_ssa import OutOfSSA
from isozyme.codegen.parallel_loops import ParallelLoop
from isozyme.codegen.serial_liveness import SerialLiveness
from isozyme.ssa.ir import Block, Function, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType, ScalarType

SERIAL_RUN = "iz_serial_run"
"""`iz_serial_run<k>`: the serial kernel's code from its resume after loop k's launch to its next request
(`SerialRenderer.continuation`), which the last work group of a chained launch of loop k runs."""
SERIAL_RUN_ATTRIBUTES = "__attribute__((always_inline))"
_ASSIGNED = re.compile(r"(?<![\w.\[])([A-Za-z_]\w*)\s*(?:(?:[-+*/%|&^]|<<|>>)?=(?!=)|\+\+|--)"
                       r"|(?<![&\w)\]])&\s*([A-Za-z_]\w*)")
"""An assignment to a variable in a line of C, of any kind, or its address taken (a binary `&` counts too:
a word kept for nothing costs a store, a word dropped wrongly a stale value; `SerialRenderer.continuation`)."""
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
"""A name in a line of C."""

SERIAL_CLEAR_LIMIT = 4096
"""A zeroed local array of at most this many elements whose buffer is large enough is cleared by the serial
kernel itself (`SerialRenderer.request_alloc`); a larger one by the host (a fill command)."""


class SerialRenderer(FunctionRenderer):
    """The entry function as the serial kernel `iz_serial` (module docstring)."""

    structured_loops = False
    """Its blocks stay labels: it resumes at labels after it yields to the host."""

    def __init__(self, lang: OpenCLRenderer, function: Function, plan: OutOfSSA, loops: list[ParallelLoop],
                 reductions: int) -> None:
        super().__init__(lang, function, plan, LOWERINGS)
        self.loops = loops
        self.by_header = {loop.header: loop for loop in loops}
        self.hidden = {block for loop in loops for block in loop.loop.blocks if block is not loop.header}
        self.layout = Layout(REDUCTIONS + reductions)
        self.site_of: dict[Instruction, int] = {}
        self.allocs: list[AllocSite] = []
        self.capacities = 0
        """The first of the control words holding each site's buffer capacity (`request_alloc`)."""
        self.resumes = 0
        self.liveness: SerialLiveness | None = None
        self.current: Instruction | ParallelLoop | None = None
        """The instruction being rendered, or the loop whose launch is (`request`: what is live there)."""
        self.unit_lines: dict[Block | ParallelLoop, tuple[int, int]] = {}
        """The lines of each block and of each loop's launch (`continuation`)."""
        self.launch_resume: dict[int, int] = {}
        """The resume point after each loop's launch, by loop number."""
        self.trap = 0
        """The error site of reaching code the serial kernel must not (`render`)."""
        self.restores: dict[int, list[tuple[Value, int]]] = {}
        """The words each resume restores beyond those restored at every resume (`_restore`)."""
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
        self.liveness = SerialLiveness(self.function, self.loops, self.hidden)
        self.capacities = self.layout.next
        self.layout.next += len(self.allocs)
        self.render_blocks([block for block in self.blocks if block not in self.hidden])
        for loop in self.loops:
            self._launch(loop)
        trap = register_site(self.lang.sites, ErrorSite("assert", None, "prange", {
            "message": "internal error: the serial kernel reached the body of a parallel loop"}))
        cases = [" ".join([f"    case {r}:", *(self._load(key) for key in self.restores[r]), f"goto R{r};"])
                 for r in range(1, self.resumes + 1)]
        self.lines += ["L_trap:;", f"  err[0] = {trap}; return;", "RESTORE:;", *self._restore(),
                       f"  switch (ctl[{RESUME}]) {{", *cases, "  }", "  goto L_trap;"]
        self.trap = trap
        params = self.run_params()
        head = [f"__kernel void iz_serial({', '.join(params)}) {{", f"  __global long* err = ctl + {ERROR};",
                *argument_declarations(self.lang, self.function)]
        # the first run of a call (`served` 2) zeroes the control words but the host's (the heap's size, the
        # sites' capacities), so the host writes them only when they change; a replayed resume (`served` 0)
        # goes on only if a replayed kernel served the request (a launch or a clear); after the end or an
        # error it does nothing
        replayed = f"(ctl[{KIND}] == {LAUNCH} || ctl[{KIND}] == {CLEAR}) && ctl[{SERVED}] == ctl[{SEQUENCE}]"
        start = [f"  if (served == {START}) {{ for (int w = 0; w < {self.capacities}; w++) "
                 f"if (w != {HEAP_WORDS}) ctl[w] = 0; }}",
                 f"  if (err[0] != 0 || ctl[{KIND}] == {DONE}) return;",
                 f"  if (ctl[{RESUME}] != 0) {{ if (!served && !({replayed})) return; goto RESTORE; }}"]
        return [*head, *self.decls, *start, *self.lines, "}"]

    def run_params(self) -> list[str]:
        """The parameters of the serial kernel; a loop kernel's begin with them (but `served`), and a
        continuation (`continuation`) takes them but `served`."""
        return [*kernel_params(self.lang, self.function), *self.site_params(), "__global long* ctl",
                "__global long* heap", "long served"]

    def render_blocks(self, blocks: list[Block]) -> None:
        for block in blocks:  # straight blocks (`structured_loops` False): note each one's lines
            start = len(self.lines)
            super().render_blocks([block])
            self.unit_lines[block] = (start, len(self.lines))

    def continuation_call(self, loop: ParallelLoop) -> str:
        """The statement that runs loop `loop`'s continuation (`continuation`) from its kernel."""
        names = [param.split()[-1] for param in self.run_params()[:-1]]
        return f"{SERIAL_RUN}{loop.number}({', '.join(names)});"

    def continuation(self, loop: ParallelLoop) -> list[str]:
        """`iz_serial_run<k>`: what the serial kernel does when it resumes after launch `loop` until its
        next request, as a function that the last work group of a chained launch of the loop's kernel
        calls (`opencl_loop_kernels.py`). Only the code reachable from that resume without a request is
        there (the header, the blocks after the loop up to the next launch, an alloc's request, the end):
        a loop kernel's registers are at least those of the functions it calls, and with the whole serial
        kernel there (127 registers) the reverse pairs loop of the GMM gradient (`benchmarks/tuned/
        gmm_gpu_kernels.gmm_pairs_qmu`) took 148 registers and 1.64 ms on an H100 against 64 and 0.86
        unchained; with this code 90 (64 once `runtime/opencl_registers.py` holds it at the unchained
        count). Any other label it names traps."""
        number = self.launch_resume[loop.number]
        units: dict[Block | ParallelLoop, None] = {}  # in the order they are reached
        work: list[Block | ParallelLoop] = [loop]
        while work:
            unit = work.pop()
            if unit in units:
                continue
            units[unit] = None
            if unit is loop:
                work.append(loop.header)  # the resume goes on at the loop's header
            if isinstance(unit, ParallelLoop):
                continue  # another launch yields: what follows it runs after its own resume
            for successor in unit.successors:
                entered = self.by_header.get(successor)
                if entered is not None and unit not in entered.loop:
                    work.append(entered)
                elif successor not in self.hidden:
                    work.append(successor)
        code: list[str] = []
        for unit in units:
            start, stop = self.unit_lines[unit]
            code += self.lines[start:stop]
        # a word restored here and saved again unchanged is left as it is: those copies (the arrays' extents
        # above all) held some 30 registers in the GMM gradient's loop kernels
        restored = [*self._always(), *self.restores[number]]
        assigned = {match.group(1) or match.group(2) for line in code for match in _ASSIGNED.finditer(line)}
        unchanged = {self._store(key) for key in restored
                     if (self.names[key[0]] + ("" if key[1] < 0 else f"_d{key[1]}")) not in assigned}
        code = [line for line in code if line.strip() not in unchanged]
        # what the code uses, and the restores that compute it (a view's pointer from its arena and offset)
        used = {name for line in code for name in _NAME.findall(line)}
        restores: list[str] = []
        for line in reversed([*self._restore(), *(f"  {self._load(key)}" for key in self.restores[number])]):
            target = line.split("=", 1)[0].strip()
            if target in used:
                restores.insert(0, line)
                used.update(_NAME.findall(line.split("=", 1)[1]))
        # its scalars are plain (in registers): `volatile` ones on the stack made the GMM gradient's `iz_par3`
        # (the continuation after the forward loop, run once by one work item) take 0.41 ms against 0.28 with
        # the continuation cut out (H200); what they would add to a loop kernel's registers
        # `runtime/opencl_registers.py` holds back
        decls = [decl for decl in self.decls if decl.split("=", 1)[0].split()[-1] in used]
        lines = [f"{SERIAL_RUN_ATTRIBUTES} void {SERIAL_RUN}{loop.number}({', '.join(self.run_params()[:-1])}) {{",
                 f"  __global long* err = ctl + {ERROR};", *argument_declarations(self.lang, self.function),
                 *decls, "  if (err[0] != 0) return;", f"  if (ctl[{RESUME}] != {number}) goto L_trap;",
                 *restores, f"  goto R{number};", *code]
        for block in self.blocks:  # labels it names but cannot reach (a loop header after another launch)
            if block not in self.hidden and block not in units:
                lines.append(f"{self.labels[block]}:; goto L_trap;")
        return [*lines, "L_trap:;", f"  err[0] = {self.trap}; return;", "}"]

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

    def render_instruction(self, block: Block, inst: Instruction) -> None:
        self.current = inst
        super().render_instruction(block, inst)

    def _always(self) -> list[tuple[Value, int]]:
        """The words every yield saves and every resume restores: local arrays' extents and views' offsets
        (`serial_liveness.py`)."""
        keys = [(value, part) for value, part in self.layout.words if part >= 0]
        for value, part in self.layout.words:
            if part >= 0 and isinstance(value, Instruction) and value.op is Op.VIEW:
                offset = value.operands[-1]
                if (offset, -1) in self.layout.words and (offset, -1) not in keys:
                    keys.append((offset, -1))
        return keys

    def _live_here(self) -> list[tuple[Value, int]]:
        """The scalars live at the yield being rendered (`current`), as layout keys, in layout order."""
        assert self.liveness is not None
        current = self.current
        if isinstance(current, ParallelLoop):
            live = self.liveness.at_launch(current)
        else:
            assert current is not None, "a yield outside any instruction"
            live = self.liveness.after(current)
        return [(value, part) for value, part in self.layout.words if part < 0 and value in live]

    def _store(self, key: tuple[Value, int]) -> str:
        value, part = key
        word = f"ctl[{self.layout.words[key]}]"
        if part >= 0:
            return f"{word} = {self.names[value]}_d{part};"
        return store_word(value.type, word, self.names[value])

    def _load(self, key: tuple[Value, int]) -> str:
        value, part = key
        word = f"ctl[{self.layout.words[key]}]"
        if part >= 0:
            return f"{self.names[value]}_d{part} = {word};"
        return f"{self.names[value]} = {load_word(value.type, word)};"

    def _restore(self) -> list[str]:
        """What every resume restores: the sites' buffers, the words of `_always`, and the views' pointers."""
        lines = [f"  {self.names[alloc]} = s{site};" for alloc, site in self.site_of.items()]
        lines += ["  " + self._load(key) for key in self._always()]
        for view in self.function.instructions():  # after the arenas and the offsets
            if view.op is Op.VIEW and view.block not in self.hidden:
                lines.append(f"  {self.names[view]} = {view_pointer(self, view, self.name(view.operands[-2]))};")
        return lines

    def check_launch_reads(self, loop: ParallelLoop, reads: set[tuple[Value, int]]) -> None:
        """CodegenError unless every control word loop `loop`'s kernel read (`Layout.recording`) is saved at
        its launch: a word left out would hand the kernel a stale value."""
        assert self.liveness is not None
        saved = set(self._always()) | {(value, -1) for value in self.liveness.at_launch(loop)}
        missing = [self.names[value] + ("" if part < 0 else f"_d{part}") for value, part in reads - saved]
        if missing:
            raise CodegenError(f"internal error: the kernel of parallel loop {loop.number} reads "
                               f"{', '.join(missing)}, which its launch does not save")

    def request_alloc(self, alloc: Instruction, count: str, inner: bool) -> None:
        """Make the site of `alloc` hold `count` elements: ask the host to allocate (ALLOC) only when its
        buffer is too small (the host writes each buffer's capacity in the control words from `capacities`
        before the call), to clear it (CLEAR: a fill across the GPU, which a replayed call does without the
        host) when a zeroed array of more than `SERIAL_CLEAR_LIMIT` elements needs it; otherwise reuse the
        buffer as it is, clearing a smaller zeroed array here. A round trip to the host costs far more on a
        GPU than that loop. An array that is not zeroed is not filled then (its contents are unspecified, as
        on `llvm`); the host fills it with its uninitialized value when it does allocate it."""
        site = self.site_of[alloc]
        zeroed = not inner and self.allocs[site].fill == 0
        capacity = f"ctl[{self.capacities + site}]"
        ty = self.lang.storage(alloc.type.element)  # type: ignore[attr-defined]
        self.emit(f"if (({count}) > {capacity}) {{")
        resumes = [self.request(ALLOC, str(site), count, "1" if inner else "0")]
        if zeroed:
            self.emit(f"}} else if (({count}) > {SERIAL_CLEAR_LIMIT}) {{")
            resumes.append(self.request(CLEAR, str(site), "0L", f"({count}) * (long)sizeof({ty})"))
            self.emit(f"}} else {{ for (long q = 0; q < ({count}); q++) s{site}[q] = ({ty})0; }}")
        else:
            self.emit("}")
        self.lines += [f"R{resume}:;" for resume in resumes]  # each resumed path goes on after the blocks
        if not inner:  # the resumed path restores it (`_restore`), the other one needs it too
            self.emit(f"{self.names[alloc]} = s{site};")

    def yield_to_host(self, kind: int, *args: str) -> None:
        """Ask the host for something, save, return; the host's next launch resumes right here."""
        self.lines.append(f"R{self.request(kind, *args)}:;")

    def request(self, kind: int, *args: str) -> int:
        """The statement that makes a request, saves and returns; the number of its resume point, whose
        label the caller places. A LAUNCH or CLEAR request gets the next request number (`SEQUENCE`),
        which a replayed call's kernels check (`opencl_program.py`)."""
        self.resumes += 1
        words = "".join(f" ctl[{ARG0 + i}] = {arg};" for i, arg in enumerate(args))
        count = f" ctl[{SEQUENCE}] += 1;" if kind in (LAUNCH, CLEAR) else ""
        live = self._live_here()
        self.restores[self.resumes] = live
        self.emit(f"ctl[{KIND}] = {kind};{words} ctl[{RESUME}] = {self.resumes};{count}")
        for key in [*self._always(), *live]:  # save what the resume restores (and the loop kernel reads)
            self.emit(self._store(key))
        self.emit("return;")
        return self.resumes

    def _launch(self, loop: ParallelLoop) -> None:
        start = len(self.lines)
        self.lines.append(f"P{loop.number}:;")
        self.current = loop
        trip = self.name(loop.trip)
        anchor = next(p for p in loop.header.phis if "parallel" in p.flags)
        self.check(f"{trip} >= 0", anchor, "assert", [], message="a prange loop whose trip count is negative "
                   "never ends")
        for alloc, kind in loop.scratch.items():  # one copy per work item
            count = scratch_count(self, alloc, kind)
            check_size(self, alloc, [trip, f"({count})"])
            self.request_alloc(alloc, f"({count}) * {trip}", kind == "inner")
        for reduction in loop.reductions:
            self.emit(f"ctl[{REDUCTIONS + reduction.slot}] = 0;")
        self.yield_to_host(LAUNCH, str(loop.number), trip)
        self.launch_resume[loop.number] = self.resumes
        for iv in loop.inductions:
            phi = self.name(iv.phi)
            self.emit(f"{phi} = (long)((ulong){phi} + (ulong){trip} * (ulong){self.name(iv.step)});")
        for reduction in loop.reductions:
            ty: ScalarType = reduction.phi.type  # type: ignore[assignment]
            phi = self.name(reduction.phi)
            self.emit(f"{phi} = {wrapping_add(self.lang, ty, phi, reduction_word(ty, reduction.slot))};")
        self.emit(f"goto {self.labels[loop.header]};")
        self.unit_lines[loop] = (start, len(self.lines))


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
        return lower_alloc(r, inst)
    name = r.names[inst]
    extents = [r.name(v) for v in inst.operands]
    check_shape(r, inst, inst.operands)
    if not inst.uses:  # kept for its checks only (`optimize/dead_code_elimination.py`)
        return None
    for k, extent in enumerate(extents):
        r.emit(f"{name}_d{k} = {extent};")
    count = " * ".join(f"{name}_d{k}" for k in range(len(extents)))
    r.request_alloc(inst, count, inner=False)
    return None


def _serial_view(r: FunctionRenderer, inst: Instruction) -> None:
    """In the serial kernel, a zeroed view of more than `SERIAL_CLEAR_LIMIT` elements is cleared by the host
    (CLEAR site, first byte, bytes: a fill command, across the GPU) rather than by the one work item."""
    assert isinstance(r, SerialRenderer)
    lower_view(r, inst, clear=False)
    if "zeroed" not in inst.flags:
        return None
    *_, arena, offset = inst.operands
    name = r.names[inst]
    storage = r.lang.storage(inst.type.element)  # type: ignore[attr-defined]
    count = " * ".join(f"{name}_d{k}" for k in range(inst.type.rank)) or "1"  # type: ignore[attr-defined]
    r.emit(f"if (({count}) > {SERIAL_CLEAR_LIMIT}) {{")
    r.yield_to_host(CLEAR, str(r.site_of[arena]), f"{r.name(offset)} * 8L",  # type: ignore[index]
                    f"({count}) * (long)sizeof({storage})")
    r.lines.insert(len(r.lines) - 1, f"  }} else {{ for (long k = 0; k < ({count}); k++) {name}[k] = ({storage})0; }}")
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


SERIAL_LOWERINGS: dict[Op, Lowering] = {Op.ALLOC: _serial_alloc, Op.VIEW: _serial_view, Op.GROW: _serial_grow,
                                         Op.RET: _serial_ret}
