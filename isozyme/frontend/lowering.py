"""Lowering of one kernel's AST to an SSA function: the statement dispatch table (`STATEMENTS`), the
blocks and branches of structured control flow, and the variables (through `SSAConstruction`).

Control flow. `for i in range(a, b, s)` becomes a counted loop in canonical form: the preheader computes
the trip count once, Python's `len(range(a, b, s))` for any i64 bounds (`ssa/range_length.py`: no
intermediate value wraps, a count over 2**63 - 1 is an OverflowError at the loop; a step only known at run
time is first asserted not zero), the header holds a 0-based counter `k` stepped by 1 on the single latch,
and the body computes `i = a + k*s` (just `k` for `range(n)`), which cannot wrap. The bounds the lowering
knows of the loop variables of enclosing loops (`int_facts`) choose the cheapest exact form of an inner
loop's count. `prange` loops are the same, with the counter phi flagged `parallel`. `for i, j in
iz.ndrange(n, m)` is one parallel loop over the pairs: k counts up to max(n, 0) * max(m, 0) (an
OverflowError when that does not fit in i64), i is k // m and j is k % m, j fastest (neighbouring work
items take neighbouring j): the whole iteration space is one NDRange on OpenCL however small n is.
(Nested `prange` loops stay nested: the outer one parallel, the inner serial in each iteration. Collapsing
them by default made a 2000 x 2000 elementwise kernel 3.9x slower on the CPU, a division and a remainder
per element and no vector loop.) `while`, `break`, `continue`, `for ... else` and several `return`s are
branches; code after a `return`, `break` or `continue` is unreachable and not lowered. Blocks are laid
out in the order they are entered.

Scoping is Python's: a name assigned anywhere in the kernel is local everywhere in it; other names are
looked up in the closure, the module globals and the builtins at compile time, and numbers found there
are frozen as constants. A local variable read where some path has not assigned it is a CompileError (Python
would raise UnboundLocalError at run time on that path only). Array variables may be renamed (`y = x`) but
not rebound to different arrays on different paths, so every access names one array.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from isozyme.frontend.annotations import scalar_annotation
from isozyme.frontend.calls import CallLowering
from isozyme.frontend.diagnostics import CompileError
from isozyme.frontend.expressions import construct_name
from isozyme.frontend.intrinsics import intrinsic_role
from isozyme.frontend.lowering_state import LoopTargets
from isozyme.frontend.type_rules import assignable, describe_type
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.range_length import I64_MAX, Interval, RangeLength, emit_range_length, signed_range
from isozyme.ssa.types import I64, ScalarType


class KernelLowering(CallLowering):
    """Lowers one kernel definition to an SSA function (see the module docstring)."""

    # --- the kernel -----------------------------------------------------------------------------------

    def lower(self) -> Function:
        """Lower the kernel body; the function is complete and verified-ready afterwards."""
        entry = self.new_block("entry")
        self.ssa.seal_block(entry)
        self.switch_to(entry)
        for arg in self.function.args:
            self.write_variable(arg.name, arg)  # type: ignore[arg-type]
        self.statements(self.source.tree.body)
        if self.current is not None:
            self.fall_off_end()
        self.finish()
        return self.function

    def fall_off_end(self) -> None:
        if not self.function.return_type.is_void:
            last = self.source.tree.body[-1]
            raise self.error(last, f"kernel '{self.definition.name}' is declared to return "
                                   f"{describe_type(self.function.return_type)} but can reach its end without "
                                   "a return")
        with self.located(self.source.tree.body[-1]):
            self.b.ret()

    def finish(self) -> None:
        for phi in self.ssa.surviving_array_phis():
            name = self.display.get(self.ssa.phi_var[phi], self.ssa.phi_var[phi])
            raise self.error(self.ssa.phi_sites[phi] or self.source.tree,
                             f"array variable '{name}' refers to different arrays on different paths; isozyme "
                             "needs every array access to name one array (copy elements instead)")
        for block in list(self.function.blocks):
            if block is not self.function.entry and not self.ssa.preds[block]:
                self.ssa.sealed.add(block)
                self.function.remove_block(block)
        problems = self.ssa.check_complete()
        if problems:
            raise CompileError(f"internal error in SSA construction of '{self.definition.name}': "
                               + "; ".join(problems), self.source.filename, self.source.first_line)

    def statements(self, body: list[ast.stmt]) -> None:
        for statement in body:
            if self.current is None:
                return  # unreachable: after return, break or continue
            handler = STATEMENTS.get(type(statement))
            if handler is None:
                raise self.error(statement, f"unsupported statement in a kernel: {construct_name(statement)}")
            with self.located(statement):
                handler(self, statement)

    # --- simple statements ----------------------------------------------------------------------------

    def lower_expr_statement(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or a string used as a comment
        if isinstance(node.value, ast.Call):
            with self.located(node.value):
                self.lower_call(node.value)
        else:
            self.expr(node.value)

    def lower_pass(self, node: ast.Pass) -> None:
        pass

    def lower_assert(self, node: ast.Assert) -> None:
        if node.msg is not None and not (isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str)):
            raise self.error(node.msg, "the message of an assert in a kernel must be a string literal")
        message = node.msg.value if node.msg is not None else f"assert {self.source.source_text(node.test)}"  # type: ignore
        condition = self.truth(self.scalar(node.test, "assert"))
        if not (isinstance(condition, Constant) and condition.value):
            self.b.assert_(condition, message)

    def lower_return(self, node: ast.Return) -> None:
        declared = self.function.return_type
        if node.value is None:
            if not declared.is_void:
                raise self.error(node, f"kernel '{self.definition.name}' must return a {describe_type(declared)} value")
            self.b.ret()
        else:
            value = self.expr(node.value)
            if declared.is_void:
                raise self.error(node.value, f"kernel '{self.definition.name}' returns a value but has no return "
                                             f"annotation; declare it: -> {describe_type(value.type)}")
            if not isinstance(value.type, ScalarType):
                raise self.error(node.value, "kernels return scalars only, not arrays")
            if not assignable(value.type, declared):  # type: ignore[arg-type]
                raise self.error(node.value, f"returned {describe_type(value.type)} does not fit the declared "
                                             f"return type {describe_type(declared)} (convert it explicitly)")
            self.b.ret(self.convert(value, declared))
        self.current = None

    def lower_break(self, node: ast.Break) -> None:
        self.branch(self.loops[-1].break_to)

    def lower_continue(self, node: ast.Continue) -> None:
        self.branch(self.loops[-1].continue_to)

    # --- assignment -----------------------------------------------------------------------------------

    def lower_assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Tuple | ast.List):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Tuple | ast.List):
                raise self.error(node.value, "tuples are only supported on both sides of an assignment (a, b = b, a)")
            self.assign_tuple(node.targets[0], node.value)  # type: ignore[arg-type]
            return
        value = self.expr(node.value)
        for target in node.targets:
            if isinstance(target, ast.Tuple | ast.List):
                raise self.error(target, "tuple assignment needs a tuple of the same length on the right")
            self.assign(target, value)

    def assign_tuple(self, targets: ast.Tuple, values: ast.Tuple) -> None:
        if len(targets.elts) != len(values.elts):
            raise self.error(values, f"cannot assign {len(values.elts)} values to {len(targets.elts)} targets")
        computed = [self.expr(value) for value in values.elts]  # all of the right side first, as Python
        for target, value in zip(targets.elts, computed, strict=True):
            if isinstance(target, ast.Tuple | ast.List | ast.Starred):
                raise self.error(target, "nested or starred tuple targets are not supported in kernels")
            self.assign(target, value)

    def assign(self, target: ast.expr, value: Value) -> None:
        with self.located(target):
            if isinstance(target, ast.Name):
                if isinstance(value, Instruction) and value.name is None:
                    value.name = target.id
                self.write_variable(target.id, value)
            elif isinstance(target, ast.Subscript):
                array = self.array(target.value)
                self.store(target, array, self.indices(target, array), value)
            else:
                raise self.error(target, f"cannot assign to {construct_name(target)} in a kernel")

    def store(self, node: ast.AST, array: Value, indices: list[Value], value: Value) -> None:
        element: ScalarType = array.type.element  # type: ignore[attr-defined]
        if not isinstance(value.type, ScalarType) or not assignable(value.type, element):
            raise self.error(node, f"cannot store a {describe_type(value.type)} value into an element of "
                                   f"{describe_type(array.type)} (convert it explicitly)")
        self.b.store(self.convert(value, element), array, *indices)

    def lower_augassign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            current = self.read_variable(node.target.id, node.target)
            if not isinstance(current.type, ScalarType):
                raise self.error(node.target, "augmented assignment needs a number, not an array")
            right = self.scalar(node.value, "augmented assignment")
            self.assign(node.target, self.binary(node, node.op, current, right))
        elif isinstance(node.target, ast.Subscript):
            array = self.array(node.target.value)
            indices = self.indices(node.target, array)
            current = self.b.load(array, *indices)
            right = self.scalar(node.value, "augmented assignment")
            self.store(node, array, indices, self.binary(node, node.op, current, right))
        else:
            raise self.error(node.target, f"cannot assign to {construct_name(node.target)} in a kernel")

    def lower_annassign(self, node: ast.AnnAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "annotated assignment needs a plain variable name")
        annotation = scalar_annotation(self.static_object(node.annotation)) if self.is_static(node.annotation) else None
        if annotation is None:
            raise self.error(node.annotation, "a local variable annotation must be a scalar type "
                                              "(f32 f64 i32 i64 boolean)")
        if node.value is None:
            return
        value = self.scalar(node.value, "assignment")
        if not assignable(value.type, annotation.ssa):  # type: ignore[arg-type]
            raise self.error(node.value, f"cannot assign a {describe_type(value.type)} value to '{node.target.id}: "
                                         f"{annotation.name}' (convert it explicitly)")
        self.assign(node.target, self.convert(value, annotation.ssa))

    # --- if -------------------------------------------------------------------------------------------

    def lower_if(self, node: ast.If) -> None:
        then_block = self.new_block("if.then")
        else_block = self.new_block("if.else") if node.orelse else None
        merge = self.new_block("if.end")
        self.lower_branch(node.test, then_block, else_block or merge)
        for block, body in ((then_block, node.body), (else_block, node.orelse)):
            if block is None:
                continue
            self.seal(block, node)
            self.switch_to(block)
            self.statements(body)
            if self.current is not None:
                self.branch(merge)
        self.seal(merge, node)
        self.switch_to(merge)

    # --- loops ----------------------------------------------------------------------------------------

    def loop_body(self, body: list[ast.stmt], targets: LoopTargets) -> None:
        self.loops.append(targets)
        self.statements(body)
        self.loops.pop()

    def loop_else(self, node: ast.For | ast.While, else_block: Block | None, exit_block: Block) -> None:
        if else_block is not None:
            self.seal(else_block, node)
            self.switch_to(else_block)
            self.statements(node.orelse)
            if self.current is not None:
                self.branch(exit_block)
        self.seal(exit_block, node)
        self.switch_to(exit_block)

    def lower_while(self, node: ast.While) -> None:
        header, body = self.new_block("while.header"), self.new_block("while.body")
        else_block = self.new_block("while.else") if node.orelse else None
        exit_block = self.new_block("while.end")
        self.branch(header)
        self.switch_to(header)
        self.lower_branch(node.test, body, else_block or exit_block)
        self.seal(body, node)
        self.switch_to(body)
        self.loop_body(node.body, LoopTargets(exit_block, header))
        if self.current is not None:
            self.branch(header)
        self.seal(header, node)
        self.loop_else(node, else_block, exit_block)

    def lower_for(self, node: ast.For) -> None:
        call = node.iter
        role = intrinsic_role(self.static_object(call.func)) if isinstance(call, ast.Call) and \
            self.is_static(call.func) else None
        if role is not None and role[0] == "ndrange":
            return self.lower_ndrange(node)
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "a for loop variable must be a plain name")
        if role is None or role[0] not in ("range", "prange"):
            raise self.error(node.iter, "for loops iterate over range(...), iz.prange(...) or iz.ndrange(...) only")
        assert isinstance(call, ast.Call)
        start, stop, step = self.range_arguments(call)
        length = self.trip_count(call, start, stop, step)
        unit = isinstance(start, Constant) and start.value == 0 and isinstance(step, Constant) and step.value == 1
        target = node.target
        between = self.between(start, stop, step)

        def assign(counter: Value) -> None:  # i = start + k * step: between start and stop, exactly
            offset = counter if isinstance(step, Constant) and step.value == 1 else \
                self.emit_pure(Op.IMUL, counter, step)
            value = offset if isinstance(start, Constant) and start.value == 0 else \
                self.emit_pure(Op.IADD, start, offset)
            if value is not counter:
                self.int_facts[value] = between
            self.assign(target, value)
        self.counted_loop(node, length, target.id if unit else f"{target.id}.iv", target.id, assign,
                          role[0] == "prange")

    def lower_ndrange(self, node: ast.For) -> None:
        """`for i, j in iz.ndrange(n, m)`: one parallel loop over the n * m pairs (module docstring)."""
        call = node.iter
        assert isinstance(call, ast.Call)
        if call.keywords or len(call.args) != 2:
            raise self.error(call, "iz.ndrange takes two extents: for i, j in iz.ndrange(n, m)")
        target = node.target
        if not isinstance(target, ast.Tuple) or len(target.elts) != 2 or \
                not all(isinstance(name, ast.Name) for name in target.elts):
            raise self.error(target, "iz.ndrange's loop variables are two plain names: for i, j in iz.ndrange(n, m)")
        outer, inner = target.elts
        assert isinstance(outer, ast.Name) and isinstance(inner, ast.Name)
        lengths = []
        for extent in call.args:
            value = self.scalar(extent, "iz.ndrange()")
            if value.type.is_float:
                raise self.error(extent, f"iz.ndrange() needs integer extents, got {describe_type(value.type)}")
            stop = self.convert(value, I64)
            lengths.append(self.trip_count(call, Constant(I64, 0), stop, Constant(I64, 1)))
        trips = [length.trip for length in lengths]
        most = lengths[0].most * lengths[1].most
        with self.located(call):
            if most > I64_MAX:  # n * m must not wrap: n <= (2**63 - 1) // m (m = 0 cannot overflow)
                largest = self.emit_pure(Op.IFLOORDIV, Constant(I64, I64_MAX), self.emit_pure(Op.IMAX, trips[1],
                                                                                             Constant(I64, 1)))
                self.b.assert_(self.b.icmp_sle(trips[0], largest), "iz.ndrange() has more than 2**63 - 1 pairs",
                               "OverflowError")
            total = self.emit_pure(Op.IMUL, trips[0], trips[1], name="trip")

        def assign(counter: Value) -> None:  # i = k // m, j = k % m (m > 0 in the body: k < n * m)
            for name, op, length in ((outer, Op.IFLOORDIV, lengths[0]), (inner, Op.IFLOORMOD, lengths[1])):
                with self.located(name):
                    value = self.emit_pure(op, counter, trips[1])
                    self.int_facts[value] = (0, max(length.most - 1, 0))
                    self.assign(name, value)
        self.counted_loop(node, RangeLength(total, min(most, I64_MAX)), f"{outer.id}.{inner.id}.iv", inner.id,
                          assign, True)

    def counted_loop(self, node: ast.For, length: RangeLength, counter_name: str, name: str,
                     assign: Callable[[Value], None], parallel: bool) -> None:
        """A loop of `length.trip` iterations over `node.body` (module docstring): a 0-based counter k
        stepped by 1, from which `assign` sets the loop variables at the start of the body. What the body's
        lowering knows of k and of the loop variables (`int_facts`) holds there only: it is dropped after."""
        trip = length.trip
        counter = self.hidden_variable(counter_name)
        self.write_variable(counter, Constant(I64, 0))
        header, body, latch = self.new_block("for.header"), self.new_block("for.body"), self.new_block("for.latch")
        else_block = self.new_block("for.else") if node.orelse else None
        exit_block = self.new_block("for.end")
        self.branch(header)
        self.switch_to(header)
        index = self.read_variable(counter, node)
        self.cond_branch(self.b.icmp_slt(index, trip, name=f"{name}.cond"), body, else_block or exit_block)
        self.seal(body, node)
        self.switch_to(body)
        known = dict(self.int_facts)
        self.int_facts[index] = (0, max(length.most - 1, 0))
        with self.located(node.target):
            assign(index)
        self.loop_body(node.body, LoopTargets(exit_block, latch))
        self.int_facts = known
        if self.current is not None:
            self.branch(latch)
        self.seal(latch, node)
        self.switch_to(latch)
        if self.current is not None:
            following = self.emit_pure(Op.IADD, self.read_variable(counter, node), Constant(I64, 1),
                                       name=f"{self.display[counter]}.next")
            self.write_variable(counter, following)
            self.branch(header)
        self.seal(header, node)
        if parallel and isinstance(index, Instruction) and index.op is Op.PHI:
            index.flags.add("parallel")
        self.loop_else(node, else_block, exit_block)

    def range_arguments(self, call: ast.Call) -> tuple[Value, Value, Value]:
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise self.error(call, "range() takes 1 to 3 positional arguments")
        values = []
        for arg in call.args:
            value = self.scalar(arg, "range()")
            if value.type.is_float:
                raise self.error(arg, f"range() needs integers, got {describe_type(value.type)}")
            values.append(self.convert(value, I64))
        if len(values) == 1:
            return Constant(I64, 0), values[0], Constant(I64, 1)
        start, stop = values[0], values[1]
        step = values[2] if len(values) == 3 else Constant(I64, 1)
        if isinstance(step, Constant) and step.value == 0:
            raise self.error(call.args[2], "range() step must not be zero")
        return start, stop, step

    def trip_count(self, call: ast.Call, start: Value, stop: Value, step: Value) -> RangeLength:
        """`len(range(start, stop, step))`, exact for any i64 bounds (`range_length.py`)."""
        with self.located(call):
            if not isinstance(step, Constant):
                self.b.assert_(self.b.icmp_ne(step, 0), "range() step must not be zero")
            length = emit_range_length(self.b, start, stop, step, self.int_facts)
            if isinstance(length.trip, Instruction) and length.trip.name is None:
                length.trip.name = "trip"
            return length

    def between(self, start: Value, stop: Value, step: Value) -> Interval:
        """Bounds of the values `range(start, stop, step)` gives, from those of its arguments."""
        a, b = signed_range(start, self.int_facts), signed_range(stop, self.int_facts)
        up, down = (a[0], b[1] - 1), (b[0] + 1, a[1])
        sign = signed_range(step, self.int_facts)
        if sign[0] > 0:
            return up
        if sign[1] < 0:
            return down
        return (min(up[0], down[0]), max(up[1], down[1]))


STATEMENTS: dict[type[ast.AST], Callable[..., None]] = {
    ast.Expr: KernelLowering.lower_expr_statement,
    ast.Pass: KernelLowering.lower_pass,
    ast.Assert: KernelLowering.lower_assert,
    ast.Return: KernelLowering.lower_return,
    ast.Break: KernelLowering.lower_break,
    ast.Continue: KernelLowering.lower_continue,
    ast.Assign: KernelLowering.lower_assign,
    ast.AugAssign: KernelLowering.lower_augassign,
    ast.AnnAssign: KernelLowering.lower_annassign,
    ast.If: KernelLowering.lower_if,
    ast.While: KernelLowering.lower_while,
    ast.For: KernelLowering.lower_for,
}
"""Statement node type -> its lowering method."""
