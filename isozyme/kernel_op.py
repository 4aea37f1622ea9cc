"""A kernel seen as a pure function of arrays: the half of `isozyme.torch` and `isozyme.jax` that knows no
framework. Each of them wraps a `KernelOp` in its own operator machinery and hands it numpy arrays.

A kernel writes its results into array parameters and may return a scalar. `KernelOp(kernel, outputs)` names
the array parameters that are outputs; the others are the op's *inputs*, in the kernel's order, and the op is

    (inputs) -> (fresh zeroed output arrays after the kernel ran, then the scalar return if any)

- **Outputs are fresh zeroed arrays.** A kernel may read an output's initial contents or accumulate into it
  (`out[i] += ...`); the op allocates every output with zeros before the call, so the op is a function of
  its inputs alone. An output's dtype and rank are its annotation's; its shape comes from its *shape rule*:
  `outputs` may be a sequence of names (each output then has the shape of the first input array of its
  rank), or a dict from name to a rule: the name of an input array (the output has its shape) or a function
  of the op's arguments, in order, returning the shape.
- **Inputs are never changed.** A kernel that may write an array parameter not named in `outputs` (func-attrs'
  summary, `enzyme_ad/custom.py`'s `reads_and_writes`) is refused at construction (ValueError): the
  frameworks hand the op buffers they consider immutable.
- **Inputs may alias each other.** A framework may pass one buffer twice (`f(x, x)`); kernels refuse array
  arguments that share memory (`runtime/arguments.py`), so an input that may share memory with an earlier
  one is copied first. Nothing else is copied.
- **The backward** (`backward`) is the kernel's reverse mode, one `iz.autodiff` call (Enzyme's combined mode:
  it runs the primal again on fresh zeroed outputs, then the reverse sweep). The cotangent of each float
  output is its output's shadow (a copy: autodiff consumes it), the cotangent of a float return is the seed,
  float input arrays get zero shadows and float scalars are Active; what comes back is the gradient of each
  float input (an array, or a number for a scalar) and None for integer and boolean inputs, which have no
  gradient. Integer outputs and integer returns carry no cotangent.
- **Forward mode** (`tangents`) is the kernel's forward mode, one `iz.fwddiff` call: each float input with
  its tangent (zero where none is given), each float output Duplicated with a zero tangent on a fresh
  zeroed output; what comes back is the tangent of each float output and of a float return.
- **Second derivatives** (`hessian_vector`) are isozyme's forward over reverse, one `iz.hvp` call: the
  Hessian of the kernel's float return with respect to all its float inputs, times a direction. `iz.hvp`
  differentiates a float return only, so an op has second derivatives when its one float result is the
  return (no float outputs): `derivative_order` is 2 for such an op, 1 for the others, and
  `order_error(order)` is the message of a derivative past it, naming the kernel. The frameworks build every
  second derivative from the first-order rules and this one: the Hessian is symmetric, so
  `hessian_vector` is its own transpose, and the derivative of `backward` in the inputs, for the return's
  cotangent `s`, is `s * hessian_vector`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from isozyme.enzyme_ad.custom import reads_and_writes
from isozyme.runtime.arguments import Parameter
from isozyme.runtime.autodiff import Active, Const, Duplicated, autodiff, fwddiff, hvp
from isozyme.runtime.kernel import Kernel
from isozyme.ssa.types import ArrayType, ScalarType

ShapeRule = str | Callable[..., Sequence[int]] | None
"""How an output's shape follows from the inputs: an input array's name, a function of the op's arguments,
or None (the shape of the first input array of the output's rank)."""


@dataclass(frozen=True)
class Slot:
    """One parameter of the kernel, as the op sees it."""

    position: int
    """Its position among the kernel's parameters."""
    param: Parameter
    rule: ShapeRule = None
    """For an output, its shape rule (None for inputs)."""

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def is_array(self) -> bool:
        return isinstance(self.param.type, ArrayType)

    @property
    def element(self) -> ScalarType:
        """The scalar type of the parameter, or of its elements."""
        return self.param.type.element if isinstance(self.param.type, ArrayType) else self.param.type  # type: ignore

    @property
    def rank(self) -> int:
        """The number of dimensions (0 for a scalar)."""
        return self.param.type.rank if isinstance(self.param.type, ArrayType) else 0

    @property
    def dtype(self) -> np.dtype:
        return self.element.numpy_dtype

    @property
    def differentiable(self) -> bool:
        """Float arrays and float scalars have gradients and cotangents; integers and booleans have none."""
        return self.element.is_float


class KernelOp:
    """The kernel `kernel` as a function of its inputs returning its outputs (module docstring)."""

    def __init__(self, kernel: Kernel, outputs: str | Sequence[str] | Mapping[str, ShapeRule]) -> None:
        if not isinstance(kernel, Kernel):
            raise TypeError(f"an op needs an @iz.kernel, got {type(kernel).__name__}")
        self.kernel = kernel
        self.name = kernel.definition.name
        params, return_type = kernel.signature()
        rules = _output_rules(outputs)
        by_name = {p.name: i for i, p in enumerate(params)}
        for name in rules:
            if name not in by_name:
                raise ValueError(f"outputs names '{name}', which is not a parameter of kernel '{self.name}' "
                                 f"(its parameters: {', '.join(by_name)})")
            if not isinstance(params[by_name[name]].type, ArrayType):
                raise TypeError(f"output '{name}' of kernel '{self.name}' is a scalar parameter: outputs are "
                                "array parameters (a scalar result is the kernel's return value)")
        self.inputs = tuple(Slot(i, p) for i, p in enumerate(params) if p.name not in rules)
        self.outputs = tuple(Slot(by_name[n], params[by_name[n]], rules[n]) for n in rules)
        self.returns = return_type if isinstance(return_type, ScalarType) else None
        """The scalar type the kernel returns, None for a kernel that returns nothing."""
        self.parameter_count = len(params)
        self._check_writes()
        if not self.outputs and self.returns is None:
            raise ValueError(f"kernel '{self.name}' returns nothing and outputs names no array: the op would "
                             "have no result")
        for slot in self.outputs:
            self._check_rule(slot)
        self.signature = inspect.Signature([inspect.Parameter(s.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                            for s in self.inputs])
        """The op's Python signature: the inputs, by position or by name."""
        self.derivative_order = 2 if self.returns is not None and self.returns.is_float and not any(
            s.differentiable for s in self.outputs) else 1
        """The highest derivative the op has (module docstring, "Second derivatives")."""
        self._hvp: Callable[..., object] | None = None

    def where(self, slot: Slot) -> str:
        """How messages name a parameter."""
        return f"parameter '{slot.name}' of kernel '{self.name}'"

    def _check_writes(self) -> None:
        _, function = self.kernel.lower()
        _, writes = reads_and_writes(function)
        written = {function.args.index(arg) for arg in writes}
        for slot in self.inputs:
            if slot.position in written:
                raise ValueError(f"kernel '{self.name}' may write its array parameter '{slot.name}', which is not "
                                 "in outputs: an op never changes its inputs, so name it in outputs (it is then "
                                 "a fresh zeroed array the op returns) or copy it inside the kernel")

    def _check_rule(self, slot: Slot) -> None:
        if callable(slot.rule):
            return
        if isinstance(slot.rule, str):
            source = next((s for s in self.inputs if s.name == slot.rule), None)
            if source is None or source.rank != slot.rank:
                raise ValueError(f"the shape of output '{slot.name}' of kernel '{self.name}' is given as that of "
                                 f"'{slot.rule}', which is not an input array of rank {slot.rank}")
            return
        if slot.rule is not None:
            raise TypeError(f"the shape rule of output '{slot.name}' must be an input's name or a function of the "
                            f"inputs, not {type(slot.rule).__name__}")
        if not any(s.is_array and s.rank == slot.rank for s in self.inputs):
            raise ValueError(f"output '{slot.name}' of kernel '{self.name}' needs its shape: no input array has "
                             f"rank {slot.rank}, so give outputs={{'{slot.name}': <input name or function of the "
                             "inputs returning the shape>}")

    def bind(self, args: Sequence[object], kwargs: Mapping[str, object]) -> list[object]:
        """The op's arguments in input order, from positional and keyword arguments (TypeError as Python's)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"the op of kernel '{self.name}' takes ({', '.join(s.name for s in self.inputs)}): "
                            f"{error}") from None
        return list(bound.arguments.values())

    def output_shapes(self, args: Sequence[object]) -> list[tuple]:
        """Each output's shape, from the op's arguments (anything with a `.shape`: numpy arrays, tensors, fake
        tensors, JAX tracers) by its rule; ValueError naming the output for a rule that gives the wrong number
        of extents or a negative one."""
        shapes = []
        for slot in self.outputs:
            if callable(slot.rule):
                shape = tuple(slot.rule(*args))
            else:
                source = next(i for i, s in enumerate(self.inputs) if (s.name == slot.rule if slot.rule is not None
                                                                        else s.is_array and s.rank == slot.rank))
                shape = tuple(args[source].shape)  # type: ignore[attr-defined]
            if len(shape) != slot.rank:
                raise ValueError(f"the shape rule of output '{slot.name}' of kernel '{self.name}' gave {shape}, "
                                 f"not {slot.rank} extent(s)")
            if any(extent < 0 for extent in shape):
                raise ValueError(f"the shape rule of output '{slot.name}' of kernel '{self.name}' gave {shape}: an "
                                 "extent is negative")
            shapes.append(shape)
        return shapes

    def forward(self, values: Sequence[object]) -> tuple[list[np.ndarray], object]:
        """Run the kernel on the inputs `values` (numpy arrays and scalars, in input order): the outputs and
        the return value (None for a kernel that returns nothing)."""
        values = self._distinct(values)
        outputs = [np.zeros(shape, slot.dtype) for slot, shape in zip(self.outputs, self.output_shapes(values))]
        result = self.kernel(*self._arguments(values, outputs))
        return outputs, result

    def backward(self, values: Sequence[object], output_cotangents: Sequence[object],
                 return_cotangent: object) -> list[object]:
        """The gradient of each input (None for an integer or boolean one) given the cotangents of the outputs
        (one per output, None for an integer output or a zero cotangent) and of the return value."""
        values = self._distinct(values)
        shapes = self.output_shapes(values)
        annotated: dict[int, object] = {}
        for slot, shape, cotangent in zip(self.outputs, shapes, output_cotangents):
            output = np.zeros(shape, slot.dtype)
            if not slot.differentiable:
                annotated[slot.position] = Const(output)
                continue
            seed = np.zeros(shape, slot.dtype) if cotangent is None else np.array(cotangent, slot.dtype, order="C")
            if seed.shape != shape:
                raise ValueError(f"the cotangent of output '{slot.name}' of kernel '{self.name}' has shape "
                                 f"{seed.shape}, not the output's {shape}")
            annotated[slot.position] = Duplicated(output, seed)
        shadows: dict[int, np.ndarray] = {}
        for slot, value in zip(self.inputs, values):
            if slot.differentiable and slot.is_array:
                shadows[slot.position] = np.zeros(np.shape(value), slot.dtype)
                annotated[slot.position] = Duplicated(value, shadows[slot.position])
            else:
                annotated[slot.position] = Active(value) if slot.differentiable else Const(value)
        seed = None
        if self.returns is not None and self.returns.is_float:
            seed = 0.0 if return_cotangent is None else float(np.asarray(return_cotangent))
        _, adjoints = autodiff(self.kernel, *(annotated[i] for i in range(self.parameter_count)), seed=seed)
        scalars = iter(adjoints)
        return [(shadows[s.position] if s.is_array else s.dtype.type(next(scalars))) if s.differentiable else None
                for s in self.inputs]

    def tangents(self, values: Sequence[object], input_tangents: Sequence[object]) -> tuple[list[object], object]:
        """Forward mode: the tangent of each output (None for an integer one) and of the return value (None
        unless it is a float), given one tangent per input (None for a zero one, and for integer and boolean
        inputs, which have none)."""
        values = self._distinct(values)
        annotated: dict[int, object] = {}
        tangents: list[np.ndarray | None] = []
        for slot, shape in zip(self.outputs, self.output_shapes(values)):
            output = np.zeros(shape, slot.dtype)
            tangents.append(np.zeros(shape, slot.dtype) if slot.differentiable else None)
            annotated[slot.position] = Const(output) if tangents[-1] is None else Duplicated(output, tangents[-1])
        for slot, value, tangent in zip(self.inputs, values, input_tangents):
            if not slot.differentiable:
                annotated[slot.position] = Const(value)
            elif slot.is_array:  # a copy: the tangent may be the buffer of a value, or of another tangent
                seed = np.zeros(np.shape(value), slot.dtype) if tangent is None else np.array(
                    tangent, slot.dtype, order="C", copy=True)
                if seed.shape != np.shape(value):
                    raise ValueError(f"the tangent of {self.where(slot)} has shape {seed.shape}, not the "
                                     f"input's {np.shape(value)}")
                annotated[slot.position] = Duplicated(value, seed)
            else:
                annotated[slot.position] = Duplicated(value, 0.0 if tangent is None else float(np.asarray(tangent)))
        _, return_tangent = fwddiff(self.kernel, *(annotated[i] for i in range(self.parameter_count)))
        return tangents, return_tangent

    def order_error(self, order: int) -> str:
        """The message of a derivative of order `order`, past `derivative_order`: it names the kernel."""
        if self.derivative_order == 1:
            floats = [s.name for s in self.outputs if s.differentiable]
            why = (f"its float output(s) {', '.join(map(repr, floats))}" if floats else
                   f"it returns {'nothing' if self.returns is None else self.returns}")
            return (f"the op of isozyme kernel '{self.name}' has first derivatives only: a second derivative "
                    "(a Hessian, grad of grad, create_graph=True) goes through iz.hvp, which differentiates a "
                    f"kernel's float return, and this op has {why}")
        return (f"the op of isozyme kernel '{self.name}' has derivatives up to second order only (iz.hvp): "
                f"a derivative of order {order} is not supported")

    def hessian_vector(self, values: Sequence[object], directions: Sequence[object]) -> list[object]:
        """The Hessian of the float return with respect to the float inputs, times the direction given by
        one entry per input (None for a zero one, and for integer and boolean inputs): one entry per input,
        None for the integer and boolean ones. For an op of `derivative_order` 2."""
        if self.derivative_order < 2:
            raise RuntimeError(self.order_error(2))
        positions = [s.position for s in self.inputs if s.differentiable]
        if self._hvp is None:
            self._hvp = hvp(self.kernel, argnums=tuple(positions))
        values = self._distinct(values)
        outputs = [np.zeros(shape, slot.dtype) for slot, shape in zip(self.outputs, self.output_shapes(values))]
        v = tuple(_direction(slot, value, direction)
                  for slot, value, direction in zip(self.inputs, values, directions) if slot.differentiable)
        products = iter(self._hvp(*self._arguments(values, outputs), v))  # type: ignore[misc]
        return [(next(products) if s.is_array else s.dtype.type(next(products))) if s.differentiable else None
                for s in self.inputs]

    def _arguments(self, values: Sequence[object], outputs: Sequence[np.ndarray]) -> list[object]:
        arguments: list[object] = [None] * self.parameter_count
        for slot, value in zip(self.inputs, values):
            arguments[slot.position] = value
        for slot, output in zip(self.outputs, outputs):
            arguments[slot.position] = output
        return arguments

    def _distinct(self, values: Sequence[object]) -> list[object]:
        """`values` with every scalar a Python number and every array that may share memory with an earlier
        one copied (module docstring)."""
        distinct: list[object] = []
        for value in values:
            if isinstance(value, np.ndarray) and value.ndim == 0:
                value = value.item()
            elif isinstance(value, np.ndarray) and any(isinstance(v, np.ndarray) and np.may_share_memory(v, value)
                                                       for v in distinct):
                value = value.copy()
            distinct.append(value)
        return distinct


def _direction(slot: Slot, value: object, direction: object) -> object:
    """A direction for `iz.hvp`: zeros where None, a number for a scalar."""
    if slot.is_array:
        return np.zeros(np.shape(value), slot.dtype) if direction is None else direction
    return 0.0 if direction is None else float(np.asarray(direction))


def _output_rules(outputs: object) -> dict[str, ShapeRule]:
    """`outputs` as a dict from name to shape rule: a name alone, a sequence of names, or a mapping."""
    if isinstance(outputs, str):
        return {outputs: None}
    if isinstance(outputs, Mapping):
        rules = dict(outputs)
    elif isinstance(outputs, Sequence):
        rules = dict.fromkeys(outputs)
        if len(rules) != len(outputs):
            raise ValueError(f"outputs {tuple(outputs)!r} names a parameter twice")
    else:
        raise TypeError(f"outputs must be parameter names or a dict from name to shape rule, not "
                        f"{type(outputs).__name__}")
    for name in rules:
        if not isinstance(name, str):
            raise TypeError(f"outputs must name parameters by strings, not {name!r}")
    return rules
