"""Lowering of expressions: a dispatch table keyed by `ast` node type (`EXPRESSIONS`), and the operator
tables keyed by `ast` operator type. Short-circuit `and`/`or`, chained comparisons and conditional
expressions become control flow whose result flows through a hidden variable (so the phi machinery of
`ssa_construction` merges and converts it); in the test of an `if` or `while` they branch directly
(`lower_branch`)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from isozyme.frontend.lowering_state import LoweringState
from isozyme.frontend.type_rules import (
    CONVERSION_STEPS,
    arithmetic_type,
    binary_type,
    python_scalar_constant,
    true_division_type,
)
from isozyme.ssa.ir import Block, Constant, Value
from isozyme.ssa.ops import Op, result_type
from isozyme.ssa.semantics import evaluate
from isozyme.ssa.types import I1, I64, ArrayType, ScalarType, Type

ARITHMETIC: dict[type[ast.operator], tuple[Op, Op]] = {
    ast.Add: (Op.IADD, Op.FADD), ast.Sub: (Op.ISUB, Op.FSUB), ast.Mult: (Op.IMUL, Op.FMUL),
    ast.FloorDiv: (Op.IFLOORDIV, Op.FFLOORDIV), ast.Mod: (Op.IFLOORMOD, Op.FFLOORMOD),
}
"""Binary operators on numbers: (integer op, float op)."""

BITWISE: dict[type[ast.operator], Op] = {
    ast.BitAnd: Op.AND, ast.BitOr: Op.OR, ast.BitXor: Op.XOR, ast.LShift: Op.SHL, ast.RShift: Op.ASHR,
}
"""Binary operators on integers and booleans (shifts: integers only)."""

COMPARISONS: dict[type[ast.cmpop], tuple[Op, Op]] = {
    ast.Eq: (Op.ICMP_EQ, Op.FCMP_OEQ), ast.NotEq: (Op.ICMP_NE, Op.FCMP_UNE),
    ast.Lt: (Op.ICMP_SLT, Op.FCMP_OLT), ast.LtE: (Op.ICMP_SLE, Op.FCMP_OLE),
    ast.Gt: (Op.ICMP_SGT, Op.FCMP_OGT), ast.GtE: (Op.ICMP_SGE, Op.FCMP_OGE),
}
"""Comparison operators: (integer/boolean compare, float compare); `!=` is true for nan as in Python."""

OPERATOR_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}

CONSTRUCT_NAMES: dict[type[ast.AST], str] = {
    ast.With: "'with' statement", ast.AsyncWith: "'async with' statement", ast.Try: "'try' statement",
    ast.Raise: "'raise' statement", ast.Import: "'import' statement", ast.ImportFrom: "'import' statement",
    ast.Global: "'global' statement", ast.Nonlocal: "'nonlocal' statement", ast.Delete: "'del' statement",
    ast.FunctionDef: "nested function definition", ast.ClassDef: "class definition",
    ast.AsyncFunctionDef: "nested function definition", ast.AsyncFor: "'async for' loop",
    ast.Match: "'match' statement", ast.Lambda: "lambda", ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension", ast.DictComp: "dict comprehension", ast.GeneratorExp: "generator expression",
    ast.List: "list display", ast.Dict: "dict display", ast.Set: "set display", ast.Tuple: "tuple",
    ast.JoinedStr: "f-string", ast.Starred: "starred expression", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield from", ast.NamedExpr: "assignment expression (:=)", ast.Slice: "slice",
}
"""How diagnostics name a construct the kernel language does not have."""


def construct_name(node: ast.AST) -> str:
    return CONSTRUCT_NAMES.get(type(node), type(node).__name__)


class ExpressionLowering(LoweringState):
    """The lowering of expressions, on the state of `LoweringState`; calls go through `lower_call`."""

    def lower_call(self, node: ast.Call) -> Value | None:
        """The value of a call; None for a kernel that returns nothing (defined by `CallLowering`)."""
        raise NotImplementedError

    # --- entry points ---------------------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Value:
        """The SSA value of an expression."""
        handler = EXPRESSIONS.get(type(node))
        if handler is None:
            raise self.error(node, f"unsupported expression in a kernel: {construct_name(node)}")
        with self.located(node):
            return handler(self, node)

    def scalar(self, node: ast.expr, what: str = "this operation") -> Value:
        value = self.expr(node)
        if not isinstance(value.type, ScalarType):
            raise self.error(node, f"{what} needs a number, got the array {value.type}; kernels work element "
                                   "by element")
        return value

    def array(self, node: ast.expr) -> Value:
        value = self.expr(node)
        if not isinstance(value.type, ArrayType):
            raise self.error(node, f"expected an array, got a {value.type} scalar")
        return value

    # --- emission helpers -----------------------------------------------------------------------------

    def emit_pure(self, op: Op, *operands: Value, type: Type | None = None,
                  name: str | None = None) -> Value:
        """Emit a pure op, or fold it to a constant when all operands are constants and it does not trap."""
        ty = type or result_type(op, [o.type for o in operands])
        if all(isinstance(o, Constant) for o in operands) and isinstance(ty, ScalarType):
            try:
                return Constant(ty, evaluate(op, ty, [o.value for o in operands]))  # type: ignore[attr-defined]
            except (ArithmeticError, ValueError):
                pass  # keep the op: it raises (or misbehaves) at run time, as Python would
        return self.b.emit(op, *operands, type=type, name=name)

    def convert(self, value: Value, target: Type) -> Value:
        """`value` as `target` through the cast chain of `type_rules` (to boolean: a truth test)."""
        if value.type == target:
            return value
        if target is I1:
            return self.truth(value)
        steps = CONVERSION_STEPS[(value.type, target)]  # type: ignore[index]
        for op, ty in steps:
            value = self.emit_pure(op, value, type=ty)
        return value

    def truth(self, value: Value) -> Value:
        """Python's truth value of a scalar: `x != 0` (nan is true, as in Python)."""
        if value.type is I1:
            return value
        if isinstance(value.type, ArrayType):
            raise self.error(self.current_node, "the truth value of an array is ambiguous in a kernel")
        zero = Constant(value.type, 0)  # type: ignore[arg-type]
        return self.emit_pure(Op.FCMP_UNE if value.type.is_float else Op.ICMP_NE, value, zero)

    # --- leaves ---------------------------------------------------------------------------------------

    def lower_constant(self, node: ast.Constant) -> Value:
        constant = python_scalar_constant(node.value)
        if constant is None:
            kind = "integer out of the 64-bit range" if isinstance(node.value, int) else type(node.value).__name__
            raise self.error(node, f"unsupported constant in a kernel: {kind}")
        return constant

    def lower_name(self, node: ast.Name) -> Value:
        if node.id in self.local_names:
            return self.read_variable(node.id, node)
        return self.global_value(node.id, self.lookup_global(node.id, node), node)

    def lower_attribute(self, node: ast.Attribute) -> Value:
        if self.is_static(node.value):
            obj = self.static_object(node)
            return self.global_value(ast.unparse(node), obj, node)
        base = self.expr(node.value)
        if isinstance(base.type, ArrayType):
            if node.attr == "ndim":
                return Constant(I64, base.type.rank)
            if node.attr == "size":
                size: Value = Constant(I64, 1)
                for axis in range(base.type.rank):
                    size = self.emit_pure(Op.IMUL, size, self.b.dim(base, axis))
                return size
            if node.attr == "shape":
                raise self.error(node, "x.shape is only supported subscripted with a constant: x.shape[0]")
        raise self.error(node, f"unsupported attribute '.{node.attr}' of a {base.type} value")

    # --- arrays ---------------------------------------------------------------------------------------

    def lower_subscript(self, node: ast.Subscript) -> Value:
        shape = node.value
        if isinstance(shape, ast.Attribute) and shape.attr == "shape" and not self.is_static(shape.value):
            array = self.array(node.value.value)
            return self.b.dim(array, self.constant_axis(node.slice, array.type))  # type: ignore[arg-type]
        array = self.array(node.value)
        return self.b.load(array, *self.indices(node, array))

    def constant_axis(self, node: ast.expr, ty: ArrayType) -> int:
        value = self.expr(node)
        if not isinstance(value, Constant) or not value.type.is_int:
            raise self.error(node, "x.shape needs a constant integer index")
        axis = value.value + ty.rank if value.value < 0 else value.value  # type: ignore[operator]
        if not 0 <= axis < ty.rank:
            raise self.error(node, f"axis {value.value} is out of range for an array of {ty.rank} dimension(s)")
        return axis  # type: ignore[return-value]

    def indices(self, node: ast.Subscript, array: Value) -> list[Value]:
        """The i64 indices of `array[...]`; constant negative indices count from the end, as in Python."""
        ty: ArrayType = array.type  # type: ignore[assignment]
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(parts) != ty.rank:
            raise self.error(node, f"array of {ty.rank} dimension(s) indexed with {len(parts)} index(es); "
                                   "kernels access single elements")
        result = []
        for axis, part in enumerate(parts):
            if isinstance(part, ast.Slice):
                raise self.error(part, "slices are not supported in kernels; loop over the elements")
            index = self.scalar(part, "an array index")
            if not index.type.is_int:
                raise self.error(part, f"array index must be an integer, got {index.type}")
            index = self.convert(index, I64)
            if isinstance(index, Constant) and index.value < 0:  # type: ignore[operator]
                index = self.emit_pure(Op.IADD, self.b.dim(array, axis), index)
            result.append(index)
        return result

    # --- operators ------------------------------------------------------------------------------------

    def lower_binop(self, node: ast.BinOp) -> Value:
        """`left <op> right`. An operator chain nests as deep as it is long (`a + b + c` is `(a + b) + c`;
        generated code has thousands of terms), so the tree of `BinOp`s under `node` is walked with an
        explicit stack, each left operand before its right one as Python evaluates them; only operands that
        are not `BinOp`s go through `expr`."""
        values: list[Value] = []
        # (node, the operator it is an operand of, whether its own operands are lowered and on `values`)
        work: list[tuple[ast.expr, ast.BinOp | None, bool]] = [(node, None, False)]
        while work:
            current, parent, operands_lowered = work.pop()
            if operands_lowered:
                right, left = values.pop(), values.pop()
                with self.located(current):
                    values.append(self.binary(current, current.op, left, right))  # type: ignore[attr-defined]
            elif isinstance(current, ast.BinOp):
                work += [(current, parent, True), (current.right, current, False), (current.left, current, False)]
            else:
                symbol = OPERATOR_SYMBOLS.get(type(parent.op), "?")  # type: ignore[union-attr]
                values.append(self.scalar(current, f"'{symbol}'"))
        return values.pop()

    def binary(self, node: ast.AST, op: ast.operator, left: Value, right: Value) -> Value:
        """`left <op> right` with Python's typing (also used by augmented assignment)."""
        kind = type(op)
        if kind is ast.Div:
            ty = true_division_type(left, right)
            return self.emit_pure(Op.FDIV, self.convert(left, ty), self.convert(right, ty))
        if kind is ast.Pow:
            return self.power(node, left, right)
        if kind in ARITHMETIC:
            ty = arithmetic_type(left, right)
            ops = ARITHMETIC[kind]
            return self.emit_pure(ops[1] if ty.is_float else ops[0], self.convert(left, ty), self.convert(right, ty))
        if kind in BITWISE:
            ty = binary_type(left, right)
            if ty.is_float:
                raise self.error(node, f"'{OPERATOR_SYMBOLS[kind]}' needs integers, got {left.type} and {right.type}")
            if ty.is_bool and kind in (ast.LShift, ast.RShift):
                ty = I64
            return self.emit_pure(BITWISE[kind], self.convert(left, ty), self.convert(right, ty))
        raise self.error(node, f"unsupported operator '{OPERATOR_SYMBOLS.get(kind, kind.__name__)}' in a kernel")

    def power(self, node: ast.AST, base: Value, exponent: Value) -> Value:
        """`**`: `pow` on floats; an integer power only with a constant exponent >= 0 (by squaring)."""
        ty = arithmetic_type(base, exponent)
        if ty.is_float:
            return self.emit_pure(Op.POW, self.convert(base, ty), self.convert(exponent, ty))
        if not isinstance(exponent, Constant) or exponent.value < 0:  # type: ignore[operator]
            raise self.error(node, "integer ** needs a constant exponent >= 0 in a kernel; write float(x) ** y "
                                   "for a float power")
        base = self.convert(base, ty)
        result: Value = Constant(ty, 1)
        power, square = int(exponent.value), base  # type: ignore[arg-type]
        while power:
            if power & 1:
                result = square if isinstance(result, Constant) and result.value == 1 else \
                    self.emit_pure(Op.IMUL, result, square)
            power >>= 1
            if power:
                square = self.emit_pure(Op.IMUL, square, square)
        return result

    def lower_unaryop(self, node: ast.UnaryOp) -> Value:
        if isinstance(node.op, ast.Not):
            return self.emit_pure(Op.XOR, self.truth(self.scalar(node.operand, "'not'")), Constant(I1, True))
        operand = self.scalar(node.operand, "a unary operator")
        if operand.type is I1:
            operand = self.convert(operand, I64)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.USub):
            return self.emit_pure(Op.FNEG if operand.type.is_float else Op.INEG, operand)
        if operand.type.is_float:
            raise self.error(node, f"'~' needs an integer, got {operand.type}")
        return self.emit_pure(Op.XOR, operand, Constant(operand.type, -1))  # type: ignore[arg-type]

    def compare(self, node: ast.AST, op: ast.cmpop, left: Value, right: Value) -> Value:
        if type(op) not in COMPARISONS:
            raise self.error(node, f"unsupported comparison '{OPERATOR_SYMBOLS.get(type(op), '?')}' in a kernel")
        if not isinstance(left.type, ScalarType) or not isinstance(right.type, ScalarType):
            raise self.error(node, "comparisons need numbers; arrays cannot be compared in a kernel")
        ty = binary_type(left, right)
        int_op, float_op = COMPARISONS[type(op)]
        return self.emit_pure(float_op if ty.is_float else int_op, self.convert(left, ty), self.convert(right, ty))

    def lower_compare(self, node: ast.Compare) -> Value:
        if len(node.ops) == 1:
            return self.compare(node, node.ops[0], self.expr(node.left), self.expr(node.comparators[0]))
        return self.value_through_branches("cmp", node)

    def lower_boolop(self, node: ast.BoolOp) -> Value:
        """`a and b` is `a` when `a` is false, else `b` (Python returns the operand, not a boolean)."""
        result = self.hidden_variable("and" if isinstance(node.op, ast.And) else "or")
        merge = self.new_block("and.end" if isinstance(node.op, ast.And) else "or.end")
        for operand in node.values[:-1]:
            value = self.expr(operand)
            self.write_variable(result, value)
            rest = self.new_block("and.rhs" if isinstance(node.op, ast.And) else "or.rhs")
            truth = self.truth(value)
            if isinstance(node.op, ast.And):
                self.cond_branch(truth, rest, merge)
            else:
                self.cond_branch(truth, merge, rest)
            self.seal(rest, node)
            self.switch_to(rest)
            if self.current is None:  # a constant operand decided it: the rest is never evaluated
                break
        else:
            self.write_variable(result, self.expr(node.values[-1]))
            self.branch(merge)
        self.seal(merge, node)
        self.switch_to(merge)
        return self.read_variable(result, node)

    def lower_ifexp(self, node: ast.IfExp) -> Value:
        return self.branch_value("cond", node.test, node, lambda: self.expr(node.body),
                                 lambda: self.expr(node.orelse))

    def value_through_branches(self, hint: str, node: ast.expr) -> Value:
        """A boolean-valued expression evaluated by `lower_branch` into a phi of True/False."""
        return self.branch_value(hint, node, node, lambda: Constant(I1, True), lambda: Constant(I1, False))

    def branch_value(self, hint: str, test: ast.expr, node: ast.expr,
                     if_true: Callable[[], Value], if_false: Callable[[], Value]) -> Value:
        """`if_true()` or `if_false()`, each lowered in its own block, chosen by Python's truth of `test`
        (short-circuiting) and merged by a phi."""
        result = self.hidden_variable(hint)
        blocks = self.new_block(f"{hint}.true"), self.new_block(f"{hint}.false")
        merge = self.new_block(f"{hint}.end")
        self.lower_branch(test, *blocks)
        for block, produce in zip(blocks, (if_true, if_false), strict=True):
            self.seal(block, node)
            self.switch_to(block)
            if self.current is not None:
                self.write_variable(result, produce())
                self.branch(merge)
        self.seal(merge, node)
        self.switch_to(merge)
        if self.current is None:
            raise self.error(node, "internal: a conditional value with no reachable branch")
        return self.read_variable(result, node)

    # --- conditions as control flow -------------------------------------------------------------------

    def lower_branch(self, node: ast.expr, if_true: Block, if_false: Block) -> None:
        """Branch to `if_true` or `if_false` on Python's truth of `node`, short-circuiting `and`, `or`,
        `not` and chained comparisons."""
        with self.located(node):
            if isinstance(node, ast.BoolOp):
                for operand in node.values[:-1]:
                    rest = self.new_block("and.rhs" if isinstance(node.op, ast.And) else "or.rhs")
                    if isinstance(node.op, ast.And):
                        self.lower_branch(operand, rest, if_false)
                    else:
                        self.lower_branch(operand, if_true, rest)
                    self.seal(rest, node)
                    self.switch_to(rest)
                    if self.current is None:
                        return
                self.lower_branch(node.values[-1], if_true, if_false)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                self.lower_branch(node.operand, if_false, if_true)
            elif isinstance(node, ast.Compare) and len(node.ops) > 1:
                self.lower_chained_comparison(node, if_true, if_false)
            else:
                self.cond_branch(self.truth(self.scalar(node, "a condition")), if_true, if_false)

    def lower_chained_comparison(self, node: ast.Compare, if_true: Block, if_false: Block) -> None:
        """`a < b < c` is `a < b and b < c` with `b` evaluated once."""
        left = self.expr(node.left)
        for index, (op, comparator) in enumerate(zip(node.ops, node.comparators, strict=True)):
            right = self.expr(comparator)
            result = self.compare(node, op, left, right)
            if index == len(node.ops) - 1:
                self.cond_branch(result, if_true, if_false)
                return
            rest = self.new_block("cmp.next")
            self.cond_branch(result, rest, if_false)
            self.seal(rest, node)
            self.switch_to(rest)
            if self.current is None:
                return
            left = right

    def lower_call_expression(self, node: ast.Call) -> Value:
        value = self.lower_call(node)
        if value is None:
            raise self.error(node, f"'{ast.unparse(node.func)}' returns nothing; its call has no value")
        return value

    def lower_tuple(self, node: ast.Tuple) -> Value:
        raise self.error(node, "tuples are only supported on both sides of an assignment (a, b = b, a)")


EXPRESSIONS: dict[type[ast.AST], Callable[..., Value]] = {
    ast.Constant: ExpressionLowering.lower_constant,
    ast.Name: ExpressionLowering.lower_name,
    ast.Attribute: ExpressionLowering.lower_attribute,
    ast.Subscript: ExpressionLowering.lower_subscript,
    ast.BinOp: ExpressionLowering.lower_binop,
    ast.UnaryOp: ExpressionLowering.lower_unaryop,
    ast.Compare: ExpressionLowering.lower_compare,
    ast.BoolOp: ExpressionLowering.lower_boolop,
    ast.IfExp: ExpressionLowering.lower_ifexp,
    ast.Call: ExpressionLowering.lower_call_expression,
    ast.Tuple: ExpressionLowering.lower_tuple,
}
"""Expression node type -> its lowering method."""
