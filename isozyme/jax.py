"""`isozyme.jax.op(kernel, outputs=("out",))`: a kernel as a JAX function (needs jax: `pip install
'isozyme[jax]'`; importing this module without jax is an ImportError).

    import isozyme.jax
    jax.config.update("jax_enable_x64", True)         # for f64 kernels: JAX's arrays are f32 by default
    op = isozyme.jax.op(norm, outputs=("out",))      # norm(out: Array[f64], x: Array[f64], n: i64)
    out = op(x, 1000)                                # a new array
    jax.grad(lambda x: op(x, 1000).sum())(x)          # the kernel's reverse mode

The op takes the kernel's parameters other than the outputs, in the kernel's order (by position or by
name), and returns the outputs (fresh zeroed arrays the kernel wrote), then the kernel's return value if it
returns one: one array alone, a tuple for several. What the outputs, their shapes and the backward are:
`isozyme/kernel_op.py`.

- **How.** A `jax.custom_vjp` function whose forward and backward are `jax.pure_callback`s into the
  compiled kernel and its reverse mode (`KernelOp.forward`, `KernelOp.backward`), on the host CPU. So it
  works under `jit` (the callbacks are opaque calls in the compiled program), `grad`/`vjp` (first order:
  the backward has no derivative of its own, and JAX says so if asked for one) and `vmap` (by a loop: the
  callbacks are declared `vmap_method="sequential"`, so a batch runs the kernel once per element).
- **Arguments.** An array parameter takes an array of exactly its dtype and rank (TypeError naming the
  parameter: an f64 kernel under JAX's default f32 asks for `jax_enable_x64`); a scalar parameter takes a
  number or a 0-d array, integers and booleans included (their cotangent is zero: they have no gradient).
  Output shapes are worked out before the `custom_vjp`, from the arguments as the caller gives them:
  shapes are concrete under `jit` and `vmap` (per element), and a shape rule may read an integer argument
  too where it is a Python int (in eager mode, or static: `jax.jit(..., static_argnums=...)`); a traced one
  is JAX's ConcretizationTypeError.
- **Copies.** `pure_callback` hands the kernel host numpy arrays: on the CPU these are JAX's buffers or
  copies of them, as JAX decides; the kernel only reads its inputs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError as error:  # the extra is optional: say which one
    raise ImportError("isozyme.jax needs JAX: pip install 'isozyme[jax]'") from error

from isozyme.kernel_op import KernelOp, ShapeRule, Slot
from isozyme.runtime.kernel import Kernel


def op(kernel: Kernel, outputs: str | Sequence[str] | Mapping[str, ShapeRule] = ()) -> Callable[..., object]:
    """The JAX function of `kernel` whose outputs are the array parameters `outputs` (module docstring)."""
    spec = KernelOp(kernel, outputs)
    result_dtypes = [s.dtype for s in spec.outputs] + ([spec.returns.numpy_dtype] if spec.returns else [])
    floats = [i for i, dtype in enumerate(result_dtypes) if dtype.kind == "f"]
    """The results that take a cotangent (JAX gives the others float0 ones, which carry nothing)."""
    single = len(result_dtypes) == 1

    def run_forward(*args: np.ndarray) -> list[np.ndarray]:
        outputs, result = spec.forward([np.asarray(a) for a in args])
        return [*outputs, *([np.asarray(result, result_dtypes[-1])] if spec.returns is not None else [])]

    @partial(jax.custom_vjp, nondiff_argnums=(0,))
    def call(shapes: tuple, *args: object) -> object:
        wanted = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in zip(shapes, result_dtypes)]
        results = jax.pure_callback(run_forward, wanted, *args, vmap_method="sequential")
        return results[0] if single else tuple(results)

    def call_forward(shapes: tuple, *args: object) -> tuple[object, tuple]:
        return call(shapes, *args), args

    def run_backward(*args: np.ndarray) -> list[np.ndarray]:
        values, given = [np.asarray(a) for a in args[:len(spec.inputs)]], args[len(spec.inputs):]
        cotangents: list[object] = [None] * len(result_dtypes)
        for position, cotangent in zip(floats, given):
            cotangents[position] = np.asarray(cotangent)
        returned = cotangents[-1] if spec.returns is not None else None
        gradients = spec.backward(values, cotangents[:len(spec.outputs)], returned)
        return [np.asarray(g, slot.dtype) for slot, g in zip(spec.inputs, gradients) if slot.differentiable]

    def call_backward(shapes: tuple, args: tuple, cotangents: object) -> tuple:
        cotangents = (cotangents,) if single else tuple(cotangents)  # type: ignore[arg-type]
        given = [cotangents[i] for i in floats]
        wanted = [jax.ShapeDtypeStruct(np.shape(a), s.dtype) for s, a in zip(spec.inputs, args) if s.differentiable]
        gradients = iter(jax.pure_callback(run_backward, wanted, *args, *given, vmap_method="sequential")
                         if wanted else [])
        return tuple(_cast(next(gradients), a) if s.differentiable else None for s, a in zip(spec.inputs, args))

    call.defvjp(call_forward, call_backward)

    def kernel_op(*args: object, **kwargs: object) -> object:
        values = [_checked(spec, slot, value) for slot, value in zip(spec.inputs, spec.bind(args, kwargs))]
        shapes = [*spec.output_shapes(values), *([()] if spec.returns is not None else [])]
        return call(tuple(tuple(map(operator.index, shape)) for shape in shapes), *values)
    kernel_op.__name__ = spec.name
    kernel_op.__doc__ = f"The JAX function of isozyme kernel '{spec.name}'."
    kernel_op.__signature__ = spec.signature  # type: ignore[attr-defined]
    return kernel_op


def _cast(gradient: object, primal: object) -> object:
    """A gradient in its primal's dtype (a float scalar given as a Python number is f32 or f64 to JAX)."""
    return jnp.asarray(gradient, dtype=jnp.result_type(primal))


def _checked(spec: KernelOp, slot: Slot, value: object) -> object:
    """`value` as the callbacks take it; TypeError naming the parameter."""
    where = spec.where(slot)
    if slot.is_array:
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            raise TypeError(f"{where} takes an array, got {type(value).__name__}")
        dtype, rank = np.dtype(value.dtype), np.ndim(value)
        if dtype != slot.dtype or rank != slot.rank:
            narrowed = dtype.kind == slot.dtype.kind and dtype.itemsize < slot.dtype.itemsize == 8
            hint = " (JAX makes 32-bit arrays unless jax.config.update('jax_enable_x64', True))" if narrowed else ""
            raise TypeError(f"{where} takes a {slot.rank}-d array of dtype {slot.dtype}, got a {rank}-d array "
                            f"of dtype {dtype}{hint}")
        return value
    if isinstance(value, str | bytes) or np.ndim(value) != 0:
        raise TypeError(f"{where} is a scalar, got {type(value).__name__} {np.shape(value)}")
    if slot.element.is_float:
        if np.dtype(getattr(value, "dtype", type(value))).kind not in "fiu":
            raise TypeError(f"{where} takes a number, got {value!r}")
        return value
    kind = np.dtype(getattr(value, "dtype", type(value)))
    if slot.element.is_bool != (kind == np.bool_) or (not slot.element.is_bool and kind.kind not in "iu"):
        raise TypeError(f"{where} takes {'a bool' if slot.element.is_bool else 'an int'}, got {value!r}")
    return value

