"""Lowering of calls: the intrinsics (math functions, `abs min max float int bool len`, conversions by
type name, `iz.zeros`/`iz.empty`) through a table keyed by the intrinsic's role, and calls of other
kernels, which stay `call` instructions whose callee is compiled into the same module."""

from __future__ import annotations

import ast
import builtins
import types
from collections.abc import Callable

from isozyme.frontend.annotations import MAX_RANK, ScalarAnnotation, scalar_annotation
from isozyme.frontend.definitions import kernel_definition_of
from isozyme.frontend.expressions import ExpressionLowering
from isozyme.frontend.intrinsics import intrinsic_role
from isozyme.frontend.type_rules import arithmetic_type, assignable, binary_type, describe_type
from isozyme.ssa.ir import Constant, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import F64, I1, I64, ArrayType, ScalarType, Type

TWO_ARGUMENT_MATH = {Op.ATAN2, Op.POW}
MIN_MAX_OPS: dict[str, tuple[Op, Op]] = {"min": (Op.IMIN, Op.FMIN), "max": (Op.IMAX, Op.FMAX)}


class CallLowering(ExpressionLowering):
    """The lowering of calls, on top of the expressions (whose `lower_call` it defines)."""

    def lower_call(self, node: ast.Call) -> Value | None:
        """The value of a call; None for a kernel that returns nothing."""
        if not self.is_static(node.func):
            raise self.error(node.func, f"cannot call '{ast.unparse(node.func)}': kernels call other kernels, "
                                        "math functions and builtins only (no methods)")
        callee = self.static_object(node.func)
        if kernel_definition_of(callee) is not None:
            return self.lower_kernel_call(node, callee)
        if isinstance(callee, ScalarAnnotation):
            return self.lower_conversion(node, callee.ssa)
        role = intrinsic_role(callee)
        if role is None:
            raise self.error(node.func, self.plain_call_message(node, callee))
        if node.keywords and role[0] not in ("zeros", "empty"):
            raise self.error(node.keywords[0], f"keyword arguments are not supported in calls of '{role[0]}'")
        return INTRINSIC_CALLS[role[0]](self, node, role[1])

    def plain_call_message(self, node: ast.Call, callee: object) -> str:
        name = ast.unparse(node.func)
        if getattr(builtins, getattr(callee, "__name__", ""), None) is callee:
            return f"call of Python builtin '{name}' is not supported in a kernel"
        if isinstance(callee, types.FunctionType):
            return f"call of plain Python function '{name}': decorate it with @iz.kernel to call it from a kernel"
        return f"call of '{name}' ({type(callee).__name__}) is not supported in a kernel"

    def arguments(self, node: ast.Call, counts: tuple[int, ...], what: str) -> list[Value]:
        if len(node.args) not in counts or any(isinstance(a, ast.Starred) for a in node.args):
            expected = " or ".join(str(c) for c in counts)
            raise self.error(node, f"{what}() takes {expected} argument(s) in a kernel, got {len(node.args)}")
        return [self.scalar(arg, f"{what}()") for arg in node.args]

    # --- math -----------------------------------------------------------------------------------------

    def lower_math(self, node: ast.Call, op: Op) -> Value:
        """`iz.<f>`: float math in the argument's float type (f32 stays f32; integers become f64)."""
        args = self.arguments(node, (2,) if op in TWO_ARGUMENT_MATH else (1,), ast.unparse(node.func))
        ty = binary_type(*args) if len(args) == 2 else args[0].type
        ty = ty if ty.is_float else F64  # type: ignore[union-attr]
        return self.emit_pure(op, *(self.convert(a, ty) for a in args))

    def lower_python_math(self, node: ast.Call, op: Op) -> Value:
        """`math.<f>`: as Python computes it, in f64; `math.floor`/`math.ceil` return integers."""
        args = self.arguments(node, (2,) if op in TWO_ARGUMENT_MATH else (1,), ast.unparse(node.func))
        if op in (Op.FLOOR, Op.CEIL) and not args[0].type.is_float:
            return self.convert(args[0], I64)  # math.floor of an int is that int
        result = self.emit_pure(op, *(self.convert(a, F64) for a in args))
        return self.emit_pure(Op.FPTOSI, result, type=I64) if op in (Op.FLOOR, Op.CEIL) else result

    # --- builtins -------------------------------------------------------------------------------------

    def lower_abs(self, node: ast.Call, _: object) -> Value:
        (value,) = self.arguments(node, (1,), "abs")
        value = self.convert(value, I64) if value.type is I1 else value
        return self.emit_pure(Op.FABS if value.type.is_float else Op.IABS, value)

    def lower_min_max(self, node: ast.Call, function: Callable) -> Value:
        """`min(a, b, c)` folds left like Python's: the first of equal minima, nan as Python orders it."""
        name = function.__name__
        if len(node.args) < 2:
            raise self.error(node, f"{name}() needs at least two arguments in a kernel (no iterables)")
        args = [self.scalar(arg, f"{name}()") for arg in node.args]
        result = args[0]
        for value in args[1:]:
            ty = arithmetic_type(result, value)
            int_op, float_op = MIN_MAX_OPS[name]
            result = self.emit_pure(float_op if ty.is_float else int_op, self.convert(result, ty),
                                    self.convert(value, ty))
        return result

    def lower_conversion(self, node: ast.Call, target: ScalarType) -> Value:
        """`float(x)`, `int(x)`, `bool(x)`, `f32(x)`: explicit conversions (ints truncate toward zero)."""
        name = ast.unparse(node.func)
        if not node.args and not node.keywords:
            return Constant(target, 0)
        (value,) = self.arguments(node, (1,), name)
        return self.convert(value, target)

    def lower_float(self, node: ast.Call, _: object) -> Value:
        return self.lower_conversion(node, F64)

    def lower_int(self, node: ast.Call, _: object) -> Value:
        return self.lower_conversion(node, I64)

    def lower_bool(self, node: ast.Call, _: object) -> Value:
        return self.lower_conversion(node, I1)

    def lower_len(self, node: ast.Call, _: object) -> Value:
        if len(node.args) != 1:
            raise self.error(node, "len() takes exactly one argument")
        return self.b.dim(self.array(node.args[0]), 0)

    def lower_range_outside_for(self, node: ast.Call, _: object) -> Value:
        raise self.error(node, f"'{ast.unparse(node.func)}' is only allowed as the iterable of a for loop")

    # --- local arrays ---------------------------------------------------------------------------------

    def lower_alloc(self, node: ast.Call, function: Callable) -> Value:
        """`iz.zeros(shape, dtype)` / `iz.empty(shape, dtype)`: a local array, freed at kernel exit."""
        name = function.__name__
        given = dict(zip(("shape", "dtype"), node.args, strict=False))
        for keyword in node.keywords:
            if keyword.arg not in ("shape", "dtype") or keyword.arg in given:
                raise self.error(keyword, f"unexpected keyword argument '{keyword.arg}' of iz.{name}()")
            given[keyword.arg] = keyword.value
        if "shape" not in given or len(node.args) > 2:
            raise self.error(node, f"iz.{name}() takes a shape and a dtype: iz.{name}(n, f64) or "
                                   f"iz.{name}((n, m), f64)")
        shape_node = given["shape"]
        extents = shape_node.elts if isinstance(shape_node, ast.Tuple) else [shape_node]
        if not 1 <= len(extents) <= MAX_RANK:
            raise self.error(shape_node, f"local arrays have 1 to {MAX_RANK} dimensions, got {len(extents)}")
        element = self.dtype_argument(given.get("dtype"))
        sizes = []
        for extent in extents:
            size = self.scalar(extent, "an array extent")
            if not size.type.is_int:
                raise self.error(extent, f"array extents must be integers, got {describe_type(size.type)}")
            sizes.append(self.convert(size, I64))
        return self.b.alloc(element, *sizes, zeroed=name == "zeros")

    def dtype_argument(self, node: ast.expr | None) -> ScalarType:
        if node is None:
            return F64
        annotation = scalar_annotation(self.static_object(node)) if self.is_static(node) else None
        if annotation is None:
            raise self.error(node, f"unsupported dtype '{ast.unparse(node)}': use one of f32 f64 i32 i64 boolean")
        return annotation.ssa

    # --- kernel calls ---------------------------------------------------------------------------------

    def lower_kernel_call(self, node: ast.Call, kernel: object) -> Value | None:
        definition = kernel_definition_of(kernel)
        assert definition is not None  # lower_call dispatches here only for kernels
        callee = self.compiler.function_for(definition, self.source, node)
        params = definition.parameter_names()
        bound = self.bind_arguments(node, definition.name, params)
        values = [self.kernel_argument(definition.name, name, arg_node, value, param.type)
                  for (name, (arg_node, value)), param in zip(bound.items(), callee.args, strict=True)]
        call = self.b.call(callee, *values)
        return None if callee.return_type.is_void else call

    def bind_arguments(self, node: ast.Call, kernel: str,
                       params: list[str]) -> dict[str, tuple[ast.expr, Value]]:
        """Arguments by parameter name, evaluated left to right as written."""
        signature = f"kernel '{kernel}' takes {len(params)} argument(s) ({', '.join(params)})"
        if len(node.args) > len(params) or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, f"{signature}, got {len(node.args) + len(node.keywords)}")
        bound = {name: (arg, self.expr(arg)) for name, arg in zip(params, node.args, strict=False)}
        for keyword in node.keywords:
            if keyword.arg not in params or keyword.arg in bound:
                problem = "unexpected" if keyword.arg not in params else "repeated"
                raise self.error(keyword, f"{problem} keyword argument '{keyword.arg}': {signature}")
            bound[keyword.arg] = (keyword.value, self.expr(keyword.value))
        missing = [p for p in params if p not in bound]
        if missing:
            raise self.error(node, f"{signature}; missing: {', '.join(missing)}")
        return {name: bound[name] for name in params}

    def kernel_argument(self, kernel: str, param: str, node: ast.expr, value: Value,
                        ty: Type) -> Value:
        if isinstance(ty, ArrayType) or isinstance(value.type, ArrayType):
            if value.type != ty:
                raise self.error(node, f"argument '{param}' of kernel '{kernel}' must be {describe_type(ty)}, "
                                       f"got {describe_type(value.type)}")
            return value
        if not assignable(value.type, ty):  # type: ignore[arg-type]
            raise self.error(node, f"argument '{param}' of kernel '{kernel}' must be {describe_type(ty)}, got "
                                   f"{describe_type(value.type)} (convert it explicitly)")
        return self.convert(value, ty)


INTRINSIC_CALLS: dict[str, Callable[..., Value]] = {
    "math": CallLowering.lower_math,
    "python-math": CallLowering.lower_python_math,
    "abs": CallLowering.lower_abs,
    "min": CallLowering.lower_min_max,
    "max": CallLowering.lower_min_max,
    "float": CallLowering.lower_float,
    "int": CallLowering.lower_int,
    "bool": CallLowering.lower_bool,
    "len": CallLowering.lower_len,
    "range": CallLowering.lower_range_outside_for,
    "prange": CallLowering.lower_range_outside_for,
    "ndrange": CallLowering.lower_range_outside_for,
    "zeros": CallLowering.lower_alloc,
    "empty": CallLowering.lower_alloc,
}
"""Intrinsic role (see `intrinsics.INTRINSICS`) -> its lowering method."""
