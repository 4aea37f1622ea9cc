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
- **Registration.** Two operators in the `isozyme` namespace, registered with `torch.library.custom_op`:
  `isozyme::<kernel>_<n>` (the forward) and `isozyme::<kernel>_<n>_backward` (the reverse mode, itself an
  op, so that `torch.compile` traces a training step's backward as one opaque node too). Each has a fake
  implementation that gives the results' shapes without running the kernel (`register_fake`) and a vmap
  rule that loops over the batch (`register_vmap`); the forward has `register_autograd`, which is what
  calling the registered op directly (and `torch.library.opcheck`) uses.
- **The call** goes through an `autograd.Function` (`setup_context` form) around the forward op, with the
  same backward: a custom op's own autograd registration does not take part in `torch.func`'s transforms
  (torch 2.13), an `autograd.Function` does, and dynamo traces it into the graph as the op's call. So the
  op works in eager mode, under `torch.compile` (one opaque node, and one for its backward: no graph
  break, `fullgraph=True` works, as the process's first call too, with inputs that require grad or none
  that do, under `no_grad` and `inference_mode`, with `dynamic=True`) and under `torch.func` (`grad`,
  `vjp`, `vmap`). Two details make dynamo's trace work: the call reads no `functools.cached_property`
  (whose first read takes an RLock on Python 3.10/3.11, a graph break), and the Function's `forward` has
  one parameter per argument (with no input requiring grad, dynamo inlines it and would pass it a context).
- **First order.** The backward op's own derivative is an error (RuntimeError naming the kernel), reached
  by `create_graph=True` or nested `torch.func.grad`: a second derivative through the op fails, never
  comes out as zero.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence

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
    """The operator: call it with the op's arguments. `forward_op` and `backward_op` are the registered
    `torch.library` ops (the module docstring)."""

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
        self.forward_op = torch.library.custom_op(name, self._forward, mutates_args=(), device_types="cpu",
                                                  schema=f"({params}) -> {_returns(len(self.result_dtypes))}")
        self.forward_op.register_fake(self._forward_fake)
        self.forward_op.register_vmap(_looped(self.forward_op))
        self.differentiable = [i for i, s in enumerate(spec.inputs) if s.differentiable]
        self.cotangents = [i for i, s in enumerate([*spec.outputs, *([] if spec.returns is None else [spec.returns])])
                           if (s.differentiable if isinstance(s, Slot) else s.is_float)]
        """The results that take a cotangent: float outputs and a float return, by position among the results."""
        self.backward_op = None
        if self.differentiable:
            cotangents = "".join(f", Tensor d_{i}" for i in self.cotangents)
            self.backward_op = torch.library.custom_op(
                f"{name}_backward", self._backward, mutates_args=(), device_types="cpu",
                schema=f"({params}{cotangents}) -> {_returns(len(self.differentiable))}")
            self.backward_op.register_fake(self._backward_fake)
            self.backward_op.register_vmap(_looped(self.backward_op))
        overloads = [getattr(op, "_opoverload", None) for op in (self.forward_op, self.backward_op)]
        backward_function = None
        if self.backward_op is not None:  # its derivative is an error, whichever way autograd reaches it
            self.backward_op.register_autograd(_second_order_error(spec.name), setup_context=_no_context)
            backward_function = _function(f"{spec.name}_backward", overloads[1], len(spec.inputs) + len(self.cotangents),
                                          _no_context, _second_order_error(spec.name))
        setup_context, backward = _autograd(overloads[1], backward_function, len(spec.inputs),
                                            tuple(self.differentiable), tuple(self.cotangents),
                                            tuple(self.result_dtypes))
        self.forward_op.register_autograd(backward, setup_context=setup_context)
        self.function = _function(spec.name, overloads[0], len(spec.inputs), setup_context, backward)
        """What a call goes through (the forward op, and the autograd registration in the form torch.func
        takes)."""

    # --- the call ----------------------------------------------------------------------------------------------

    def __call__(self, *args: object, **kwargs: object) -> object:
        values = self.spec.bind(args, kwargs)
        return self.function.apply(*[self._checked(slot, dtype, value)
                                     for slot, dtype, value in zip(self.spec.inputs, self.input_dtypes, values)])

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

    def _results(self, outputs: list[np.ndarray], result: object) -> object:
        tensors = [torch.from_numpy(output) for output in outputs]
        if self.spec.returns is not None:
            tensors.append(torch.tensor(result, dtype=self.result_dtypes[-1]))
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _forward(self, *args: object) -> object:
        return self._results(*self.spec.forward(self._numpy(args)))

    def _forward_fake(self, *args: object) -> object:
        shapes = [*self.spec.output_shapes(args), *([()] if self.spec.returns is not None else [])]
        tensors = [torch.empty(shape, dtype=dtype) for shape, dtype in zip(shapes, self.result_dtypes)]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _split_cotangents(self, cotangents: Sequence[object]) -> tuple[list[object], object]:
        """The backward op's cotangent arguments as (one per output, None where it takes none; the return's)."""
        by_result: list[object] = [None] * len(self.result_dtypes)
        for position, cotangent in zip(self.cotangents, cotangents):
            by_result[position] = cotangent.detach().numpy()  # type: ignore[attr-defined]
        count = len(self.spec.outputs)
        return by_result[:count], (by_result[count] if self.spec.returns is not None else None)

    def _backward(self, *args: object) -> object:
        count = len(self.spec.inputs)
        outputs, returned = self._split_cotangents(args[count:])
        gradients = self.spec.backward(self._numpy(args[:count]), outputs, returned)
        tensors = [torch.from_numpy(np.asarray(gradients[i])) for i in self.differentiable]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _backward_fake(self, *args: object) -> object:
        tensors = [torch.empty(tuple(args[i].shape), dtype=_DTYPES[self.spec.inputs[i].dtype])  # type: ignore
                   for i in self.differentiable]
        return tensors[0] if len(tensors) == 1 else tuple(tensors)


def _autograd(backward_op: object, backward_function: object, input_count: int, differentiable: tuple[int, ...],
              cotangents: tuple[int, ...], result_dtypes: tuple[torch.dtype, ...],
              ) -> tuple[Callable[..., None], Callable[..., tuple]]:
    """`(setup_context, backward)` of the forward op, for `register_autograd` and `TorchOp.function`: the
    backward calls the backward op (None when no input is differentiable) on the saved inputs and the
    cotangents of the float results (zeros for a result that has none), and gives each differentiable
    input its gradient, None to the others. Closures over ops, ints and dtypes only, which dynamo traces
    (a bound method or an object of ours in the closure is a graph break)."""

    def setup_context(ctx: object, inputs: tuple, output: object) -> None:
        results = output if isinstance(output, tuple) else (output,)
        ctx.result_shapes = [r.shape for r in results]  # type: ignore[attr-defined]
        ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in inputs]  # type: ignore[attr-defined]
        ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)])  # type: ignore[attr-defined]

    def backward(ctx: object, *grads: object) -> tuple:
        saved = iter(ctx.saved_tensors)  # type: ignore[attr-defined]
        inputs = [next(saved) if scalar is None else scalar for scalar in ctx.scalars]  # type: ignore[attr-defined]
        given = [grads[i] if grads[i] is not None else
                 torch.zeros(ctx.result_shapes[i], dtype=result_dtypes[i]) for i in cotangents]  # type: ignore
        gradients: list[object] = [None] * input_count
        if backward_op is not None:
            # With grad mode on (create_graph=True, torch.func.grad) through the autograd.Function whose own
            # backward is an error; otherwise (a plain backward) the op itself, which dynamo can trace.
            call = backward_function.apply if torch.is_grad_enabled() else backward_op  # type: ignore[union-attr]
            computed = call(*inputs, *given)  # type: ignore[operator]
            for position, gradient in zip(differentiable, computed if isinstance(computed, tuple) else (computed,)):
                gradients[position] = gradient
        return tuple(gradients)
    return setup_context, backward


def _second_order_error(name: str) -> Callable[..., tuple]:
    """The backward of the backward op: an error naming the kernel (module docstring, "First order")."""
    def backward(ctx: object, *grads: object) -> tuple:
        raise RuntimeError(f"the op of isozyme kernel '{name}' has a first derivative only; differentiating "
                           "its backward (a second derivative, create_graph=True, nested grad) is not supported")
    return backward


def _no_context(ctx: object, inputs: tuple, output: object) -> None:
    """The backward op's `setup_context`: its backward is an error and needs nothing saved."""


def _function(name: str, op: object, arity: int, setup_context: Callable[..., None],
              backward: Callable[..., tuple]) -> type[torch.autograd.Function]:
    """The registered op `op` of `arity` arguments as an `autograd.Function` with `setup_context`, the form
    `torch.func` transforms accept (a `custom_op`'s own autograd registration does not take part in them),
    with vmap rules generated from the op's (`generate_vmap_rule`)."""
    def forward(*args: object) -> object:
        return op(*args)  # type: ignore[operator]
    # One parameter per argument, no ctx: with no input requiring grad, dynamo inlines the forward and passes
    # it the context unless its signature has exactly one parameter per argument (torch 2.13).
    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)])
    return type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True})


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
