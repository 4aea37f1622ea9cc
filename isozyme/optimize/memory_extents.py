"""Buffer extents: which values are known when a function starts, their values for given arguments, and
the extent formulas that tell buffers of one size apart (`memory_reuse.py`'s docstring: "Buffers").

A value is known at the start when it is computable from the arguments alone: constants, arguments, `dim`
of an argument or of a non-growable alloc (its extent), and pure ops of those, wherever they are defined.
Evaluating or repeating such a value early changes nothing, since a pure op cannot trap and its value does
not depend on where it runs. This module only reads the IR: `ExtentEvaluator` evaluates, and a value it
cannot evaluate raises `Unevaluated` with the `BufferStatus` that says why (arguments not given:
symbolic; a failing op or a negative extent: invalid; not known at the start at all: dynamic).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from isozyme.optimize.memory_layout import BufferStatus
from isozyme.ssa.def_use import operands_first
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.interpreter import RUNTIME_ERRORS
from isozyme.ssa.ir import Argument, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import OP_INFO, Op
from isozyme.ssa.printer import Namer
from isozyme.ssa.semantics import SEMANTICS, evaluate, may_trap

ArgumentValue = int | float | bool | tuple[int, ...] | np.ndarray
"""What `sizes` gives per argument: a scalar's value, an array's shape (an int for a 1-D array) or the array."""


class Unevaluated(Exception):
    """An extent without a value: `status` says whether arguments are missing or it is not computable."""

    def __init__(self, status: BufferStatus, why: str = "") -> None:
        super().__init__(why)
        self.status = status


def argument_values(function: Function, sizes: Mapping[str, ArgumentValue] | Sequence[ArgumentValue] | None
                     ) -> dict[Argument, ArgumentValue]:
    """`sizes` keyed by argument: a mapping by name, or values in parameter order (None: not given)."""
    if sizes is None:
        return {}
    if isinstance(sizes, Mapping):
        return {arg: sizes[arg.name] for arg in function.args if arg.name in sizes}
    return {arg: size for arg, size in zip(function.args, sizes) if size is not None}


def _shape(arg: Argument, given: ArgumentValue) -> tuple[int, ...]:
    shape = tuple(given.shape) if isinstance(given, np.ndarray) else given
    shape = (shape,) if isinstance(shape, int) else tuple(int(extent) for extent in shape)  # type: ignore[union-attr]
    if len(shape) != arg.type.rank:  # type: ignore[attr-defined]
        raise ValueError(f"argument %{arg.name} is {arg.type}, but its given shape is {shape}")
    return shape


def computed_at_start(value: Value) -> bool:
    """Is `value` one of the pure computations on the arguments that `_EntryClones` repeats at the start?
    Pure ops, and ops that trap only on some operands when given one with which they cannot (`S // 4`, the
    trip count of a loop by blocks of four: `may_trap`)."""
    if not isinstance(value, Instruction) or isinstance(value, Phi) or value.op not in SEMANTICS:
        return False
    info = OP_INFO[value.op]
    return info.pure or not (info.reads_memory or info.writes_memory or may_trap(value))


def dim_source(dim: Instruction) -> Value | None:
    """What a `dim` known at the start reads: the argument, or the alloc's extent; None for other arrays."""
    array, axis = dim.operands[0], dim.attrs["axis"]
    if isinstance(array, Argument):
        return array
    if isinstance(array, Instruction) and array.op is Op.ALLOC and not is_growable_alloc(array):
        return array.operands[axis]  # type: ignore[index]
    return None


def start_inputs(value: Value) -> tuple[Value, ...]:
    """What a value known at the start is computed from: a pure op's operands, a `dim`'s source."""
    if isinstance(value, Instruction) and value.op is Op.DIM:
        source = dim_source(value)
        return () if source is None else (source,)
    return value.operands if computed_at_start(value) else ()  # type: ignore[attr-defined]


class ExtentEvaluator:
    """Values computable from the arguments alone (module docstring), evaluated for given arguments."""

    def __init__(self, arguments: dict[Argument, ArgumentValue]) -> None:
        self.arguments = arguments
        self.memo: dict[Value, object] = {}
        """The value, or the `Unevaluated` that says why there is none."""

    def value(self, value: Value) -> int | float | bool:
        for pending in operands_first(value, start_inputs, self.memo):  # a chain of ops may be long
            try:
                self.memo[pending] = self._evaluate(pending)
            except Unevaluated as missing:
                self.memo[pending] = missing
        result = self.memo[value]
        if isinstance(result, Unevaluated):
            raise result
        return result  # type: ignore[return-value]

    def _known(self, values: Sequence[Value]) -> list[int | float | bool]:
        """The evaluated `values`; raises for the first without a value that is not known at the start at
        all (such a value makes the extent dynamic, whatever the others lack), else for the first."""
        results = [self.memo[value] for value in values]
        missing = [result for result in results if isinstance(result, Unevaluated)]
        if missing:
            raise next((m for m in missing if m.status is BufferStatus.DYNAMIC), missing[0])
        return results  # type: ignore[return-value]

    def _evaluate(self, value: Value) -> int | float | bool:
        if isinstance(value, Constant):
            return value.value
        if isinstance(value, Argument):
            if value not in self.arguments:
                raise Unevaluated(BufferStatus.SYMBOLIC, f"%{value.name} not given")
            given = self.arguments[value]
            return given.item() if isinstance(given, np.generic) else given  # type: ignore[return-value]
        if isinstance(value, Instruction) and value.op is Op.DIM:
            return self._dim(value)
        if computed_at_start(value):
            operands = self._known(value.operands)  # type: ignore[union-attr]
            try:
                with np.errstate(all="ignore"):
                    return evaluate(value.op, value.type, operands)  # type: ignore[union-attr]
            except RUNTIME_ERRORS as error:
                raise Unevaluated(BufferStatus.INVALID, f"{value.op} fails: {error}") from None  # type: ignore[union-attr]
        raise Unevaluated(BufferStatus.DYNAMIC, f"{value.op if isinstance(value, Instruction) else value} "
                                                 f"is not known when the function starts")

    def _dim(self, dim: Instruction) -> int:
        source = dim_source(dim)
        if source is None:
            raise Unevaluated(BufferStatus.DYNAMIC, "dim of an array not known when the function starts")
        (known,) = self._known([source])  # raises when not given
        if isinstance(source, Argument) and source.type.is_array:
            return _shape(source, self.arguments[source])[dim.attrs["axis"]]  # type: ignore[index]
        return int(known)


def size_formula(alloc: Instruction, namer: Namer) -> str:
    element = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    return "*".join([str(element), *(namer.value(extent) for extent in alloc.operands)])


def formula_key(root: Value) -> Hashable:
    """Equal for values computed alike from the same arguments and constants (two `dim %x, 0` match)."""
    keys: dict[Value, Hashable] = {}
    for value in operands_first(root, start_inputs):  # a chain of ops may be long
        if isinstance(value, Constant):
            keys[value] = ("const", str(value.type), value.value)
        elif isinstance(value, Instruction) and value.op is Op.DIM and dim_source(value) is not None:
            source = dim_source(value)
            if isinstance(source, Argument) and source.type.is_array:
                keys[value] = ("dim", id(source), value.attrs["axis"])
            else:
                keys[value] = keys[source]  # type: ignore[index]
        elif computed_at_start(value):
            keys[value] = (value.op, str(value.type), *(keys[operand] for operand in value.operands))  # type: ignore[union-attr]
        else:
            keys[value] = ("value", id(value))
    return keys[root]


def byte_size(alloc: Instruction, extents: ExtentEvaluator) -> int:
    """The alloc's bytes; raises `Unevaluated` when they are not known: `dynamic` when one extent is not
    known at the start at all, whatever the others lack (an earlier extent's argument may only be missing
    from `sizes`, and placement, which gives no sizes, must not take such a buffer as placeable)."""
    missing: list[Unevaluated] = []
    shape: list[int | float | bool] = []
    for extent in alloc.operands:
        try:
            shape.append(extents.value(extent))
        except Unevaluated as why:
            missing.append(why)
    if missing:
        raise next((m for m in missing if m.status is BufferStatus.DYNAMIC), missing[0])
    if any(extent < 0 for extent in shape):  # type: ignore[operator]
        raise Unevaluated(BufferStatus.INVALID, f"negative extent in {shape}")
    element = alloc.type.element.numpy_dtype.itemsize  # type: ignore[attr-defined]
    return element * math.prod(shape)  # type: ignore[arg-type]
