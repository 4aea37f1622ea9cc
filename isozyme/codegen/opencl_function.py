"""The renderer of one function (`FunctionRenderer`): C-style source for an SSA function after
out-of-SSA, one instruction at a time through a lowering table; `opencl_serial.py` and
`opencl_loop_kernels.py` extend it for the kernels.

Each function runs `out_of_ssa` first (phis become copies at the end of predecessors, `out_of_ssa.py`),
which splits edges of the module in place (it stays valid SSA). Every SSA value becomes one C variable
declared (zeroed) at the top of its function (gotos may then jump anywhere); every reachable block becomes
a label; `br`, `cbr` and `ret` become `goto`, `if (...) goto ...; else goto ...;` and `return`.
Instructions are rendered through the table the renderer is given (`opencl_lowerings.LOWERINGS`; a
subclass may override entries); a missing entry raises CodegenError naming the op.

Representation:
  - an array value is a data pointer plus one `long` extent per dimension (`v3`, `v3_d0`, `v3_d1`); row-major.
    Function parameters are `__global` pointers, except in the versions of a function that calls need for
    private arrays (`address_spaces.py`: one version per address-space signature, since OpenCL C 1.2 has no
    generic address space).
  - every function takes the error record `__global long* err` (`1 + PAYLOAD_WORDS` words) last; a failing
    check claims the record with a compare-and-swap (the first failing work item wins), writes the site's
    number and payload, and returns; a caller tests `err[0]` after every call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from isozyme.codegen.abi import CodegenError
from isozyme.codegen.address_spaces import Spaces, version_name
from isozyme.codegen.error_sites import PAYLOAD_WORDS, ErrorSite, register_site
from isozyme.codegen.opencl_language import CRenderer
from isozyme.codegen.out_of_ssa import Copy, OutOfSSA, Temporary
from isozyme.ssa.cfg import predecessors, reverse_post_order
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import ArrayType

Lowering = Callable[["FunctionRenderer", Instruction], str | None]
"""Renders one instruction: a C expression for its result, or None after emitting statements itself."""

UNROLLED_NEVER = frozenset({Op.ATOMIC_ADD, Op.CALL})
"""Ops that keep a loop out of `render_loop`: on NVIDIA an atomic add is a warp sum of `volatile` assembly,
which nothing moves across, so unrolled copies only add code (the reverse kernel of `gmm_pairs`' gradient,
whose inner loop adds into two shared adjoints, took 2.25 ms unrolled by 8 against 1.55 ms, one H100); a
call is a function of its own, which the unroll copies."""


class FunctionRenderer:
    """Renders one function: declarations, then one label per reachable block."""

    structured_loops = True
    """Render simple loops as C loops with the language's unroll hint (`render_loop`)."""

    def __init__(self, language: CRenderer, function: Function, plan: OutOfSSA, lowerings: Mapping[Op, Lowering],
                 spaces: Spaces | None = None) -> None:
        """`lowerings`: how each op is rendered (`opencl_lowerings.LOWERINGS`). `spaces`: the address space of
        each parameter (this version of the function, `address_spaces.py`); by default every array parameter
        is global."""
        self.lang = language
        self.function = function
        self.plan = plan
        self.lowerings = lowerings
        self.names: dict[Value, str] = {}
        self.spaces: dict[Value, str | None] = {}
        """Address space of each array value's pointer (None: the language's global space)."""
        self.lines: list[str] = []
        self.decls: list[str] = []
        self.arg_spaces: Spaces = spaces or (None,) * len(function.args)
        for arg in function.args:
            self.names[arg] = f"a{arg.index}"
            self.spaces[arg] = self.arg_spaces[arg.index]
        self.blocks = reverse_post_order(function)
        self._predecessors: dict[Block, list[Block]] | None = None
        self.labels = {block: f"L{i}" for i, block in enumerate(self.blocks)}

    def signature(self) -> str:
        params = []
        for arg in self.function.args:
            if isinstance(arg.type, ArrayType):
                params.append(f"{self.lang.pointer(arg.type, self.spaces[arg])} a{arg.index}")
                params += [f"long a{arg.index}_d{k}" for k in range(arg.type.rank)]
            else:
                params.append(f"{self.lang.scalar(arg.type)} a{arg.index}")
        params += [f"{self.lang.record_type()} err", f"{self.lang.record_type()} heap"]
        ret = "void" if self.function.return_type.is_void else self.lang.scalar(self.function.return_type)
        name = version_name(self.function, self.arg_spaces)
        return f"{self.lang.function_qualifier} {ret} {name}({', '.join(params)})".strip()

    # values

    def name(self, value: Value | Temporary) -> str:
        if isinstance(value, Temporary):
            return f"t{value.index}"
        if isinstance(value, Constant):
            return self.lang.constant(value)
        if value not in self.names:
            raise CodegenError(f"value %{value.name} of @{self.function.name} is used before it is rendered")
        return self.names[value]

    def element_stride(self, array: Value) -> str | None:
        """How many elements apart consecutive elements of `array` lie in its buffer; None: next to each
        other (a loop kernel interleaves the work items' scratch copies, `opencl_loop_kernels._body_alloc`)."""
        return None

    def extents(self, array: Value) -> list[str]:
        base = self.name(array)
        return [f"{base}_d{k}" for k in range(array.type.rank)]  # type: ignore[attr-defined]

    def declare(self, value: Value) -> None:
        name = f"v{len(self.names)}"
        self.names[value] = name
        if isinstance(value.type, ArrayType):
            if isinstance(value, Phi):
                spaces = {self.spaces.get(v) for v in value.operands if v in self.spaces}
                if len(spaces) > 1:
                    raise CodegenError("phi: an array phi mixing argument and local arrays is not supported")
                self.spaces[value] = spaces.pop() if spaces else None
            space = self.spaces.get(value, None)
            self.decls.append(f"  {self.lang.pointer(value.type, space)} {name} = 0;")
            self.decls += [f"  long {name}_d{k} = 0;" for k in range(value.type.rank)]
        elif not value.type.is_void:
            self.decls.append(f"  {self.lang.scalar(value.type)} {name} = 0;")

    def emit(self, line: str) -> None:
        self.lines.append(f"  {line}")

    def fail_return(self) -> str:
        if self.function.return_type.is_void:
            return "return;"
        return f"return ({self.lang.scalar(self.function.return_type)})0;"

    def check(self, ok: str, inst: Instruction, kind: str, payload: list[str], **details: object) -> None:
        """Continue when `ok`; else write a new error site's number and payload into the record and return."""
        site = register_site(self.lang.sites, ErrorSite(kind, str(inst.loc) if inst.loc else None, str(inst.op),
                                                        details))
        words = "".join(f" err[{i + 1}] = (long)({word});" for i, word in enumerate(payload[:PAYLOAD_WORDS]))
        # the first failing work item claims the record; the others only stop
        self.emit(f"if (!({ok})) {{ if (atom_cmpxchg((volatile __global long*)err, 0L, {site}L) == 0) {{{words} }} "
                  f"{self.fail_return()} }}")

    # the walk

    def render(self) -> list[str]:
        self.declare_all()
        self.render_blocks(self.blocks)
        return [f"{self.signature()} {{", *self.decls, *self.lines, "}"]

    def declare_all(self) -> None:
        """One variable per value of the function (and per out-of-SSA temporary)."""
        for block in self.blocks:  # declare in dominance order: a phi's array operands may come later
            for inst in block.instructions:
                if not inst.type.is_void and not isinstance(inst, Phi):
                    self._pre_declare(inst)
        for block in self.blocks:
            for phi in block.phis:
                self.declare(phi)
        for temp in self.plan.temporaries:
            self.decls.append(f"  {self.lang.scalar(temp.type)} t{temp.index} = 0;")

    def render_blocks(self, blocks: list[Block]) -> None:
        inside: set[Block] = set()
        rendered = set(blocks)
        for block in blocks:
            if block in inside:
                continue
            self.lines.append(f"{self.labels[block]}:;")
            loop = self.simple_loop(block, rendered) if self.lang.unroll and self.structured_loops else None
            if loop is None:
                self.render_straight(block)
                continue
            body, stays = loop
            inside.update(body)
            self.render_loop(block, body, stays)

    def render_straight(self, block: Block, terminator: bool = True) -> None:
        """`block`'s instructions; without its terminator (`br`) but with the copies before it, when not
        `terminator`."""
        for inst in block.instructions[len(block.phis):]:
            if inst.is_terminator and not terminator:
                self.render_copies(block)
            else:
                self.render_instruction(block, inst)

    def simple_loop(self, header: Block, blocks: set[Block]) -> tuple[list[Block], bool] | None:
        """When `header` ends in a conditional branch one of whose successors starts a chain of blocks
        that each have one predecessor and end in a branch to the next, the last back to `header`: that
        chain and whether the loop goes on when the condition is true; None also for a loop that makes
        atomic adds or calls (`UNROLLED_NEVER`). Such a loop (a counted inner loop with a straight-line body)
        is rendered as a C loop with an unroll hint (`render_loop`)."""
        terminator = header.terminator
        if (terminator is None or terminator.op is not Op.CBR or self.plan.copies.get(header)
                or terminator.successors[0] is terminator.successors[1]):
            return None
        for successor, stays in zip(terminator.successors, (True, False), strict=True):
            body, block = [], successor
            while (block is not header and block in blocks and block not in body and block.terminator is not None
                   and block.terminator.op is Op.BR and self.single_predecessor(block)):
                body.append(block)
                block = block.terminator.successors[0]
            if block is header and body and self.target(body[-1], header) == self.labels[header]:
                if any(inst.op in UNROLLED_NEVER for part in (header, *body) for inst in part.instructions):
                    return None
                return body, stays
        return None

    def single_predecessor(self, block: Block) -> bool:
        if self._predecessors is None:
            self._predecessors = predecessors(self.function)
        return len(self._predecessors.get(block, ())) == 1

    def render_loop(self, header: Block, body: list[Block], stays: bool) -> None:
        """`for (;;) { header; if (!(condition)) break; body }` under the language's unroll hint, then a jump
        to the header's other successor: the C compiler sees a loop whose trip count it can compute, and
        unrolls it so that the loads of several iterations are in flight at once (a GPU does not reorder a
        work item's instructions). Measured on one H100 (f64, n=1000 d=64 K=100): the forward kernel of
        `benchmarks/tuned/gmm_gpu_kernels.gmm_pairs`, whose inner loop waits on each iteration's loads, took
        0.38 ms against 0.55 ms as `goto`s (unrolled by 4: 0.55, by 16: 0.53); that of `gmm_blocked`, which
        keeps four points' sums per work item, 0.56 ms either way."""
        terminator = header.terminator
        assert terminator is not None
        condition = self.name(terminator.operands[0])
        self.lines.append(self.lang.unroll)
        self.emit("for (;;) {")
        for inst in header.instructions[len(header.phis):-1]:
            self.render_instruction(header, inst)
        self.emit(f"if (!({condition})) break;" if stays else f"if ({condition}) break;")
        for block in body:
            self.render_straight(block, terminator=False)
        self.emit("}")
        self.emit(f"goto {self.target(header, terminator.successors[1 if stays else 0])};")

    def alloc_space(self, alloc: Instruction) -> str | None:
        """The address space of a local array of constant extents: private here (None: the language's global
        space)."""
        return self.lang.private_space

    def _pre_declare(self, inst: Instruction) -> None:
        if inst.op is Op.ALLOC:
            fixed = all(isinstance(v, Constant) for v in inst.operands) and "growable" not in inst.flags
            self.spaces[inst] = self.alloc_space(inst) if fixed else None  # None: on the device heap
        elif inst.op is Op.VIEW:
            self.spaces[inst] = self.spaces[inst.operands[-2]]  # its arena's (declared first: it dominates)
        elif isinstance(inst.type, ArrayType):
            raise CodegenError(f"{inst.op}: an array-valued {inst.op} is not supported by the OpenCL backend yet")
        self.declare(inst)

    def render_instruction(self, block: Block, inst: Instruction) -> None:
        if inst.is_terminator:
            self.render_copies(block)
        lowering = self.lowering(inst.op)
        if lowering is None:
            raise CodegenError(f"the OpenCL backend cannot emit op '{inst.op}' yet")
        expression = lowering(self, inst)
        if expression is not None:
            self.emit(f"{self.names[inst]} = {expression};")

    def lowering(self, op: Op) -> Lowering | None:
        """How `op` is rendered here (subclasses override some ops)."""
        return self.lowerings.get(op)

    def target(self, source: Block, successor: Block) -> str:
        """The label a branch from `source` to `successor` jumps to."""
        return self.labels[successor]

    def render_copies(self, block: Block) -> None:
        for copy in self.plan.copies.get(block, []):
            self.render_copy(copy)

    def render_copy(self, copy: Copy) -> None:
        destination, source = copy.destination, copy.source
        if isinstance(destination.type, ArrayType):
            if isinstance(source, Temporary) or isinstance(destination, Temporary):
                raise CodegenError("phi: swapping array phis is not supported by the OpenCL backend yet")
            self.emit(f"{self.name(destination)} = {self.name(source)};")
            for d, s in zip(self.extents(destination), self.extents(source), strict=True):
                self.emit(f"{d} = {s};")
            return
        self.emit(f"{self.name(destination)} = {self.name(source)};")
