"""`isozyme.torch.op(kernel, outputs=("out",))`: a kernel as a PyTorch operator (needs torch: `pip install
'isozyme[torch]'`; importing this module without torch is an ImportError).

    import isozyme.torch
    op = isozyme.torch.op(norm, outputs=("out",))    # norm(out: Array[f64], x: Array[f64], n: i64)
    out = op(x, 1000)                                # x a float64 CPU tensor; out a new tensor
    out.sum().backward()                             # x.grad: the kernel's reverse mode

The op is a function of the kernel's parameters other than the outputs, in the kernel's order (by position
or by name). It allocates the outputs as fresh zeroed tensors, runs the kernel, and returns them, then the
kernel's return value as a 0-d tensor if it returns one: one tensor alone, a tuple for several. What the
outputs, their shapes and the backward are: `isozyme/kernel_op.py`.

- **Arguments.** An array parameter takes a CPU tensor of exactly its dtype and rank (TypeError naming the
  parameter otherwise; ValueError for a tensor on another device). A float scalar parameter takes a 0-d
  tensor (differentiable) or a Python number, converted to a 0-d tensor of the parameter's dtype; an integer
  parameter takes a Python int (a SymInt under `torch.compile`), a boolean one a bool.
- **No copies on the CPU.** A contiguous tensor reaches the kernel as the numpy view of its memory
  (`Tensor.numpy()`), outputs are numpy arrays the returned tensors share (`torch.from_numpy`); a
  non-contiguous tensor is made contiguous (one copy) before the kernel sees it, as the kernel's arrays are
  C-contiguous.
- **Registration.** Up to four operators in the `isozyme` namespace, registered with
  `torch.library.custom_op`: `isozyme::<kernel>_<n>` (the forward), `..._backward` (reverse mode: the
  inputs and the cotangents of the float results to the gradients of the float inputs), `..._jvp` (forward
  mode: the inputs and the tangents of the float inputs to the tangents of the float results) and, for an
  op with second derivatives, `..._hvp` (the inputs and a direction per float input to the Hessian-vector
  product). Each is an op so that `torch.compile` traces it as one opaque node (a training step's backward
  too); each has a fake implementation that gives the results' shapes without running the kernel
  (`register_fake`), a vmap rule that loops over the batch (`register_vmap`) and `register_autograd` with
  the rules below, which is what calling a registered op directly (and `torch.library.opcheck`) uses. A
  registered op on its own has reverse mode only: torch 2.13 passes no tangent through a custom op under
  forward mode (a zero tangent, silently), so forward mode goes through the op itself, never `forward_op`.
- **The call** goes through an `autograd.Function` (`setup_context` form) around the forward op, with the
  same backward and a jvp: a custom op's own autograd registration does not take part in `torch.func`'s
  transforms (torch 2.13), an `autograd.Function` does, and dynamo traces it into the graph as the op's
  call. So the op works in eager mode, under `torch.compile` (one opaque node, and one for its backward: no
  graph break, `fullgraph=True` works, as the process's first call too, with inputs that require grad or
  none that do, under `no_grad` and `inference_mode`, with `dynamic=True`) and under `torch.func` (`grad`,
  `vjp`, `vmap`, `jvp`, `jacfwd`, `jacrev`, `hessian`) and `torch.autograd.forward_ad`. Two details make
  dynamo's trace work: the call reads no `functools.cached_property` (whose first read takes an RLock on
  Python 3.10/3.11, a graph break), and the Function's `forward` has one parameter per argument (with no
  input requiring grad, dynamo inlines it and would pass it a context). Under `torch.compile` the call goes
  through the same Function without its jvp (dynamo does not trace a custom jvp: a graph break), and forward
  mode under `torch.compile` runs the op eagerly (`torch.compiler.disable`: a graph break, an error under
  `fullgraph=True` naming the kernel), as dynamo would drop the jvp (pytorch/pytorch#192985) and give a zero
  tangent.
- **Derivatives.** Each of the four ops is an `autograd.Function` whose backward and jvp are built from the
  others (`_derivatives`), with `J` the Jacobian of the float results in the float inputs and `H` the
  Hessian of a float return (`KernelOp.hessian_vector`, isozyme's forward over reverse, `iz.hvp`):

  | op | computes | its backward (cotangent `u`) | its jvp |
  |---|---|---|---|
  | forward | `f(x)` | backward op: `J^T u` | jvp op: `J t` |
  | backward | `g = J^T c` | in `c`: `J u`; in `x`: `c H u` | `J^T dc + c H dx` |
  | jvp | `J t` | in `t`: `J^T u`; in `x`: `u H t` | `J dt + t . H dx` |
  | hvp | `H v` | in `v`: `H u` (`H` is symmetric); in `x`: error | `H dv`; in `x`: error |

  So an op has first derivatives in both modes, and an op whose one float result is the return (no float
  outputs: `KernelOp.derivative_order` 2) has second derivatives in every combination: `torch.func.hessian`
  (forward over reverse), `create_graph=True` and grad of grad (reverse over reverse), `jacfwd` of `jacfwd`,
  `jacrev` of `jacfwd`. The `c H u` terms are where the cotangent `c` is the return's; with a float output,
  `iz.hvp` has no rule for it, and a term in `H` is a RuntimeError naming the kernel (reached by
  `create_graph=True`, grad of grad, `hessian`, `jacfwd` of `jacfwd`), as is a third derivative: never a
  zero. Such an error comes whenever autograd marks an input as needing that term
  (`ctx.needs_input_grad`), or forward mode gives it a tangent, even one of zeros.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

try:
    import torch
except ImportError as error:  # the extra is optional: say which one
    raise ImportError("isozyme.torch needs PyTorch: pip install 'isozyme[torch]'") from error

from isozyme.kernel_op import KernelOp, ShapeRule, Slot
from isozyme.runtime.kernel import Kernel

_COUNTER = itertools.count()
"""Numbers the registered ops: one kernel may become several ops, and torch's registry is per process."""

_DTYPES = {np.dtype(name): getattr(torch, name) for name in ("float64", "float32", "int64", "int32", "bool")}


def op(kernel: Kernel, outputs: str | Sequence[str] | Mapping[str, ShapeRule] = ()) -> Callable[..., object]:
    """The PyTorch operator of `kernel` whose outputs are the array parameters `outputs` (module docstring)."""
    return TorchOp(KernelOp(kernel, outputs))


def _schema_type(slot: Slot) -> str:
    if slot.is_array or slot.element.is_float:
        return "Tensor"
    return "bool" if slot.element.is_bool else "SymInt"


def _returns(count: int) -> str:
    return "Tensor" if count == 1 else f"({', '.join(['Tensor'] * count)})"


class TorchOp:
    """The operator: call it with the op's arguments. `forward_op`, `backward_op`, `tangent_op` and `hvp_op` are
    the registered `torch.library` ops, `function` the `autograd.Function` a call goes through (the module
    docstring)."""

    def __init__(self, spec: KernelOp) -> None:
        self.spec = spec
        self.__name__ = spec.name
        self.__doc__ = f"The PyTorch op of isozyme kernel '{spec.name}'."
        name = f"isozyme::{spec.name}_{next(_COUNTER)}"
        params = ", ".join(f"{_schema_type(s)} {s.name}" for s in spec.inputs)
        self.input_dtypes = [_DTYPES[s.dtype] for s in spec.inputs]
        """Read here, not in the call: dynamo traces the call, and a first read of `ScalarType.numpy_dtype` (a
        `functools.cached_property`, which takes an RLock on Python 3.10/3.11) is a graph break."""
        self.result_dtypes = [_DTYPES[s.dtype] for s in spec.outputs]
        if spec.returns is not None:
            self.result_dtypes.append(_DTYPES[spec.returns.numpy_dtype])
        self.differentiable = [i for i, s in enumerate(spec.inputs) if s.differentiable]
        """The inputs that have a gradient and take a tangent: float arrays and float scalars, by position."""
        self.cotangents = [i for i, s in enumerate([*spec.outputs, *([] if spec.returns is None else [spec.returns])])
                           if (s.differentiable if isinstance(s, Slot) else s.is_float)]
        """The results that take a cotangent and have a tangent: float outputs and a float return, by position
        among the results."""
        self.forward_op = _register(name, self._forward, self._forward_fake,
                                    f"({params}) -> {_returns(len(self.result_dtypes))}")
        self.backward_op = self.tangent_op = self.hvp_op = None
        gradients = _returns(len(self.differentiable))
        if self.differentiable:
            cotangents = "".join(f", Tensor d_{i}" for i in self.cotangents)
            self.backward_op = _register(f"{name}_backward", self._backward, self._gradients_fake,
                                         f"({params}{cotangents}) -> {gradients}")
            if self.cotangents:
                tangents = "".join(f", Tensor t_{i}" for i in self.differentiable)
                self.tangent_op = _register(f"{name}_jvp", self._tangents, self._tangents_fake,
                                            f"({params}{tangents}) -> {_returns(len(self.cotangents))}")
            if spec.derivative_order == 2:
                directions = "".join(f", Tensor v_{i}" for i in self.differentiable)
                self.hvp_op = _register(f"{name}_hvp", self._hvp, self._gradients_fake,
                                        f"({params}{directions}) -> {gradients}")
        layout = _Layout(len(spec.inputs), tuple(self.differentiable), tuple(self.cotangents),
                         tuple(self.result_dtypes), spec.order_error(2), spec.order_error(3))
        functions = _derivatives(spec.name, layout, self.forward_op, self.backward_op, self.tangent_op, self.hvp_op)
        self.function, self.compiled_function = functions
        """What a call goes through: the forward op as an `autograd.Function` with the derivative rules of
        `_derivatives`; under `torch.compile` the same without a jvp, which dynamo does not trace."""
        self._forward_mode_eagerly = torch.compiler.disable(
            self.function.apply, reason=f"forward mode through the op of isozyme kernel '{spec.name}' runs "
            "eagerly: dynamo drops an autograd.Function's jvp (pytorch/pytorch#192985)")

    # --- the call ----------------------------------------------------------------------------------------------

    def __call__(self, *args: object, **kwargs: object) -> object:
        values = self.spec.bind(args, kwargs)
        checked = [self._checked(slot, dtype, value)
                   for slot, dtype, value in zip(self.spec.inputs, self.input_dtypes, values)]
        if not torch.compiler.is_compiling():
            return self.function.apply(*checked)
        if torch.autograd.forward_ad._current_level >= 0:  # forward mode (jvp, jacfwd, forward_ad) is active
            return self._forward_mode_eagerly(*checked)
        return self.compiled_function.apply(*checked)

    def _checked(self, slot: Slot, dtype: torch.dtype, value: object) -> object:
        """`value` as the schema takes it (`dtype` the parameter's); TypeError or ValueError naming the
        parameter."""
        where = self.spec.where(slot)
        if slot.is_array:
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{where} takes a torch.Tensor, got {type(value).__name__}")
            if value.dtype != dtype or value.dim() != slot.rank:
                raise TypeError(f"{where} takes a {slot.rank}-d tensor of dtype {dtype}, got a {value.dim()}-d "
                                f"tensor of dtype {value.dtype}")
            if value.device.type != "cpu":
                raise ValueError(f"{where}: isozyme's torch ops run on the CPU, and this tensor is on {value.device}")
            return value
        if slot.element.is_float:
            if isinstance(value, torch.Tensor):
                if value.dim() != 0 or not value.is_floating_point() or value.device.type != "cpu":
                    raise TypeError(f"{where} takes a number or a 0-d float CPU tensor, got a {value.dim()}-d "
                                    f"tensor of dtype {value.dtype} on {value.device}")
                return value.to(dtype)
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise TypeError(f"{where} takes a number or a 0-d float tensor, got {type(value).__name__}")
            return torch.tensor(float(value), dtype=dtype)
        if slot.element.is_bool:
            if not isinstance(value, bool | np.bool_):
                raise TypeError(f"{where} takes a bool, got {type(value).__name__}")
            return bool(value)
        if isinstance(value, bool) or not isinstance(value, int | np.integer | torch.SymInt):
            raise TypeError(f"{where} takes an int, got {type(value).__name__}")
        return value if isinstance(value, torch.SymInt) else int(value)

    # --- the implementations the ops register ------------------------------------------------------------------

    def _numpy(self, args: Sequence[object]) -> list[object]:
        """The inputs as the kernel takes them: tensors as numpy views of their (contiguous) memory."""
        return [arg.detach().contiguous().numpy() if isinstance(arg, torch.Tensor) else arg for arg in args]

    def _per_input(self, values: Sequence[object]) -> list[object]:
        """One entry per input from one per differentiable input (a tangent, a direction), None elsewhere."""
        per_input: list[object] = [None] * len(self.spec.inputs)
        for position, value in zip(self.differentiable, self._numpy(values)):
            per_input[position] = value
        return per_input

    def _tensors(self, values: Sequence[object], dtypes: Sequence[torch.dtype]) -> object:
        """The op's result from numpy arrays and numbers: one tensor alone, a tuple for several."""
        tensors = [torch.from_numpy(value) if isinstance(value, np.ndarray) and value.ndim else
                   torch.tensor(np.asarray(value).item(), dtype=dtype) for value, dtype in zip(values, dtypes)]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _per_differentiable(self, per_input: Sequence[object]) -> object:
        """The tensors of the entries of the differentiable inputs (gradients, Hessian-vector products)."""
        return self._tensors([per_input[i] for i in self.differentiable],
                             [self.input_dtypes[i] for i in self.differentiable])

    def _forward(self, *args: object) -> object:
        outputs, result = self.spec.forward(self._numpy(args))
        return self._tensors([*outputs, *([result] if self.spec.returns is not None else [])], self.result_dtypes)

    def _forward_fake(self, *args: object) -> object:
        shapes = [*self.spec.output_shapes(args), *([()] if self.spec.returns is not None else [])]
        tensors = [torch.empty(shape, dtype=dtype) for shape, dtype in zip(shapes, self.result_dtypes)]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _split_cotangents(self, cotangents: Sequence[object]) -> tuple[list[object], object]:
        """The backward op's cotangent arguments as (one per output, None where it takes none; the return's)."""
        by_result: list[object] = [None] * len(self.result_dtypes)
        for position, cotangent in zip(self.cotangents, self._numpy(cotangents)):
            by_result[position] = cotangent
        count = len(self.spec.outputs)
        return by_result[:count], (by_result[count] if self.spec.returns is not None else None)

    def _backward(self, *args: object) -> object:
        count = len(self.spec.inputs)
        outputs, returned = self._split_cotangents(args[count:])
        gradients = self.spec.backward(self._numpy(args[:count]), outputs, returned)
        return self._per_differentiable(gradients)

    def _gradients_fake(self, *args: object) -> object:
        """The backward op's and the hvp op's fake: one tensor per differentiable input, of its shape."""
        tensors = [torch.empty(tuple(args[i].shape), dtype=self.input_dtypes[i])  # type: ignore[attr-defined]
                   for i in self.differentiable]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _tangents(self, *args: object) -> object:
        count = len(self.spec.inputs)
        outputs, returned = self.spec.tangents(self._numpy(args[:count]), self._per_input(args[count:]))
        by_result = [*outputs, *([returned] if self.spec.returns is not None else [])]
        return self._tensors([by_result[i] for i in self.cotangents], [self.result_dtypes[i] for i in self.cotangents])

    def _tangents_fake(self, *args: object) -> object:
        inputs = args[:len(self.spec.inputs)]
        shapes = [*self.spec.output_shapes(inputs), *([()] if self.spec.returns is not None else [])]
        tensors = [torch.empty(shapes[i], dtype=self.result_dtypes[i]) for i in self.cotangents]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _hvp(self, *args: object) -> object:
        count = len(self.spec.inputs)
        products = self.spec.hessian_vector(self._numpy(args[:count]), self._per_input(args[count:]))
        return self._per_differentiable(products)


def _register(name: str, implementation: Callable[..., object], fake: Callable[..., object],
              schema: str) -> object:
    """A `torch.library.custom_op` on the CPU, with its fake and a vmap rule that loops (`_looped`)."""
    custom_op = torch.library.custom_op(name, implementation, mutates_args=(), device_types="cpu", schema=schema)
    custom_op.register_fake(fake)
    custom_op.register_vmap(_looped(custom_op))
    return custom_op


@dataclass(frozen=True)
class _Layout:
    """Where the derivatives' arguments and results are (TorchOp's `differentiable` and `cotangents`)."""

    inputs: int
    """The number of inputs: the arguments of the forward op, and the first arguments of the others."""
    differentiable: tuple[int, ...]
    cotangents: tuple[int, ...]
    result_dtypes: tuple[torch.dtype, ...]
    second_order: str
    """The message of a second derivative, for an op that has first derivatives only."""
    third_order: str


def _derivatives(name: str, layout: _Layout, forward_op: object, backward_op: object, tangent_op: object,
                 hvp_op: object) -> tuple[type[torch.autograd.Function], type[torch.autograd.Function]]:
    """The `autograd.Function`s of the four ops and their derivative rules (module docstring, "Derivatives"),
    each op's `register_autograd` too; returns the forward's Function, and the same without a jvp for
    `torch.compile`. The rules are closures over ops, Functions, ints, tuples and dtypes only, which dynamo
    traces (a bound method or an object of ours in the closure is a graph break)."""
    count, differentiable, cotangents = layout.inputs, layout.differentiable, layout.cotangents
    result_dtypes, second_order, third_order = layout.result_dtypes, layout.second_order, layout.third_order
    cotangent_dtypes = tuple(result_dtypes[i] for i in cotangents)
    overloads = [getattr(op, "_opoverload", None) for op in (forward_op, backward_op, tangent_op, hvp_op)]

    def hessian_vector(inputs: list, directions: list) -> tuple:
        if overloads[3] is None:
            raise RuntimeError(second_order)
        return _parts(hvp_function.apply(*inputs, *directions))

    def forward_backward(ctx: object, *grads: object) -> tuple:
        inputs = _saved(ctx)
        given = [grads[i] if grads[i] is not None else
                 torch.zeros(ctx.result_shapes[i], dtype=result_dtypes[i]) for i in cotangents]  # type: ignore
        gradients: list[object] = [None] * count
        if overloads[1] is not None:
            # With grad mode on (create_graph=True, torch.func.grad) through the backward's Function, which has
            # derivatives; otherwise (a plain backward) the op itself, which dynamo can trace.
            call = backward_function.apply if torch.is_grad_enabled() else overloads[1]
            for position, gradient in zip(differentiable, _parts(call(*inputs, *given))):  # type: ignore[operator]
                gradients[position] = gradient
        return tuple(gradients)

    def forward_jvp(ctx: object, *tangents: object) -> object:
        inputs = _saved(ctx)
        results: list[object] = [None] * len(result_dtypes)
        if overloads[2] is not None:
            given = _filled([tangents[i] for i in differentiable], [inputs[i] for i in differentiable])
            for position, tangent in zip(cotangents, _parts(tangent_function.apply(*inputs, *given))):
                results[position] = tangent
        return _one_or_tuple(results)

    def backward_backward(ctx: object, *grads: object) -> tuple:
        """Of gradients = J(x)^T c: in c, J u (the tangent op); in x, c * H u (c the return's cotangent)."""
        arguments = _saved(ctx)
        inputs, given = arguments[:count], arguments[count:]
        directions = _filled(list(grads), [inputs[i] for i in differentiable])
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]
        result: list[object] = [None] * len(arguments)
        if any(needs[i] for i in differentiable):
            for position, product in zip(differentiable, hessian_vector(inputs, directions)):
                result[position] = (given[0] * product).to(product.dtype)
        if any(needs[count:]):
            for index, tangent in enumerate(_parts(tangent_function.apply(*inputs, *directions))):
                result[count + index] = tangent
        return tuple(result)

    def backward_jvp(ctx: object, *tangents: object) -> object:
        arguments = _saved(ctx)
        inputs, given = arguments[:count], arguments[count:]
        total: list | None = None
        if any(t is not None for t in tangents[count:]):
            total = list(_parts(backward_function.apply(*inputs, *_filled(list(tangents[count:]), given))))
        moved = [tangents[i] for i in differentiable]
        if any(t is not None for t in moved):
            products = hessian_vector(inputs, _filled(moved, [inputs[i] for i in differentiable]))
            scaled = [(given[0] * product).to(product.dtype) for product in products]
            total = scaled if total is None else [a + b for a, b in zip(total, scaled)]
        return _one_or_tuple(total if total is not None else [None] * len(differentiable))

    def tangent_backward(ctx: object, *grads: object) -> tuple:
        """Of tangents = J(x) t: in t, J^T u (the backward op); in x, u * H t (u the return tangent's)."""
        arguments = _saved(ctx)
        inputs, given = arguments[:count], arguments[count:]
        seeds = [g if g is not None else torch.zeros(shape, dtype=dtype)  # type: ignore[attr-defined]
                 for g, shape, dtype in zip(grads, ctx.result_shapes, cotangent_dtypes)]  # type: ignore
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]
        result: list[object] = [None] * len(arguments)
        if any(needs[count:]):
            for index, gradient in enumerate(_parts(backward_function.apply(*inputs, *seeds))):
                result[count + index] = gradient
        if any(needs[i] for i in differentiable):
            for position, product in zip(differentiable, hessian_vector(inputs, given)):
                result[position] = (seeds[0] * product).to(product.dtype)
        return tuple(result)

    def tangent_jvp(ctx: object, *tangents: object) -> object:
        arguments = _saved(ctx)
        inputs, given = arguments[:count], arguments[count:]
        total: list | None = None
        if any(t is not None for t in tangents[count:]):
            total = list(_parts(tangent_function.apply(*inputs, *_filled(list(tangents[count:]), given))))
        moved = [tangents[i] for i in differentiable]
        if any(t is not None for t in moved):
            products = hessian_vector(inputs, _filled(moved, [inputs[i] for i in differentiable]))
            curvature = sum((t * p).sum() for t, p in zip(given, products)).to(cotangent_dtypes[0])  # t^T H dx
            total = [curvature] if total is None else [total[0] + curvature]
        return _one_or_tuple(total if total is not None else [None] * len(cotangents))

    def hvp_backward(ctx: object, *grads: object) -> tuple:
        """H is symmetric: in v, H u; in x, a third derivative (an error)."""
        arguments = _saved(ctx)
        inputs = arguments[:count]
        if any(ctx.needs_input_grad[i] for i in differentiable):  # type: ignore[attr-defined]
            raise RuntimeError(third_order)
        products = _parts(hvp_function.apply(*inputs, *_filled(list(grads), [inputs[i] for i in differentiable])))
        return (*[None] * count, *products)

    def hvp_jvp(ctx: object, *tangents: object) -> object:
        arguments = _saved(ctx)
        inputs, given = arguments[:count], arguments[count:]
        if any(tangents[i] is not None for i in differentiable):
            raise RuntimeError(third_order)
        if all(t is None for t in tangents[count:]):
            return _one_or_tuple([None] * len(differentiable))
        return hvp_function.apply(*inputs, *_filled(list(tangents[count:]), given))

    rules = [(forward_backward, forward_jvp), (backward_backward, backward_jvp), (tangent_backward, tangent_jvp),
             (hvp_backward, hvp_jvp)]
    arities = [count, count + len(cotangents), count + len(differentiable), count + len(differentiable)]
    functions = []
    suffixes = ("", "_backward", "_jvp", "_hvp")
    for custom_op, overload, (backward, jvp), arity, suffix in zip(
            (forward_op, backward_op, tangent_op, hvp_op), overloads, rules, arities, suffixes):
        if custom_op is None:
            functions.append(None)
            continue
        custom_op.register_autograd(backward, setup_context=_saving(False))  # type: ignore[attr-defined]
        functions.append(_function(name + suffix, overload, arity, _saving(True), backward, jvp))
    forward_function, backward_function, tangent_function, hvp_function = functions
    compiled = _function(name, overloads[0], count, _saving(False), forward_backward, None)
    return forward_function, compiled  # type: ignore[return-value]


def _saving(forward_mode: bool) -> Callable[..., None]:
    """A `setup_context` that keeps the tensor arguments (for the jvp too where `forward_mode`), the others and
    the results' shapes. `save_for_forward` only where forward mode may come: dynamo does not trace it."""
    def setup_context(ctx: object, inputs: tuple, output: object) -> None:
        results = output if isinstance(output, tuple) else (output,)
        ctx.result_shapes = [r.shape for r in results]  # type: ignore[attr-defined]
        ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in inputs]  # type: ignore[attr-defined]
        tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
        ctx.save_for_backward(*tensors)  # type: ignore[attr-defined]
        if forward_mode:
            ctx.save_for_forward(*tensors)  # type: ignore[attr-defined]
    return setup_context


def _saved(ctx: object) -> list[object]:
    """The arguments `setup_context` kept, in order."""
    saved = iter(ctx.saved_tensors)  # type: ignore[attr-defined]
    return [next(saved) if scalar is None else scalar for scalar in ctx.scalars]  # type: ignore[attr-defined]


def _parts(result: object) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _one_or_tuple(values: list) -> object:
    return values[0] if len(values) == 1 else tuple(values)


def _filled(tangents: list, like: list) -> list:
    """`tangents` with zeros of the shape and dtype of `like` where one is None (autograd gives None for a
    tangent or cotangent that is zero)."""
    return [t if t is not None else torch.zeros_like(x) for t, x in zip(tangents, like)]  # type: ignore[arg-type]


def _function(name: str, op: object, arity: int, setup_context: Callable[..., None], backward: Callable[..., tuple],
              jvp: Callable[..., object] | None) -> type[torch.autograd.Function]:
    """The registered op `op` of `arity` arguments as an `autograd.Function` with `setup_context`, the form
    `torch.func` transforms accept (a `custom_op`'s own autograd registration does not take part in them),
    with vmap rules generated from the op's (`generate_vmap_rule`), and a `jvp` unless None."""
    def forward(*args: object) -> object:
        return op(*args)  # type: ignore[operator]
    # One parameter per argument, no ctx: with no input requiring grad, dynamo inlines the forward and passes
    # it the context unless its signature has exactly one parameter per argument (torch 2.13).
    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)])
    methods = {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
               "backward": staticmethod(backward), "generate_vmap_rule": True}
    if jvp is not None:
        methods["jvp"] = staticmethod(jvp)
    return type(name, (torch.autograd.Function,), methods)

def _looped(custom_op: object) -> Callable[..., tuple[object, object]]:
    """A vmap rule that calls `custom_op` once per element of the batch and stacks the results along
    dimension 0 (the kernel has no batched form; `torch.library.register_vmap`'s calling convention)."""
    def rule(info: object, in_dims: tuple, *args: object) -> tuple[object, object]:
        if info.batch_size == 0:  # type: ignore[attr-defined]
            raise ValueError(f"vmap of {custom_op} over an empty batch: the op runs once per element, and with "
                             "none there is no result to take the shapes from")
        runs = []
        for index in range(info.batch_size):  # type: ignore[attr-defined]
            runs.append(custom_op(*[arg.select(dim, index) if dim is not None else arg  # type: ignore
                                    for arg, dim in zip(args, in_dims)]))
        if isinstance(runs[0], tuple):
            return tuple(torch.stack(parts) for parts in zip(*runs)), tuple(0 for _ in runs[0])
        return torch.stack(runs), 0
    return rule
