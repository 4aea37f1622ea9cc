"""Lowering of one kernel's AST to an SSA function: the statement dispatch table (`STATEMENTS`), the
blocks and branches of structured control flow, and the variables (through `SSAConstruction`).

Control flow. `for i in range(a, b, s)` becomes a counted loop in canonical form: the preheader computes
the trip count `max(0, (b - a + s - sign(s)) // s)` once (Python's `range` length; a step whose sign is
only known at run time gets `sign` by a select, and an assertion that it is not zero), the header holds a
0-based counter `k` stepped by 1 on the single latch, and the body computes `i = a + k*s` (just `k` for
`range(n)`). `prange` loops are the same, with the counter phi flagged `parallel`. `while`, `break`,
`continue`, `for ... else` and several `return`s are branches; code after a `return`, `break` or
`continue` is unreachable and not lowered. Blocks are laid out in the order they are entered.

Scoping is Python's: a name assigned anywhere in the kernel is local everywhere in it; other names are
looked up in the closure, the module globals and the builtins at compile time, and numbers found there
are frozen as constants. A local variable read where some path has not assigned it is a CompileError (Python
would raise UnboundLocalError at run time on that path only). Array variables may be renamed (`y = x`) but
not rebound to different arrays on different paths, so every access names one array.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from isozyme.frontend.annotations import scalar_annotation
from isozyme.frontend.calls import CallLowering, describe_type, kernel_definition_of
from isozyme.frontend.diagnostics import CompileError, KernelSource
from isozyme.frontend.expressions import ExpressionLowering, construct_name, python_scalar_constant
from isozyme.frontend.intrinsics import intrinsic_role
from isozyme.frontend.ssa_construction import SSAConstruction, TypeConflict, UndefinedVariable
from isozyme.frontend.type_rules import assignable, join
from isozyme.ssa.builder import Builder
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import I64, ScalarType, Type

if TYPE_CHECKING:
    from isozyme.frontend.compiler import KernelDefinition, ModuleCompiler

MISSING = object()
"""`lookup_global` found nothing."""


@dataclass
class LoopTargets:
    """Where `break` and `continue` go in the innermost loop."""

    break_to: Block
    continue_to: Block


class KernelLowering(ExpressionLowering, CallLowering):
    """Lowers one kernel definition to an SSA function (see the module docstring)."""

    def __init__(self, definition: KernelDefinition, function: Function, compiler: ModuleCompiler,
                 hints: dict[tuple[int, str], Type]) -> None:
        self.definition, self.function, self.compiler = definition, function, compiler
        self.source: KernelSource = definition.source
        self.display: dict[str, str] = {}
        self.ssa = SSAConstruction(function, join, self._convert_at_end, hints, self.display)
        self.b = Builder()
        self.current: Block | None = None
        self.current_node: ast.AST = self.source.tree
        self.loops: list[LoopTargets] = []
        self.local_names = assigned_names(self.source.tree)
        self.hidden_count = 0

    # --- infrastructure -------------------------------------------------------------------------------

    def error(self, node: ast.AST, message: str) -> CompileError:
        return self.source.error(node, message)

    @contextmanager
    def located(self, node: ast.AST) -> Iterator[None]:
        """Stamp instructions made inside with `node`'s source location."""
        saved_loc, saved_node = self.b.loc, self.current_node
        self.b.loc, self.current_node = self.source.loc(node), node
        try:
            yield
        finally:
            self.b.loc, self.current_node = saved_loc, saved_node

    def new_block(self, name: str) -> Block:
        return self.ssa.new_block(name)

    def switch_to(self, block: Block | None) -> None:
        """Continue emitting in `block`; a block nothing branches to is unreachable (None)."""
        if block is not None and block is not self.function.entry and not self.ssa.preds[block]:
            block = None
        if block is not None:
            self.function.blocks.remove(block)
            self.function.blocks.append(block)
            self.b.at_end(block)
        self.current = block

    def branch(self, target: Block) -> None:
        assert self.current is not None
        self.b.br(target)
        self.ssa.add_edge(self.current, target)
        self.current = None

    def cond_branch(self, condition: Value, if_true: Block, if_false: Block) -> None:
        """A conditional branch; a constant condition branches directly."""
        assert self.current is not None
        if isinstance(condition, Constant):
            self.branch(if_true if condition.value else if_false)
            return
        self.b.cbr(condition, if_true, if_false)
        self.ssa.add_edge(self.current, if_true)
        self.ssa.add_edge(self.current, if_false)
        self.current = None

    def seal(self, block: Block, node: ast.AST) -> None:
        try:
            self.ssa.seal_block(block)
        except (UndefinedVariable, TypeConflict) as problem:
            raise self.variable_error(problem, node) from None

    def _convert_at_end(self, value: Value, target: Type, block: Block) -> Value:
        saved = (self.b.block, self.b.anchor)
        self.b.before(block.terminator)  # type: ignore[arg-type]
        try:
            return self.convert(value, target)
        finally:
            self.b.block, self.b.anchor = saved

    # --- variables ------------------------------------------------------------------------------------

    def hidden_variable(self, hint: str) -> str:
        """A fresh variable no Python name can clash with."""
        self.hidden_count += 1
        name = f".{hint}{self.hidden_count}"
        self.display[name] = hint
        return name

    def write_variable(self, name: str, value: Value) -> None:
        assert self.current is not None
        self.ssa.write_variable(name, self.current, value)

    def read_variable(self, name: str, node: ast.AST) -> Value:
        assert self.current is not None
        self.ssa.site, self.ssa.loc = node, self.source.loc(node)
        try:
            return self.ssa.read_variable(name, self.current)
        except (UndefinedVariable, TypeConflict) as problem:
            raise self.variable_error(problem, node) from None

    def variable_error(self, problem: Exception, node: ast.AST) -> CompileError:
        name = self.display.get(problem.name, problem.name)  # type: ignore[attr-defined]
        if isinstance(problem, TypeConflict):
            kinds = " and ".join(dict.fromkeys(describe_type(t) for t in problem.types))
            return self.error(node, f"type conflict between paths: variable '{name}' is {kinds} on different "
                                    "paths to this point")
        if not self.ssa.is_defined(problem.name):  # type: ignore[attr-defined]
            return self.error(node, f"local variable '{name}' is used before it is assigned")
        return self.error(node, f"variable '{name}' may be used before it is assigned (not every path to this "
                                "point assigns it)")

    # --- names outside the kernel ---------------------------------------------------------------------

    def lookup_global(self, name: str, node: ast.AST) -> object:
        obj = self.compiler.read_global(self.definition, name)
        if obj is MISSING:
            raise self.error(node, f"unknown name '{name}'")
        return obj

    def is_static(self, node: ast.expr) -> bool:
        """True when `node` names something outside the kernel (a global, a module attribute)."""
        if isinstance(node, ast.Name):
            return node.id not in self.local_names
        return isinstance(node, ast.Attribute) and self.is_static(node.value)

    def static_object(self, node: ast.expr) -> object:
        """The Python object a static name or `module.attribute` chain refers to, at compile time."""
        if isinstance(node, ast.Name):
            return self.lookup_global(node.id, node)
        assert isinstance(node, ast.Attribute)
        base = self.static_object(node.value)
        if not isinstance(base, type(np)):
            raise self.error(node, f"attribute '.{node.attr}' of '{ast.unparse(node.value)}' is not supported in a "
                                   "kernel (only module attributes such as math.pi or iz.sqrt)")
        value = self.compiler.read_attribute(self.definition, ast.unparse(node.value), base, node.attr)
        if value is MISSING:
            raise self.error(node, f"module '{base.__name__}' has no attribute '{node.attr}'")
        return value

    def global_value(self, name: str, obj: object, node: ast.AST) -> Value:
        """A global used as a value: numbers are frozen constants; anything else is an error."""
        constant = python_scalar_constant(obj)
        if constant is not None:
            return constant
        if kernel_definition_of(obj) is not None or intrinsic_role(obj) is not None:
            raise self.error(node, f"'{name}' is a function; kernels can only call it")
        if isinstance(obj, np.ndarray):
            raise self.error(node, f"global array '{name}' cannot be used in a kernel; pass it as a parameter")
        raise self.error(node, f"global '{name}' of type {type(obj).__name__} cannot be used in a kernel (only "
                               "numeric constants are frozen at compile time)")

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
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "a for loop variable must be a plain name")
        call = node.iter
        role = intrinsic_role(self.static_object(call.func)) if isinstance(call, ast.Call) and \
            self.is_static(call.func) else None
        if role is None or role[0] not in ("range", "prange"):
            raise self.error(node.iter, "for loops iterate over range(...) or iz.prange(...) only")
        assert isinstance(call, ast.Call)
        start, stop, step = self.range_arguments(call)
        trip = self.trip_count(call, start, stop, step)
        unit = isinstance(start, Constant) and start.value == 0 and isinstance(step, Constant) and step.value == 1
        counter = self.hidden_variable(node.target.id if unit else f"{node.target.id}.iv")
        self.write_variable(counter, Constant(I64, 0))
        header, body, latch = self.new_block("for.header"), self.new_block("for.body"), self.new_block("for.latch")
        else_block = self.new_block("for.else") if node.orelse else None
        exit_block = self.new_block("for.end")
        self.branch(header)
        self.switch_to(header)
        index = self.read_variable(counter, node)
        self.cond_branch(self.b.icmp_slt(index, trip, name=f"{node.target.id}.cond"), body, else_block or exit_block)
        self.seal(body, node)
        self.switch_to(body)
        with self.located(node.target):
            offset = index if isinstance(step, Constant) and step.value == 1 else \
                self.emit_pure(Op.IMUL, index, step)
            value = offset if isinstance(start, Constant) and start.value == 0 else \
                self.emit_pure(Op.IADD, start, offset)
            self.assign(node.target, value)
        self.loop_body(node.body, LoopTargets(exit_block, latch))
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
        if role[0] == "prange" and isinstance(index, Instruction) and index.op is Op.PHI:
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

    def trip_count(self, call: ast.Call, start: Value, stop: Value, step: Value) -> Value:
        """`len(range(start, stop, step))` = max(0, (stop - start + step - sign(step)) // step)."""
        with self.located(call):
            if isinstance(step, Constant):
                sign: Value = Constant(I64, 1 if step.value > 0 else -1)  # type: ignore[operator]
            else:
                self.b.assert_(self.b.icmp_ne(step, 0), "range() step must not be zero")
                sign = self.b.select(self.b.icmp_sgt(step, 0), Constant(I64, 1), Constant(I64, -1))
            distance = stop if isinstance(start, Constant) and start.value == 0 else \
                self.emit_pure(Op.ISUB, stop, start)
            if not (isinstance(step, Constant) and step.value == 1):
                adjust = self.emit_pure(Op.ISUB, step, sign)  # a constant when the step is one
                if not (isinstance(adjust, Constant) and adjust.value == 0):
                    distance = self.emit_pure(Op.IADD, distance, adjust)
                distance = self.emit_pure(Op.IFLOORDIV, distance, step)
            return self.emit_pure(Op.IMAX, distance, Constant(I64, 0), name="trip")


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


def assigned_names(function: ast.FunctionDef) -> set[str]:
    """Every name the kernel binds (parameters, assignment and loop targets): its local variables."""
    names = {arg.arg for arg in function.args.args}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names
