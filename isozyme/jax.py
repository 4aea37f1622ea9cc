"""`isozyme.jax.op(kernel, outputs=("out",))`: a kernel as a JAX function (needs jax: `pip install
'isozyme[jax]'`; importing this module without jax is an ImportError).

    import isozyme.jax
    jax.config.update("jax_enable_x64", True)         # for f64 kernels: JAX's arrays are f32 by default
    op = isozyme.jax.op(norm, outputs=("out",))      # norm(out: Array[f64], x: Array[f64], n: i64)
    out = op(x, 1000)                                # a new array
    jax.grad(lambda x: op(x, 1000).sum())(x)          # the kernel's reverse mode
    jax.jacfwd(lambda x: op(x, 1000))(x)             # its forward mode

The op takes the kernel's parameters other than the outputs, in the kernel's order (by position or by
name), and returns the outputs (fresh zeroed arrays the kernel wrote), then the kernel's return value if it
returns one: one array alone, a tuple for several. What the outputs, their shapes and the backward are:
`isozyme/kernel_op.py`.

- **How.** Up to four JAX primitives (`jax.extend.core.Primitive`), each computed on the host CPU by a
  `jax.pure_callback` into the compiled kernel: `isozyme_<kernel>` (the forward, `KernelOp.forward`),
  `..._backward` (reverse mode, `KernelOp.backward`: the inputs and the cotangents of the float results to
  the gradients of the float inputs), `..._jvp` (forward mode, `KernelOp.tangents`: the inputs and the
  tangents of the float inputs to the tangents of the float results) and, for an op with second
  derivatives, `..._hvp` (`KernelOp.hessian_vector`, isozyme's forward over reverse, `iz.hvp`). Each has an
  abstract evaluation (the results' shapes, worked out before the call), a lowering (so `jit` compiles the
  callbacks into the program as opaque calls), a vmap rule that loops (`lax.map`: a batch runs the kernel
  once per element) and the derivative rules below. Primitives, not `custom_vjp`: a `custom_vjp` function
  has no forward mode, a `custom_jvp` one needs its tangent transposable, which a callback is not, and
  `custom_derivatives.linear_call` cannot be differentiated in its residuals, which a second derivative
  needs; a primitive takes a jvp and a transpose rule of its own.
- **Derivatives.** With `J` the Jacobian of the float results in the float inputs and `H` the Hessian of
  a float return:

  | primitive | computes | its jvp | its transpose (linear in) |
  |---|---|---|---|
  | forward | `f(x)` | the jvp primitive: `J dx` | (not linear) |
  | jvp | `J t` | `J dt + t . H dx` | `t`: the backward, `J^T u` |
  | backward | `g = J^T c` | `J^T dc + c H dx` | `c`: the jvp, `J u` |
  | hvp | `H v` | `H dv`; in `x`: error | `v`: itself (`H` is symmetric) |

  So `jax.jvp`, `jax.jacfwd`, `jax.grad`, `jax.vjp`, `jax.jacrev` and `jax.linearize` work for every op,
  and for an op whose one float result is the return (no float outputs: `KernelOp.derivative_order` 2) so
  do second derivatives in every combination: `jax.hessian` (forward over reverse), grad of grad, `jacfwd`
  of `jacfwd`, `jacrev` of `jacfwd`. A term in `H` for an op with a float output (`iz.hvp` differentiates a
  float return only) and a third derivative are a RuntimeError naming the kernel, raised while JAX traces
  the derivative: never a zero.
- **Arguments.** An array parameter takes an array of exactly its dtype and rank (TypeError naming the
  parameter: an f64 kernel under JAX's default f32 asks for `jax_enable_x64`); a scalar parameter takes a
  number or a 0-d array, integers and booleans included (their cotangent is zero: they have no gradient);
  a float scalar reaches the primitives in its parameter's dtype (the cast is differentiated like any other
  operation). With JAX's 64-bit types off (its default), a kernel with a 64-bit array parameter or output,
  a float64 scalar parameter or a 64-bit return is a TypeError naming the first of them (the inputs first),
  as JAX can hold none of them; an i64 scalar parameter is fine (an int32 to JAX, an int to the kernel).
  Output shapes are worked out before the primitives, from the arguments as the caller gives them:
  shapes are concrete under `jit` and `vmap` (per element), and a shape rule may read an integer argument
  too where it is a Python int (in eager mode, or static: `jax.jit(..., static_argnums=...)`); a traced one
  is JAX's ConcretizationTypeError.
- **Copies.** `pure_callback` hands the kernel host numpy arrays: on the CPU these are JAX's buffers or
  copies of them, as JAX decides; the kernel only reads its inputs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence

import numpy as np

try:
    import jax
    import jax.numpy as jnp
    from jax.core import ShapedArray
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir
except ImportError as error:  # the extra is optional: say which one
    raise ImportError("isozyme.jax needs JAX: pip install 'isozyme[jax]'") from error

from isozyme.kernel_op import KernelOp, ShapeRule, Slot
from isozyme.runtime.kernel import Kernel

Shapes = tuple[tuple[int, ...], ...]
"""The shapes of the forward's results, every primitive's one parameter (`shapes`)."""


def op(kernel: Kernel, outputs: str | Sequence[str] | Mapping[str, ShapeRule] = ()) -> Callable[..., object]:
    """The JAX function of `kernel` whose outputs are the array parameters `outputs` (module docstring)."""
    spec = KernelOp(kernel, outputs)
    primitives = _Primitives(spec)
    x64_error = _x64_error(spec)
    single = len(primitives.result_dtypes) == 1

    def kernel_op(*args: object, **kwargs: object) -> object:
        values = spec.bind(args, kwargs)
        if x64_error is not None and not jax.config.jax_enable_x64:
            raise TypeError(x64_error)
        values = [_checked(spec, slot, value) for slot, value in zip(spec.inputs, values)]
        shapes = [*spec.output_shapes(values), *([()] if spec.returns is not None else [])]
        results = primitives.forward.bind(*map(_operand, spec.inputs, values),
                                          shapes=tuple(tuple(map(operator.index, shape)) for shape in shapes))
        return results[0] if single else tuple(results)
    kernel_op.__name__ = spec.name
    kernel_op.__doc__ = f"The JAX function of isozyme kernel '{spec.name}'."
    kernel_op.__signature__ = spec.signature  # type: ignore[attr-defined]
    return kernel_op


class _Primitives:
    """The op's JAX primitives and their rules (module docstring, "Derivatives"): `forward`, `backward`,
    `tangent` (None for an op with no float result) and `hvp` (None for an op of first derivatives only).
    Each takes the op's inputs first; each runs its `KernelOp` method through a `jax.pure_callback`."""

    def __init__(self, spec: KernelOp) -> None:
        self.spec = spec
        self.count = len(spec.inputs)
        self.result_dtypes = [s.dtype for s in spec.outputs] + ([spec.returns.numpy_dtype] if spec.returns else [])
        self.input_dtypes = [s.dtype for s in spec.inputs]
        self.differentiable = [i for i, s in enumerate(spec.inputs) if s.differentiable]
        """The inputs that have a gradient and take a tangent: float arrays and float scalars, by position."""
        self.cotangents = [i for i, dtype in enumerate(self.result_dtypes) if dtype.kind == "f"]
        """The results that take a cotangent and have a tangent (the others' are float0 zeros)."""
        name = f"isozyme_{spec.name}"
        self.forward = self._primitive(name, self._results, self._run_forward, self._forward_jvp, None)
        self.backward = self._primitive(f"{name}_backward", self._gradients, self._run_backward,
                                        self._backward_jvp, self._backward_transpose)
        self.tangent = None if not self.cotangents else self._primitive(
            f"{name}_jvp", self._tangents, self._run_tangents, self._tangent_jvp, self._tangent_transpose)
        self.hvp = None if spec.derivative_order < 2 else self._primitive(
            f"{name}_hvp", self._gradients, self._run_hvp, self._hvp_jvp, self._hvp_transpose)

    def _primitive(self, name: str, results: Callable[[list, Shapes], list], run: Callable[..., list],
                   jvp: Callable[..., tuple], transpose: Callable[..., list] | None) -> Primitive:
        """A primitive with multiple results `results(argument shapes, shapes)` (shape and dtype pairs),
        computed by `run` on the host, with a vmap rule that loops (`_looped`)."""
        primitive = Primitive(name)
        primitive.multiple_results = True

        def call(*args: object, shapes: Shapes) -> list:
            wanted = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in results([np.shape(a) for a in args],
                                                                                      shapes)]
            return jax.pure_callback(run, wanted, *args)

        primitive.def_impl(call)
        primitive.def_abstract_eval(lambda *avals, shapes: [ShapedArray(shape, dtype) for shape, dtype in
                                                             results([a.shape for a in avals], shapes)])
        mlir.register_lowering(primitive, mlir.lower_fun(call, multiple_results=True))
        batching.primitive_batchers[primitive] = lambda args, dims, **params: _looped(primitive, args, dims, params)
        ad.primitive_jvps[primitive] = jvp
        if transpose is not None:
            ad.primitive_transposes[primitive] = transpose
        return primitive

    # --- the results' shapes and dtypes ------------------------------------------------------------------------

    def _results(self, arguments: list, shapes: Shapes) -> list:
        return list(zip(shapes, self.result_dtypes))

    def _gradients(self, arguments: list, shapes: Shapes) -> list:
        """One per differentiable input, of its shape (the backward's and the hvp's results)."""
        return [(arguments[i], self.input_dtypes[i]) for i in self.differentiable]

    def _tangents(self, arguments: list, shapes: Shapes) -> list:
        return [(shapes[i], self.result_dtypes[i]) for i in self.cotangents]

    # --- what the callbacks run --------------------------------------------------------------------------------

    def _per_input(self, values: Sequence[object]) -> list[object]:
        """One entry per input from one per differentiable input (a tangent, a direction), None elsewhere."""
        per_input: list[object] = [None] * self.count
        for position, value in zip(self.differentiable, values):
            per_input[position] = np.asarray(value)
        return per_input

    def _run_forward(self, *args: np.ndarray) -> list[np.ndarray]:
        outputs, result = self.spec.forward([np.asarray(a) for a in args])
        returned = [np.asarray(result, self.result_dtypes[-1])] if self.spec.returns is not None else []
        return [*outputs, *returned]

    def _run_backward(self, *args: np.ndarray) -> list[np.ndarray]:
        cotangents: list[object] = [None] * len(self.result_dtypes)
        for position, cotangent in zip(self.cotangents, args[self.count:]):
            cotangents[position] = np.asarray(cotangent)
        returned = cotangents[-1] if self.spec.returns is not None else None
        gradients = self.spec.backward([np.asarray(a) for a in args[:self.count]],
                                       cotangents[:len(self.spec.outputs)], returned)
        return [np.asarray(gradients[i], self.input_dtypes[i]) for i in self.differentiable]

    def _run_tangents(self, *args: np.ndarray) -> list[np.ndarray]:
        outputs, returned = self.spec.tangents([np.asarray(a) for a in args[:self.count]],
                                               self._per_input(args[self.count:]))
        by_result = [*outputs, *([returned] if self.spec.returns is not None else [])]
        return [np.asarray(by_result[i], self.result_dtypes[i]) for i in self.cotangents]

    def _run_hvp(self, *args: np.ndarray) -> list[np.ndarray]:
        products = self.spec.hessian_vector([np.asarray(a) for a in args[:self.count]],
                                            self._per_input(args[self.count:]))
        return [np.asarray(products[i], self.input_dtypes[i]) for i in self.differentiable]

    # --- the derivative rules ----------------------------------------------------------------------------------

    def _hessian_vector(self, inputs: Sequence[object], directions: Sequence[object], shapes: Shapes) -> list:
        if self.hvp is None:
            raise RuntimeError(self.spec.order_error(2))
        return self.hvp.bind(*inputs, *directions, shapes=shapes)

    def _of_inputs(self, tangents: Sequence[object]) -> list | None:
        """The tangents of the differentiable inputs, zeros made real; None where all are zero."""
        moved = [tangents[i] for i in self.differentiable]
        return None if all(type(t) is ad.Zero for t in moved) else [ad.instantiate_zeros(t) for t in moved]

    def _forward_jvp(self, primals: Sequence[object], tangents: Sequence[object], *, shapes: Shapes) -> tuple:
        results = self.forward.bind(*primals, shapes=shapes)
        out = [_zero(r) for r in results]
        moved = self._of_inputs(tangents)
        if moved is not None and self.tangent is not None:
            for position, tangent in zip(self.cotangents, self.tangent.bind(*primals, *moved, shapes=shapes)):
                out[position] = tangent
        return results, out

    def _backward_jvp(self, primals: Sequence[object], tangents: Sequence[object], *, shapes: Shapes) -> tuple:
        """Of gradients = J(x)^T c: J^T dc + c H dx (c the return's cotangent)."""
        inputs, given = primals[:self.count], primals[self.count:]
        results = self.backward.bind(*primals, shapes=shapes)
        total = None
        if not all(type(t) is ad.Zero for t in tangents[self.count:]):
            total = self.backward.bind(*inputs, *map(ad.instantiate_zeros, tangents[self.count:]), shapes=shapes)
        moved = self._of_inputs(tangents)
        if moved is not None:
            scaled = [(given[0] * p).astype(p.dtype) for p in self._hessian_vector(inputs, moved, shapes)]
            total = scaled if total is None else [a + b for a, b in zip(total, scaled)]
        return results, total if total is not None else [_zero(r) for r in results]

    def _backward_transpose(self, cotangents: Sequence[object], *args: object, shapes: Shapes) -> list:
        """Linear in c: J u, the tangent primitive."""
        inputs, given = args[:self.count], args[self.count:]
        _check_defined(self.spec, inputs)
        seeds = [ad.instantiate_zeros(c) for c in cotangents]
        products = self.tangent.bind(*inputs, *seeds, shapes=shapes)  # type: ignore[union-attr]
        return [None] * self.count + [p if ad.is_undefined_primal(g) else None for g, p in zip(given, products)]

    def _tangent_jvp(self, primals: Sequence[object], tangents: Sequence[object], *, shapes: Shapes) -> tuple:
        """Of tangents = J(x) t: J dt + t . H dx (the return's tangent)."""
        inputs, given = primals[:self.count], primals[self.count:]
        results = self.tangent.bind(*primals, shapes=shapes)  # type: ignore[union-attr]
        total = None
        if not all(type(t) is ad.Zero for t in tangents[self.count:]):
            total = self.tangent.bind(*inputs, *map(ad.instantiate_zeros, tangents[self.count:]),  # type: ignore
                                      shapes=shapes)
        moved = self._of_inputs(tangents)
        if moved is not None:
            products = self._hessian_vector(inputs, moved, shapes)
            curvature = sum(jnp.sum(t * p) for t, p in zip(given, products)).astype(results[0].dtype)
            total = [curvature] if total is None else [total[0] + curvature]
        return results, total if total is not None else [_zero(r) for r in results]

    def _tangent_transpose(self, cotangents: Sequence[object], *args: object, shapes: Shapes) -> list:
        """Linear in t: J^T u, the backward primitive."""
        inputs, given = args[:self.count], args[self.count:]
        _check_defined(self.spec, inputs)
        gradients = self.backward.bind(*inputs, *map(ad.instantiate_zeros, cotangents), shapes=shapes)
        return [None] * self.count + [g if ad.is_undefined_primal(t) else None for t, g in zip(given, gradients)]

    def _hvp_jvp(self, primals: Sequence[object], tangents: Sequence[object], *, shapes: Shapes) -> tuple:
        inputs = primals[:self.count]
        if self._of_inputs(tangents) is not None:
            raise RuntimeError(self.spec.order_error(3))
        results = self.hvp.bind(*primals, shapes=shapes)  # type: ignore[union-attr]
        if all(type(t) is ad.Zero for t in tangents[self.count:]):
            return results, [_zero(r) for r in results]
        return results, self.hvp.bind(*inputs, *map(ad.instantiate_zeros, tangents[self.count:]),  # type: ignore
                                      shapes=shapes)

    def _hvp_transpose(self, cotangents: Sequence[object], *args: object, shapes: Shapes) -> list:
        """H is symmetric: its own transpose."""
        inputs, given = args[:self.count], args[self.count:]
        _check_defined(self.spec, inputs)
        products = self.hvp.bind(*inputs, *map(ad.instantiate_zeros, cotangents), shapes=shapes)  # type: ignore
        return [None] * self.count + [p if ad.is_undefined_primal(v) else None for v, p in zip(given, products)]


def _zero(value: object) -> object:
    """The symbolic zero tangent of `value` (float0 for an integer)."""
    return ad.Zero(jax.typeof(value).to_tangent_aval())


def _check_defined(spec: KernelOp, inputs: Sequence[object]) -> None:
    """A transpose is linear in the tangents or cotangents, never in the op's inputs."""
    if any(ad.is_undefined_primal(x) for x in inputs):
        raise RuntimeError(f"the op of isozyme kernel '{spec.name}': a derivative rule was transposed in the op's "
                           "inputs, in which it is not linear")


def _looped(primitive: Primitive, args: Sequence[object], dims: Sequence[object], params: dict) -> tuple:
    """vmap by a loop (`lax.map`) over the batched arguments, moved to axis 0: the kernel runs once per
    element (it has no batched form)."""
    moved = [None if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]

    def one(batched: list) -> list:
        elements = iter(batched)
        return primitive.bind(*[a if m is None else next(elements) for a, m in zip(args, moved)], **params)
    results = jax.lax.map(one, [m for m in moved if m is not None])
    return results, [0] * len(results)


def _operand(slot: Slot, value: object) -> object:
    """`value` as a primitive's operand: an array, a float scalar in the parameter's dtype (its gradient and
    tangent are then of that dtype; the cast itself is differentiated)."""
    if slot.is_array or not slot.element.is_float:
        return jnp.asarray(value)
    return jnp.asarray(value, slot.dtype)


def _x64_error(spec: KernelOp) -> str | None:
    """The TypeError of a call with JAX's 64-bit types off (the default), naming the first parameter, or the
    return, JAX cannot then hold: a 64-bit array, a float64 scalar; None for a kernel without one (an i64
    scalar input is an int32 to JAX and an int to the kernel)."""
    hint = "which JAX holds only with 64-bit types on: jax.config.update('jax_enable_x64', True)"
    for slot in [*spec.inputs, *spec.outputs]:
        if slot.dtype.itemsize == 8 and (slot.is_array or slot.element.is_float):
            kind = "an array" if slot.is_array else "a scalar"
            output = "output " if slot in spec.outputs else ""
            return f"{output}{spec.where(slot)} is {kind} of {slot.dtype}, {hint}"
    if spec.returns is not None and spec.returns.numpy_dtype.itemsize == 8:
        return f"the return value of kernel '{spec.name}' is {spec.returns.numpy_dtype}, {hint}"
    return None


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

