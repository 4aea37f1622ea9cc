"""`isozyme.torch.op`: kernels as PyTorch operators. Each op's results and gradients are compared with the
same function written in torch (autograd's gradients of torch's ops, 1e-12), and with finite differences
(`torch.autograd.gradcheck` and `gradgradcheck`, f64, forward and reverse mode); `torch.library.opcheck` checks
the registrations; the op runs in eager mode, under `torch.compile` (one opaque op, `fullgraph=True`: no graph
break, with and without grad) and under `torch.func` (reverse and forward mode, second derivatives of a
float-returning kernel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from op_kernels import coupled_energy, dense_tanh, dot, gather_scale, scaled_squares  # noqa: E402

import isozyme as iz  # noqa: E402
import isozyme.torch  # noqa: E402
from isozyme import Array, f32, f64, i64  # noqa: E402

F64 = torch.float64


def scaled_squares_torch(x, a, n):
    return a * x[:n] * x[:n], torch.sin(x[:n]).sum()


@iz.kernel
def halve32(x: Array[f32], out: Array[f32]):
    for i in range(x.shape[0]):
        out[i] = x[i] * f32(0.5)


@iz.kernel
def count_positive(x: Array[f64]) -> i64:
    count = 0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            count += 1
    return count


@iz.kernel
def outer(out: Array[f64, 2], x: Array[f64], y: Array[f64]):
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i, j] = x[i] * y[j]


@iz.kernel
def doubles_in_place(x: Array[f64]):
    for i in range(x.shape[0]):
        x[i] = 2.0 * x[i]


@iz.kernel
def clip(out: Array[f64], x: Array[f64], limit: f64) -> i64:
    clipped = 0
    for i in range(x.shape[0]):
        out[i] = min(x[i], limit)
        if x[i] > limit:
            clipped += 1
    return clipped


@iz.kernel
def asserts_finite(x: Array[f64]):
    for i in range(x.shape[0]):
        assert abs(x[i]) < 1e300


scaled_op = isozyme.torch.op(scaled_squares, outputs={"out": lambda x, a, n: (n,)})
dense_op = isozyme.torch.op(dense_tanh, outputs={"h": lambda x, W, b: (x.shape[0], W.shape[0])})
gather_op = isozyme.torch.op(gather_scale, outputs={"out": "index"})
dot_op = isozyme.torch.op(dot)
energy_op = isozyme.torch.op(coupled_energy)


def energy_torch(x, w, a):
    return a * torch.sin(x[:-1] * x[1:]).sum() + (w[:-1] * x[:-1] ** 3).sum()


def dense_torch(x, W, b):
    return torch.tanh(x @ W.T + b)


def tensors(seed: int, *shapes: tuple[int, ...]) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=F64, requires_grad=True) for shape in shapes]


def assert_close(actual, expected, rtol: float = 1e-12) -> None:
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=1e-14)


def test_values_and_gradients_match_the_function_written_in_torch() -> None:
    x, a = tensors(0, (7,), ())
    out, s = scaled_op(x, a, 7)
    out_t, s_t = scaled_squares_torch(x, a, 7)
    assert_close(out, out_t)
    assert_close(s, s_t)
    weights = torch.linspace(-1.0, 1.0, 7, dtype=F64)
    loss, loss_t = (weights * out).sum() + 3.0 * s, (weights * out_t).sum() + 3.0 * s_t
    assert_close(torch.autograd.grad(loss, (x, a)), torch.autograd.grad(loss_t, (x, a)))


def test_outputs_are_fresh_zeroed_tensors() -> None:
    """The kernel accumulates into `out`: each call starts from zeros, so two calls agree."""
    x, a = tensors(1, (5,), ())
    first, _ = scaled_op(x, a, 5)
    second, _ = scaled_op(x, a, 5)
    assert_close(second, first)
    assert_close(first, a * x * x)


def test_two_dimensional_layer_matches_torch() -> None:
    x, W, b = tensors(2, (6, 3), (4, 3), (4,))
    h = dense_op(x, W, b)
    h_t = dense_torch(x, W, b)
    assert h.shape == (6, 4)
    assert_close(h, h_t)
    cotangent = torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(3))
    assert_close(torch.autograd.grad(h, (x, W, b), cotangent), torch.autograd.grad(h_t, (x, W, b), cotangent))


def test_integer_arrays_and_scalars_get_no_gradient() -> None:
    (x,) = tensors(4, (5,))
    index = torch.tensor([4, 0, 0, 2], dtype=torch.int64)
    scale = torch.tensor(1.5, dtype=F64, requires_grad=True)
    out = gather_op(x, index, scale)
    out_t = scale * x[index]
    assert_close(out, out_t)
    cotangent = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    assert_close(torch.autograd.grad(out, (x, scale), cotangent), torch.autograd.grad(out_t, (x, scale), cotangent))
    counted = isozyme.torch.op(count_positive)(x)
    assert counted.dtype == torch.int64 and counted.item() == int((x > 0).sum())
    assert not counted.requires_grad


def test_shape_rule_as_a_function() -> None:
    x, y = tensors(17, (3,), (4,))
    product = isozyme.torch.op(outer, outputs={"out": lambda x, y: (x.shape[0], y.shape[0])})(x, y)
    assert_close(product, torch.outer(x, y))
    cotangent = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(18))
    assert_close(torch.autograd.grad(product, (x, y), cotangent),
                 torch.autograd.grad(torch.outer(x, y), (x, y), cotangent))


def test_an_integer_result_beside_a_float_output() -> None:
    x, limit = tensors(19, (6,), ())
    out, clipped = isozyme.torch.op(clip, outputs=("out",))(x, limit)
    assert clipped.dtype == torch.int64 and clipped.item() == int((x > limit).sum())
    assert not clipped.requires_grad
    weights = torch.arange(6.0, dtype=F64)
    assert_close(torch.autograd.grad((weights * out).sum(), (x, limit)),
                 torch.autograd.grad((weights * torch.minimum(x, limit)).sum(), (x, limit)))


def test_one_tensor_passed_twice() -> None:
    """The kernel refuses arrays that share memory; the op copies the second, so dot(x, x) works."""
    (x,) = tensors(5, (6,))
    value = dot_op(x, x)
    assert_close(value, (x * x).sum())
    assert_close(torch.autograd.grad(value, x)[0], 2 * x.detach())


def test_gradcheck_f64() -> None:
    x, a = tensors(6, (5,), ())
    assert torch.autograd.gradcheck(lambda x, a: scaled_op(x, a, 5), (x, a))
    assert torch.autograd.gradcheck(dense_op, tuple(tensors(7, (3, 2), (4, 2), (4,))))


@pytest.mark.parametrize("which", ["forward", "backward", "jvp", "hvp"])
def test_opcheck(which: str) -> None:
    x, W, b = (t.detach() for t in tensors(8, (3, 2), (4, 2), (4,)))
    if which == "jvp":
        torch.library.opcheck(dense_op.tangent_op, (x, W, b, x, W, b))
        torch.library.opcheck(scaled_op.tangent_op, (x[:, 0], torch.tensor(0.5, dtype=F64), 3, x[:, 1],
                                                     torch.tensor(2.0, dtype=F64)))
    elif which == "hvp":
        assert dense_op.hvp_op is None and scaled_op.hvp_op is None  # float outputs: first derivatives only
        torch.library.opcheck(energy_op.hvp_op, (x[:, 0], x[:, 1], torch.tensor(0.5, dtype=F64), x[:, 1], x[:, 0],
                                                 torch.tensor(2.0, dtype=F64)))
    elif which == "forward":
        torch.library.opcheck(dense_op.forward_op, (x, W, b))
        torch.library.opcheck(gather_op.forward_op, (x[0], torch.tensor([1, 0]), torch.tensor(2.0, dtype=F64)))
        torch.library.opcheck(scaled_op.forward_op, (x[:, 0], torch.tensor(0.5, dtype=F64), 3))
    else:
        torch.library.opcheck(dense_op.backward_op, (x, W, b, torch.ones(3, 4, dtype=F64)))
        cotangents = (torch.ones(3, dtype=F64), torch.tensor(2.0, dtype=F64))
        torch.library.opcheck(scaled_op.backward_op, (x[:, 0], torch.tensor(0.5, dtype=F64), 3, *cotangents))


def test_contiguous_tensors_reach_the_kernel_without_a_copy_and_others_are_made_contiguous() -> None:
    (x,) = tensors(9, (8,))
    (view,) = dense_op._numpy([x])
    assert np.shares_memory(view, x.detach().numpy())
    strided = x[::2]
    a = torch.tensor(2.0, dtype=F64)
    out, s = scaled_op(strided, a, 4)
    assert_close(out, a * strided * strided)
    assert_close(s, torch.sin(strided).sum())


def test_f32_kernel_and_keyword_arguments() -> None:
    x = torch.arange(4, dtype=torch.float32, requires_grad=True)
    out = isozyme.torch.op(halve32, outputs=("out",))(x=x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, 0.5 * x)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), x)[0], torch.full((4,), 0.5))


def test_torch_compile_one_opaque_op_no_graph_break() -> None:
    """A training step's loss and gradients under `torch.compile(fullgraph=True)` (inductor) equal eager
    mode's and torch's; dynamo's graph holds one call of the op, and one of its backward op."""
    x, W, b = tensors(10, (5, 3), (4, 3), (4,))
    target = torch.randn(5, 4, dtype=F64, generator=torch.Generator().manual_seed(11))

    def loss(x, W, b):
        return ((dense_op(x, W, b) - target) ** 2).mean()

    compiled = torch.compile(loss, fullgraph=True)
    value = compiled(x, W, b)
    expected = loss(x, W, b)
    assert_close(value, expected)
    assert_close(torch.autograd.grad(value, (W, b)), torch.autograd.grad(expected, (W, b)))
    reference = ((dense_torch(x, W, b) - target) ** 2).mean()
    assert_close(value, reference)
    graphs = []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward
    torch._dynamo.reset()
    torch.compile(loss, fullgraph=True, backend=capture)(x, W, b)
    assert len(graphs) == 1
    calls = [node.target for module in graphs[0].modules() for node in module.graph.nodes
             if node.op == "call_function"]
    assert calls.count(dense_op.forward_op._opoverload) == 1
    assert calls.count(dense_op.backward_op._opoverload) == 1


def test_torch_func_grad_vjp_and_vmap() -> None:
    x, W, b = (t.detach() for t in tensors(12, (3, 2), (4, 2), (4,)))

    def loss(W, op):
        return (op(x, W, b) ** 2).sum()
    assert_close(torch.func.grad(loss)(W, dense_op), torch.func.grad(loss)(W, dense_torch))
    cotangent = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(13))
    _, vjp = torch.func.vjp(lambda x, W: dense_op(x, W, b), x, W)
    _, vjp_t = torch.func.vjp(lambda x, W: dense_torch(x, W, b), x, W)
    assert_close(vjp(cotangent), vjp_t(cotangent))
    batch = torch.randn(5, 4, 2, dtype=F64, generator=torch.Generator().manual_seed(14))  # five W
    per_example = torch.func.vmap(torch.func.grad(loss), in_dims=(0, None))
    assert_close(per_example(batch, dense_op), per_example(batch, dense_torch))


def test_torch_compile_fullgraph_as_the_first_call_of_a_process() -> None:
    """Issue 62: dynamo traced the first read of a `functools.cached_property` (ScalarType.numpy_dtype), which
    takes an RLock on Python 3.10/3.11: 'Unsupported context manager' under fullgraph=True. A fresh process,
    so that nothing has read those properties before the compiled call."""
    code = """if True:
        import sys
        sys.path.insert(0, "tests")
        import torch
        import isozyme.torch
        from op_kernels import scaled_squares
        op = isozyme.torch.op(scaled_squares, outputs={"out": lambda x, a, n: (n,)})
        x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64, requires_grad=True)
        a = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        def loss(x, a):
            out, s = op(x, a, 5)
            return out.sum() + s
        torch.compile(loss, fullgraph=True)(x, a).backward()
        torch.testing.assert_close(x.grad, 2 * a.detach() * x.detach() + torch.cos(x.detach()), rtol=1e-12, atol=0)
        torch.testing.assert_close(a.grad, (x.detach() ** 2).sum(), rtol=1e-12, atol=0)
        with torch.no_grad():
            out, s = torch.compile(op, fullgraph=True)(x, a, 3)
        torch.testing.assert_close(s, torch.sin(x.detach()[:3]).sum(), rtol=1e-12, atol=0)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]


class Layer(torch.nn.Module):
    def __init__(self, W, b) -> None:
        super().__init__()
        self.W, self.b = torch.nn.Parameter(W), torch.nn.Parameter(b)

    def forward(self, x):
        return dense_op(x, self.W, self.b)


@pytest.mark.parametrize("mode", ["no_input_requires_grad", "no_grad", "inference_mode", "eval", "dynamic"])
def test_torch_compile_without_grad(mode: str) -> None:
    """Issue 62: with no input requiring grad, dynamo inlined the autograd.Function's forward and passed it
    its context: "'AutogradFunctionContextVariable' object has no attribute 'proxy'"."""
    torch._dynamo.reset()
    x, W, b = (t.detach() for t in tensors(20, (5, 3), (4, 3), (4,)))
    expected = dense_torch(x, W, b)
    if mode == "no_input_requires_grad":
        result = torch.compile(dense_op, fullgraph=True)(x, W, b)
    elif mode == "no_grad":
        with torch.no_grad():
            result = torch.compile(dense_op, fullgraph=True)(x, W.requires_grad_(), b.requires_grad_())
    elif mode == "inference_mode":
        with torch.inference_mode():
            result = torch.compile(dense_op, fullgraph=True)(x, W, b)
    elif mode == "eval":
        layer = Layer(W, b).eval()
        with torch.no_grad():
            result = torch.compile(layer, fullgraph=True)(x)
    else:
        compiled = torch.compile(dense_op, fullgraph=True, dynamic=True)
        result = compiled(x, W, b)
        assert_close(compiled(x[:2], W, b), expected[:2])
        W.requires_grad_()
        (gradient,) = torch.autograd.grad(compiled(x, W, b).sum(), W)
        assert_close(gradient, torch.autograd.grad(dense_torch(x, W, b).sum(), W)[0])
    assert not result.requires_grad
    assert_close(result, expected)


def test_forward_mode_is_isozymes_forward_mode() -> None:
    """Issue 62: `jacfwd`, `torch.func.jvp` and `forward_ad` through the op said "You must implement the jvp
    function for custom autograd.Function"; now the op's jvp is the kernel's forward mode (iz.fwddiff)."""
    x, W, b = (t.detach() for t in tensors(21, (3, 2), (4, 2), (4,)))
    assert_close(torch.func.jacfwd(dense_op, argnums=(0, 1, 2))(x, W, b),
                 torch.func.jacfwd(dense_torch, argnums=(0, 1, 2))(x, W, b))
    tangents = tuple(t.detach() for t in tensors(22, (3, 2), (4, 2), (4,)))
    assert_close(torch.func.jvp(dense_op, (x, W, b), tangents), torch.func.jvp(dense_torch, (x, W, b), tangents))
    (v,) = (t.detach() for t in tensors(23, (5,)))
    a, da = torch.tensor(0.7, dtype=F64), torch.tensor(-1.3, dtype=F64)
    with torch.autograd.forward_ad.dual_level():
        dual_x, dual_a = torch.autograd.forward_ad.make_dual(v, v.flip(0)), torch.autograd.forward_ad.make_dual(a, da)
        results = [torch.autograd.forward_ad.unpack_dual(r) for r in scaled_op(dual_x, dual_a, 4)]
        expected = [torch.autograd.forward_ad.unpack_dual(r) for r in scaled_squares_torch(dual_x, dual_a, 4)]
    for result, reference in zip(results, expected):
        assert_close(result.primal, reference.primal)
        assert_close(result.tangent, reference.tangent)
    assert torch.autograd.gradcheck(dense_op, tuple(tensors(24, (3, 2), (4, 2), (4,))), check_forward_ad=True)
    assert torch.autograd.gradcheck(lambda x, a: scaled_op(x, a, 4), tuple(tensors(25, (5,), ())),
                                    check_forward_ad=True)


def test_forward_mode_under_torch_compile_runs_eagerly() -> None:
    """Dynamo inlines an autograd.Function's forward under forward mode and drops its jvp
    (pytorch/pytorch#192985), which would be a zero tangent: the op's forward mode runs eagerly instead (a
    graph break, an error under fullgraph=True)."""
    torch._dynamo.reset()
    x, W, b = (t.detach() for t in tensors(30, (3, 2), (4, 2), (4,)))
    expected = torch.func.jacfwd(dense_torch, argnums=1)(x, W, b)
    assert_close(torch.compile(torch.func.jacfwd(dense_op, argnums=1))(x, W, b), expected)
    torch._dynamo.reset()  # else the fullgraph call below finds the frames compiled above
    with pytest.raises(torch._dynamo.exc.Unsupported, match="kernel 'dense_tanh' runs eagerly"):
        torch.compile(torch.func.jacfwd(dense_op, argnums=1), fullgraph=True)(x, W, b)


def test_second_derivatives_of_a_float_returning_kernel() -> None:
    """Forward over reverse (torch.func.hessian = jacfwd(jacrev)), reverse over reverse (create_graph=True,
    nested grad), forward over forward and reverse over forward: each against the function written in torch,
    and against finite differences (gradgradcheck)."""
    x, w, a = (t.detach() for t in tensors(26, (5,), (5,), ()))
    argnums = (0, 1, 2)
    expected = torch.func.hessian(energy_torch, argnums)(x, w, a)
    assert_close(torch.func.hessian(energy_op, argnums)(x, w, a), expected)
    assert_close(torch.func.jacfwd(torch.func.jacfwd(energy_op, argnums), argnums)(x, w, a), expected)
    assert_close(torch.func.jacrev(torch.func.jacfwd(energy_op, argnums), argnums)(x, w, a), expected)
    assert_close(torch.func.jacrev(torch.func.jacrev(energy_op, argnums), argnums)(x, w, a), expected)
    assert_close(torch.autograd.functional.hessian(energy_op, (x, w, a)),
                 torch.autograd.functional.hessian(energy_torch, (x, w, a)))
    grad_of_grad = torch.func.grad(lambda x: torch.func.grad(energy_op)(x, w, a).sin().sum())
    assert_close(grad_of_grad(x), torch.func.grad(lambda x: torch.func.grad(energy_torch)(x, w, a).sin().sum())(x))
    inputs = tuple(tensors(27, (4,), (4,), ()))
    assert torch.autograd.gradgradcheck(energy_op, inputs, check_fwd_over_rev=True)
    assert torch.autograd.gradgradcheck(energy_op, inputs, check_rev_over_rev=True)


def test_second_derivatives_that_isozyme_cannot_take_are_an_error_naming_the_kernel() -> None:
    """An op with a float output has first derivatives only (iz.hvp differentiates a float return); a
    float-returning kernel's op has up to second. Past that, an error naming the kernel, never a zero."""
    x, W, b = tensors(15, (3, 2), (4, 2), (4,))
    (gradient,) = torch.autograd.grad(dense_op(x, W, b).sum(), W, create_graph=True)
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh'.*first derivatives only"):
        gradient.sum().backward()
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh'.*first derivatives only"):
        torch.func.grad(lambda W: torch.func.grad(lambda W: dense_op(x, W, b).sum())(W).sum())(W.detach())
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh'.*first derivatives only"):
        torch.func.hessian(lambda W: dense_op(x, W, b).sum())(W.detach())
    with pytest.raises(RuntimeError, match="kernel 'dense_tanh'.*first derivatives only"):
        torch.func.jacfwd(torch.func.jacfwd(lambda W: dense_op(x, W, b).sum()))(W.detach())
    v, w, a = tensors(28, (4,), (4,), ())
    (gradient,) = torch.autograd.grad(energy_op(v, w, a), v, create_graph=True)
    (second,) = torch.autograd.grad(gradient.sum(), v, create_graph=True)
    with pytest.raises(RuntimeError, match="kernel 'coupled_energy'.*up to second"):
        second.sum().backward()
    with pytest.raises(RuntimeError, match="kernel 'coupled_energy'.*up to second"):
        torch.func.jacfwd(torch.func.hessian(energy_op))(v.detach(), w.detach(), a.detach())


def test_a_negative_extent_from_a_shape_rule_names_the_output() -> None:
    """Issue 62: it was numpy's "negative dimensions are not allowed"."""
    x, y = (t.detach() for t in tensors(29, (3,), (4,)))
    short = isozyme.torch.op(outer, outputs={"out": lambda x, y: (x.shape[0] - 5, y.shape[0])})
    with pytest.raises(ValueError, match=r"shape rule of output 'out' of kernel 'outer' gave \(-2, 4\).*negative"):
        short(x, y)


def test_bad_arguments_name_the_parameter() -> None:
    x, W, b = (t.detach() for t in tensors(16, (3, 2), (4, 2), (4,)))
    with pytest.raises(TypeError, match="parameter 'W' of kernel 'dense_tanh'.*float64.*float32"):
        dense_op(x, W.float(), b)
    with pytest.raises(TypeError, match="parameter 'b'.*1-d tensor"):
        dense_op(x, W, b[None])
    with pytest.raises(TypeError, match="parameter 'x'.*torch.Tensor"):
        dense_op(x.numpy(), W, b)
    with pytest.raises(TypeError, match="parameter 'n'.*int"):
        scaled_op(x[0], 1.0, 2.0)
    with pytest.raises(TypeError, match=r"takes \(x, W, b\)"):
        dense_op(x, W)
    with pytest.raises(ValueError, match="parameter 'x'.*run on the CPU.*meta"):
        dense_op(x.to("meta"), W, b)


def test_bad_op_definitions() -> None:
    with pytest.raises(ValueError, match="may write its array parameter 'x'.*not in outputs"):
        isozyme.torch.op(doubles_in_place)
    with pytest.raises(ValueError, match="'y', which is not a parameter.*x, a, n, out"):
        isozyme.torch.op(scaled_squares, outputs=("y",))
    with pytest.raises(TypeError, match="output 'a'.*scalar parameter"):
        isozyme.torch.op(scaled_squares, outputs=("a",))
    with pytest.raises(ValueError, match="output 'out'.*needs its shape: no input array has rank 2"):
        isozyme.torch.op(outer, outputs=("out",))
    with pytest.raises(ValueError, match="returns nothing and outputs names no array"):
        isozyme.torch.op(asserts_finite)
