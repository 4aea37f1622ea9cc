"""What lowering one kernel keeps, and the operations on it every part of the lowering uses: the builder
and the block being filled, structured branches, the variables (through `SSAConstruction`, whose phis may
need a conversion at the end of a predecessor: `convert`, which the expression lowering supplies), and the
names outside the kernel, read at compile time through the module's `Compilation` so they are recorded.

`ExpressionLowering` builds on this class, `CallLowering` on that, and `KernelLowering` (statements) on
top: each layer calls only what is below it, plus the hooks a lower layer declares (`convert`,
`lower_call`) and a higher one defines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from isozyme.frontend.definitions import MISSING, Compilation, KernelDefinition, kernel_definition_of
from isozyme.frontend.diagnostics import CompileError, KernelSource
from isozyme.frontend.intrinsics import intrinsic_role
from isozyme.frontend.ssa_construction import SSAConstruction, TypeConflict, UndefinedVariable
from isozyme.frontend.type_rules import describe_type, join, python_scalar_constant
from isozyme.ssa.builder import Builder
from isozyme.ssa.ir import Block, Constant, Function, Value
from isozyme.ssa.range_length import Interval
from isozyme.ssa.types import Type


@dataclass
class LoopTargets:
    """Where `break` and `continue` go in the innermost loop."""

    break_to: Block
    continue_to: Block


class LoweringState:
    """The state of lowering one kernel and the operations on it (see the module docstring)."""

    def __init__(self, definition: KernelDefinition, function: Function, compiler: Compilation,
                 hints: dict[tuple[int, str], Type]) -> None:
        self.definition, self.function, self.compiler = definition, function, compiler
        self.source: KernelSource = definition.source
        self.display: dict[str, str] = {}
        self.ssa = SSAConstruction(function, join, self._convert_at_end, hints, self.display)
        self.b = Builder()
        self.current: Block | None = None
        self.current_node: ast.AST = self.source.tree
        self.loops: list[LoopTargets] = []
        self.int_facts: dict[Value, Interval] = {}
        """Bounds of the loop variables of the loops whose body is being lowered (`range_length.py`)."""
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

    def convert(self, value: Value, target: Type) -> Value:
        """`value` converted to `target` at the builder's position (defined by `ExpressionLowering`)."""
        raise NotImplementedError


def assigned_names(function: ast.FunctionDef) -> set[str]:
    """Every name the kernel binds (parameters, assignment and loop targets): its local variables."""
    names = {arg.arg for arg in function.args.args}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names
