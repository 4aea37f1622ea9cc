"""Custom reverse rules (`kernel.defvjp(rule)`, enzyme_ad/custom.py): the rule replaces the kernel's body in
reverse mode, at the top level and at every call, on both backends and for every `opt`. Expected values are
worked out by hand or come from finite differences of the undecorated functions."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from ad_oracle import ALL_VARIANTS, central_difference
from kernelgen import python_reference

import isozyme as iz
from isozyme import Array, f64, i64

by_variant = pytest.mark.parametrize(("opt", "backend"), ALL_VARIANTS, ids=[f"{o}-{b}" for o, b in ALL_VARIANTS])


@iz.kernel
def safe_norm(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


@safe_norm.defvjp
@iz.kernel
def safe_norm_vjp(x: Array[f64], d_x: Array[f64], n: i64, differet: f64) -> None:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    r = iz.sqrt(s)
    if r > 0.0:  # the subgradient 0 at the origin, where the body's derivative is 0 * inf = nan
        for i in range(n):
            d_x[i] += differet * x[i] / r


@iz.kernel
def plain_norm(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


@iz.kernel
def weighted_norms(x: Array[f64], w: Array[f64], n: i64) -> f64:
    total = 0.0
    for k in range(len(w)):
        total += w[k] * safe_norm(x, n) + iz.sin(w[k] * x[k])
    return total


@iz.kernel
def staircase(x: f64) -> f64:
    return iz.floor(x)


@staircase.defvjp
@iz.kernel
def staircase_vjp(x: f64, d_x: Array[f64], differet: f64) -> None:
    d_x[0] = differet  # a straight-through estimator: opaque to AD, differentiable by decree


@iz.kernel
def quantized_loss(x: Array[f64], a: f64) -> f64:
    total = 0.0
    for i in range(len(x)):
        total += a * staircase(3.0 * x[i]) * x[i]
    return total


def norm_gradient(x: np.ndarray) -> np.ndarray:
    r = np.linalg.norm(x)
    return x / r if r > 0 else np.zeros_like(x)


@by_variant
def test_the_rule_gives_the_gradient_at_the_origin(opt: str, backend: str) -> None:
    x = np.zeros(5)
    assert np.array_equal(iz.grad(safe_norm, opt=opt, backend=backend)(x, 5), np.zeros(5))
    assert np.isnan(iz.grad(plain_norm, opt=opt, backend=backend)(x, 5)).all()  # what the rule avoids


@by_variant
def test_the_rule_matches_the_body_away_from_the_origin(opt: str, backend: str) -> None:
    x = np.array([0.5, -1.0, 2.0, 0.25])
    expected = norm_gradient(x)
    assert np.allclose(iz.grad(safe_norm, opt=opt, backend=backend)(x, 4), expected, rtol=1e-14, atol=0)
    assert np.allclose(iz.grad(plain_norm, opt=opt, backend=backend)(x, 4), expected, rtol=1e-14, atol=0)


@by_variant
def test_a_call_in_a_loop_is_differentiated_with_the_rule(opt: str, backend: str) -> None:
    rng = np.random.default_rng(3)
    x, w = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 3)
    dx, dw = np.zeros(4), np.zeros(3)
    value, _ = iz.autodiff(weighted_norms, iz.Duplicated(x, dx), iz.Duplicated(w, dw), 4, opt=opt, backend=backend)
    assert value == pytest.approx(weighted_norms.py_func(x, w, 4), rel=1e-14)
    f = weighted_norms.py_func
    for k in range(4):
        fd = central_difference(lambda v: f(v, w, 4), x, np.eye(4)[k], 1e-4)
        assert dx[k] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    for k in range(3):
        fd = central_difference(lambda v: f(x, v, 4), w, np.eye(3)[k], 1e-4)
        assert dw[k] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    x[:] = 0.0
    dx[:] = 0.0
    iz.autodiff(weighted_norms, iz.Duplicated(x, dx), iz.Const(w), 4, opt=opt, backend=backend)
    assert np.allclose(dx[:3], w * np.cos(0.0))  # the norms add nothing at 0: no nan


@by_variant
def test_an_opaque_rule_defines_the_derivative(opt: str, backend: str) -> None:
    """floor has derivative 0; the rule says 1 (straight through): d/dx of a*floor(3x)*x is then
    a*(3*x + floor(3x)), d/da is sum floor(3x)*x. A Const array argument of the kernel is fine too."""
    x, a = np.array([0.3, 1.45, -0.8]), 1.5
    dx = np.zeros(3)
    _, (da,) = iz.autodiff(quantized_loss, iz.Duplicated(x, dx), iz.Active(a), opt=opt, backend=backend)
    assert np.allclose(dx, a * (3.0 * x + np.floor(3.0 * x)), rtol=1e-14)
    assert da == pytest.approx(float(np.sum(np.floor(3.0 * x) * x)), rel=1e-14)
    assert iz.grad(staircase, opt=opt, backend=backend)(0.7) == 1.0


def test_the_gradient_ir_calls_the_rule() -> None:
    text = iz.show_ir(weighted_norms, stage="grad", activity=("dup", "dup", "const"), opt="none")
    assert "call @safe_norm_vjp(" in text
    assert "noinline" in text and "vjp.safe_norm_vjp" in text


def test_a_rule_with_the_wrong_signature_is_a_type_error() -> None:
    @iz.kernel
    def cube(x: f64) -> f64:
        return x * x * x

    @iz.kernel
    def cube_vjp(x: f64, differet: f64) -> None:
        pass

    with pytest.raises(TypeError, match=r"must take \(x: f64, d_x: f64\[\?\], differet: f64\)"):
        cube.defvjp(cube_vjp)


@iz.kernel
def doubled(x: Array[f64]) -> f64:
    return 2.0 * x[0]


@doubled.defvjp
@iz.kernel
def doubled_vjp(x: Array[f64], d_x: Array[f64], differet: f64) -> None:
    x[0] = 0.0  # a rule must not write the primal arrays
    d_x[0] += 2.0 * differet


@iz.kernel
def uses_doubled(x: Array[f64]) -> f64:
    return doubled(x) * 3.0


@iz.kernel
def overwrites_after_call(x: Array[f64]) -> f64:
    y = safe_norm(x, len(x))
    x[0] = 5.0
    return y + x[0]


def _line_of(kernel: iz.Kernel, text: str) -> int:
    lines, first = inspect.getsourcelines(kernel.py_func)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("opt", ["post", "pre", "none"])
def test_a_rule_that_writes_a_primal_array_is_refused(opt: str) -> None:
    with pytest.raises(iz.DifferentiationError, match="doubled_vjp writes x") as error:
        iz.grad(uses_doubled, opt=opt, backend="interp")(np.ones(2))
    assert f"line {_line_of(uses_doubled, 'doubled(x)')}," in str(error.value)


@pytest.mark.parametrize("opt", ["post", "pre", "none"])
def test_a_rule_reading_an_array_the_caller_overwrites_is_refused(opt: str) -> None:
    with pytest.raises(iz.DifferentiationError, match="safe_norm_vjp reads x, which this kernel writes") as error:
        iz.grad(overwrites_after_call, opt=opt, backend="interp")(np.ones(3))
    assert f"line {_line_of(overwrites_after_call, 'safe_norm(x')}," in str(error.value)


# --- kernels that are not inlined (`inline=False`): split mode, recomputing the call in the reverse pass ---


@iz.kernel(inline=False)
def phase_energy(x: Array[f64], k: i64, a: f64) -> f64:
    s = 0.0
    for j in range(len(x)):
        s += iz.sin(a * x[j] + k) * x[j]
    return s


@iz.kernel
def phased_total(x: Array[f64], w: Array[f64], a: f64) -> f64:
    t = 0.0
    for k in range(len(w)):  # the helper is called twice per iteration, never inlined
        t += w[k] * phase_energy(x, k, a) * phase_energy(x, k + 1, a * w[k])
    return t


@iz.kernel(inline=False)
def squares_into(out: Array[f64], x: Array[f64]) -> None:
    for i in range(len(x)):
        out[i] = x[i] * x[i]


@iz.kernel
def calls_a_writer(out: Array[f64], x: Array[f64]) -> f64:
    squares_into(out, x)
    s = out[0] * out[1]
    x[0] = 3.0  # an input of the first call, overwritten before the second
    squares_into(out, x)
    return s + out[0]


@by_variant
def test_a_helper_that_is_not_inlined_is_differentiated_in_a_loop(opt: str, backend: str) -> None:
    rng = np.random.default_rng(5)
    x, w, a = rng.uniform(-1, 1, 5), rng.uniform(-1, 1, 3), 0.7
    gx, gw, ga = iz.grad(phased_total, argnums=(0, 1, 2), opt=opt, backend=backend)(x, w, a)
    f = phased_total.py_func
    for k in range(5):
        assert gx[k] == pytest.approx(central_difference(lambda v: f(v, w, a), x, np.eye(5)[k], 1e-4), rel=1e-7)
    for k in range(3):
        assert gw[k] == pytest.approx(central_difference(lambda v: f(x, v, a), w, np.eye(3)[k], 1e-4), rel=1e-7)
    fd_a = central_difference(lambda v: f(x, w, v[0]), np.array([a]), np.ones(1), 1e-4)
    assert ga == pytest.approx(float(fd_a), rel=1e-7)


@pytest.mark.parametrize("opt", ["post", "pre", "none"])
def test_the_helper_stays_a_call_in_the_primal_and_in_the_gradient(opt: str) -> None:
    assert "call @phase_energy(" in iz.show_ir(phased_total, stage="opt")
    text = iz.show_ir(phased_total, stage="grad", activity=("dup", "dup", "active"), opt=opt)
    assert "call @phase_energy(" in text and "call @diffe_phase_energy(" in text


@by_variant
def test_a_helper_that_writes_its_arguments_is_split_with_a_tape(opt: str, backend: str) -> None:
    """calls_a_writer returns x0^2 x1^2 + 9 (x0 is set to 3 between the calls): the gradient is
    (2 x0 x1^2, 2 x0^2 x1, 0) at the x given; the seed in d_out is consumed."""
    out, x = np.zeros(3), np.array([0.5, 1.5, 2.0])
    dout, dx = np.full(3, 0.25), np.zeros(3)
    value, _ = iz.autodiff(calls_a_writer, iz.Duplicated(out, dout), iz.Duplicated(x, dx), opt=opt, backend=backend)
    assert value == 0.5**2 * 1.5**2 + 9.0
    assert np.array_equal(out, [9.0, 2.25, 4.0]) and np.array_equal(x, [3.0, 1.5, 2.0])
    # the seed 0.25 of out's final values flows back to the x of the second call: x0 = 3 then (no x0 left)
    assert np.allclose(dx, [2 * 0.5 * 1.5**2, 2 * 0.5**2 * 1.5 + 0.25 * 2 * 1.5, 0.25 * 2 * 2.0], rtol=1e-15)
    assert np.array_equal(dout, np.zeros(3))


@iz.kernel(inline=False)
def diffuse(u: Array[f64], r: f64) -> None:
    n = len(u)
    prev = iz.empty(n, f64)
    for i in range(n):
        prev[i] = u[i]
    for i in range(1, n - 1):
        u[i] = prev[i] + r * (prev[i - 1] - 2.0 * prev[i] + prev[i + 1]) + 0.1 * iz.sin(prev[i])


@iz.kernel
def diffused_energy(u: Array[f64], r: f64, steps: i64) -> f64:
    for _ in range(steps):
        diffuse(u, r)  # overwrites u in every step: split mode tapes u before each call
    e = 0.0
    for i in range(len(u)):
        e += u[i] * u[i]
    return e


@iz.kernel
def diffuse_until(u: Array[f64], r: f64) -> f64:
    e = 0.0
    k = 0
    while e < 5.0 and k < 20:  # a loop of unknown trip count around the split call
        diffuse(u, r)
        e = 0.0
        for i in range(len(u)):
            e += u[i] * u[i] * (k + 1)
        k += 1
    return e


@by_variant
def test_a_time_stepper_that_is_not_inlined_is_split_in_counted_and_while_loops(opt: str, backend: str) -> None:
    rng = np.random.default_rng(11)
    u, r = rng.uniform(-1, 1, 7), 0.3
    gu, gr = iz.grad(diffused_energy, argnums=(0, 1), opt=opt, backend=backend)(u.copy(), r, 6)
    f = diffused_energy.py_func
    for k in range(7):
        fd = central_difference(lambda v: f(v.copy(), r, 6), u, np.eye(7)[k], 1e-4)
        assert gu[k] == pytest.approx(fd, rel=1e-7, abs=1e-10)
    assert gr == pytest.approx(float(central_difference(lambda v: f(u.copy(), v[0], 6), np.array([r]), np.ones(1),
                                                         1e-4)), rel=1e-7)
    g = diffuse_until.py_func
    gu = iz.grad(diffuse_until, argnums=0, opt=opt, backend=backend)(u.copy(), r)
    for k in range(7):
        fd = central_difference(lambda v: g(v.copy(), r), u, np.eye(7)[k], 1e-4)
        assert gu[k] == pytest.approx(fd, rel=1e-7, abs=1e-10)


def test_split_mode_names_follow_enzyme() -> None:
    text = iz.show_ir(diffused_energy, stage="grad-opt", activity=("dup", "active", "const"), opt="post")
    assert "func @augmented_diffuse.0(" in text and "func @reverse_diffuse.0(" in text
    assert "call @reverse_diffuse.0(" in text and "grow %tape.u" in text


@iz.kernel(inline=False)
def layer_step(xs: Array[f64, 2], k: i64, w: Array[f64]) -> None:
    # reads the slab xs[k] only (also through a helper), writes xs[k + 1]: split mode tapes that slab
    scratch = iz.empty(len(w), f64)
    for i in range(len(w)):
        scratch[i] = iz.sin(xs[k, i] * w[i])
    for i in range(len(w)):
        xs[k + 1, i] = scratch[i] * scratch[i] + slab_element(xs, k, i)


@iz.kernel
def slab_element(xs: Array[f64, 2], k: i64, i: i64) -> f64:
    return xs[k, i] * 0.5


@iz.kernel
def stacked_layers(x: Array[f64], w: Array[f64], layers: i64) -> f64:
    xs = iz.empty((layers + 1, len(x)), f64)
    for i in range(len(x)):
        xs[0, i] = x[i]
    for k in range(layers):
        layer_step(xs, k, w)
        for i in range(len(x)):
            xs[k, i] = -1.0  # the slab the call read, overwritten: its recomputation needs the taped one
    e = 0.0
    for i in range(len(x)):
        e += xs[layers, i] * xs[layers, i] + xs[0, i]
    return e


@by_variant
def test_a_split_call_that_reads_one_slab_tapes_that_slab(opt: str, backend: str) -> None:
    rng = np.random.default_rng(8)
    x, w = rng.uniform(-1, 1, 5), rng.uniform(0.5, 1.5, 5)
    gx, gw = iz.grad(stacked_layers, argnums=(0, 1), opt=opt, backend=backend)(x, w, 3)
    f = stacked_layers.py_func
    for k in range(5):
        assert gx[k] == pytest.approx(central_difference(lambda v: f(v, w, 3), x, np.eye(5)[k], 1e-4), rel=1e-7)
        assert gw[k] == pytest.approx(central_difference(lambda v: f(x, v, 3), w, np.eye(5)[k], 1e-4), rel=1e-7)


@iz.kernel
def half_element(xs: Array[f64, 2], k: i64, i: i64) -> f64:
    return xs[k, i] * 0.5


@half_element.defvjp
@iz.kernel
def half_element_vjp(xs: Array[f64, 2], d_xs: Array[f64, 2], k: i64, i: i64, differet: f64) -> None:
    # the derivative, plus 0 times an element of slab 0, which the body never reads: a rule may read any slab
    d_xs[k, i] += 0.5 * differet + 0.0 * xs[0, i]


@iz.kernel(inline=False)
def ruled_layer_step(xs: Array[f64, 2], k: i64, w: Array[f64], ys: Array[f64, 2]) -> None:
    # reads xs[k] only, through a kernel with a reverse rule too; writes ys[k]
    for i in range(len(w)):
        ys[k, i] = iz.sin(xs[k, i] * w[i]) + half_element(xs, k, i)


@iz.kernel
def ruled_layers(x: Array[f64], w: Array[f64], layers: i64) -> f64:
    xs = iz.empty((layers + 1, len(x)), f64)
    ys = iz.empty((layers, len(x)), f64)
    for i in range(len(x)):
        xs[0, i] = x[i]
    for k in range(layers):
        ruled_layer_step(xs, k, w, ys)
        for i in range(len(x)):
            xs[k + 1, i] = ys[k, i]
            xs[k, i] = -1.0  # what the call read, overwritten: split mode tapes xs
    e = 0.0
    for i in range(len(x)):
        e += xs[layers, i] * xs[layers, i]
    return e


@by_variant
def test_a_split_call_through_a_rule_tapes_the_whole_array(opt: str, backend: str) -> None:
    """The rule that `diffe_<g>` calls may read slabs its body does not (here slab 0): no slab is inferred
    through such a call, so the reverse pass's copy holds every slab (with one slab restored, the rest of
    the copy is uninitialized: nan on the interpreter)."""
    rng = np.random.default_rng(9)
    x, w = rng.uniform(-1, 1, 4), rng.uniform(0.5, 1.5, 4)
    gx = iz.grad(ruled_layers, argnums=0, opt=opt, backend=backend)(x, w, 3)
    f = ruled_layers.py_func
    for k in range(4):
        assert gx[k] == pytest.approx(central_difference(lambda v: f(v, w, 3), x, np.eye(4)[k], 1e-4), rel=1e-7)


def test_show_cache_gives_a_slab_per_run_and_no_tape_of_arrays_nothing_writes() -> None:
    text = iz.show_cache(stacked_layers, ("dup", "dup", "const"))
    tapes = [line for line in text.splitlines() if "per run of" in line]
    assert len(tapes) == 1 and tapes[0].startswith("%xs ") and "size(a slab of xs) per run of" in tapes[0], text
    grad = iz.show_ir(stacked_layers, stage="grad-opt", activity=("dup", "dup", "const"))
    assert "func @augmented_layer_step.0s(" in grad and "func @reverse_layer_step.0s(" in grad
    text = iz.show_cache(calls_a_writer, ("dup", "dup"))  # out: written by the helper, never read by it
    tapes = [line for line in text.splitlines() if "per run of" in line]
    assert sorted(line.split()[0] for line in tapes) == ["%out", "%out", "%x", "%x"], text
    assert all("size(nothing of out)" in line for line in tapes if line.startswith("%out ")), text


# --- custom forward rules (`kernel.defjvp(rule)`) ---------------------------------------------------------


@safe_norm.defjvp  # safe_norm has a reverse rule too: each mode uses its own
@iz.kernel
def safe_norm_jvp(x: Array[f64], d_x: Array[f64], n: i64, d_return: Array[f64]) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    r = iz.sqrt(s)
    t = 0.0
    if r > 0.0:  # the directional derivative 0 at the origin, where the body's is nan
        for i in range(n):
            t += x[i] * d_x[i] / r
    d_return[0] = t
    return r


@iz.kernel
def fwd_weighted(x: Array[f64], a: f64) -> f64:
    t = 0.0
    for k in range(3):
        t += safe_norm(x, len(x)) * (k + a) + iz.sin(a * x[k])
    return t


@by_variant
def test_a_forward_rule_gives_the_tangent_at_the_origin(opt: str, backend: str) -> None:
    x, v = np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0])
    assert iz.fwddiff(safe_norm, iz.Duplicated(x, v), 4, opt=opt, backend=backend) == (0.0, 0.0)
    value, tangent = iz.fwddiff(plain_norm, iz.Duplicated(x, v), 4, opt=opt, backend=backend)
    assert value == 0.0 and np.isnan(tangent)  # what the rule avoids
    x = np.array([0.5, -1.0, 2.0, 0.25])
    value, tangent = iz.fwddiff(safe_norm, iz.Duplicated(x, v), 4, opt=opt, backend=backend)
    assert value == pytest.approx(np.linalg.norm(x), rel=1e-15)
    assert tangent == pytest.approx(float(norm_gradient(x) @ v), rel=1e-14)


@by_variant
def test_calls_in_a_loop_use_the_forward_rule(opt: str, backend: str) -> None:
    x, a = np.array([0.3, -0.7, 1.1, 0.4]), 0.6
    v, da = np.array([0.2, 1.0, -0.5, 0.3]), 0.7
    value, tangent = iz.fwddiff(fwd_weighted, iz.Duplicated(x, v), iz.Duplicated(a, da), opt=opt, backend=backend)
    f = fwd_weighted.py_func
    assert value == pytest.approx(f(x, a), rel=1e-14)
    both = np.concatenate([x, [a]])
    expected = central_difference(lambda z: f(z[:4], z[4]), both, np.concatenate([v, [da]]), 1e-4)
    assert tangent == pytest.approx(float(expected), rel=1e-7)
    # x = 0, Const: the rule gets a zero tangent array and says 0, where the body's sqrt would give 0 * inf
    _, tangent = iz.fwddiff(fwd_weighted, np.zeros(4), iz.Duplicated(a, da), opt=opt, backend=backend)
    assert tangent == 0.0


def test_a_forward_rule_with_the_wrong_signature_is_a_type_error() -> None:
    @iz.kernel
    def square(x: f64) -> f64:
        return x * x

    @iz.kernel
    def square_jvp(x: f64, d_x: f64) -> f64:
        return x * x

    with pytest.raises(TypeError, match=r"must take \(x: f64, d_x: f64, d_return: f64\[\?\]\)"):
        square.defjvp(square_jvp)


def test_show_cache_lists_the_arrays_a_split_call_tapes() -> None:
    text = iz.show_cache(diffused_energy, ("dup", "active", "const"))
    line = next(line for line in text.splitlines() if line.startswith("%u "))
    assert "x size(u) per run of" in line and "(grows)" in line
    assert f":{_line_of(diffused_energy, 'diffuse(u, r)')}" in line


@by_variant
def test_hvp_through_a_split_call_matches_differences_of_the_gradient(opt: str, backend: str) -> None:
    """Forward over reverse through augmented_/reverse_ calls and their tapes; v is left as it was."""
    rng = np.random.default_rng(2)
    u, r, v = rng.uniform(-1, 1, 6), 0.3, rng.uniform(-1, 1, 6)
    v_given = v.copy()
    hv = iz.hvp(diffused_energy, argnums=0, opt=opt, backend=backend)(u.copy(), r, 3, v)
    assert np.array_equal(v, v_given)

    def gradient(z: np.ndarray) -> np.ndarray:
        return iz.grad(diffused_energy, argnums=0, opt="none", backend="interp")(z.copy(), r, 3)
    assert np.allclose(hv, central_difference(gradient, u, v, 1e-4), rtol=1e-7, atol=1e-9)


@iz.kernel(inline=False)
def blend_into(dst: Array[f64], src: Array[f64], n: i64, c: f64) -> None:
    for j in range(n):
        dst[j] = iz.sin(src[j] * c) + dst[j] * 0.5


@iz.kernel(inline=False)
def weighted_squares(v: Array[f64], n: i64, c: f64) -> f64:
    s = 0.0
    for j in range(n):
        s += v[j] * v[j] * c
    return s


@iz.kernel
def scratch_through_split_calls(x: Array[f64], n: i64, a: f64) -> f64:
    s = 0.0
    for i in range(n):
        t = iz.zeros(n, f64)  # local arrays allocated in a loop and a branch, passed to kernels not inlined
        blend_into(t, x, n, a + i)
        s += weighted_squares(t, n, a) + t[i]
        if x[i] > 0.5:
            w = iz.zeros(n, f64)
            blend_into(w, t, n, a)
            s += weighted_squares(w, n, 1.5)
    return s


@by_variant
def test_local_arrays_of_loops_and_branches_passed_to_split_calls(opt: str, backend: str) -> None:
    x, a = np.array([0.2, 0.9, 0.4, 0.7, 0.1]), 0.7
    gx, ga = iz.grad(scratch_through_split_calls, argnums=(0, 2), opt=opt, backend=backend)(x, 5, a)
    f = scratch_through_split_calls.py_func
    for k in range(5):
        assert gx[k] == pytest.approx(central_difference(lambda v: f(v, 5, a), x, np.eye(5)[k], 1e-4), rel=1e-7)
    fd_a = central_difference(lambda v: f(x, 5, v[0]), np.array([a]), np.ones(1), 1e-4)
    assert ga == pytest.approx(float(fd_a), rel=1e-7)


@by_variant
def test_a_const_array_passed_to_a_rule_gets_a_scratch_shadow(opt: str, backend: str) -> None:
    """x is Const: the rule writes its adjoint into scratch, which must not reach anything (nor leak into the
    next call's: the scratch is zeroed after each call). d/dw_k = |x| + cos(w_k x_k) x_k."""
    x, w = np.array([0.3, -0.7, 1.1, 0.4]), np.array([0.5, -0.2, 0.9])
    dw = np.zeros(3)
    iz.autodiff(weighted_norms, iz.Const(x), iz.Duplicated(w, dw), 4, opt=opt, backend=backend)
    assert np.allclose(dw, np.linalg.norm(x) + np.cos(w * x[:3]) * x[:3], rtol=1e-14)


# --- a split call whose result the kernel returns as it is (issue 62; Enzyme's rwrmeta.c, readwriteread.c) ---


@iz.kernel(inline=False)
def sum_of_squares(v: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += v[i] * v[i]
    return s


@iz.kernel
def squares_of_a_local_copy(x: Array[f64], n: i64) -> f64:
    t = iz.zeros(n, f64)
    for i in range(n):
        t[i] = 2.0 * x[i]
    return sum_of_squares(t, n)  # the call reads a local array and is the return value itself


@iz.kernel(inline=False)
def load_square(x: Array[f64]) -> f64:
    two = x[0]
    return two * two


@iz.kernel
def load_then_overwrite(x: Array[f64]) -> f64:
    """rwrmeta.c with an array for the pointer held in memory: the caller overwrites what the call read."""
    res = load_square(x)
    x[0] = 3.14159265
    return res


@iz.kernel(inline=False)
def f_read(x: Array[f64]) -> f64:
    return x[0] * x[0]


@iz.kernel(inline=False)
def g_write(x: Array[f64], product: f64) -> None:
    x[0] = x[0] * product


@iz.kernel(inline=False)
def h_read(x: Array[f64]) -> f64:
    return x[0]


@iz.kernel(inline=False)
def readwriteread_helper(x: Array[f64]) -> f64:
    product = f_read(x)
    g_write(x, product)
    return h_read(x)  # reads x after g_write wrote it


@iz.kernel
def readwriteread(x: Array[f64], ret: Array[f64]) -> None:
    ret[0] = readwriteread_helper(x)


@iz.kernel
def readwriteread_scaled(x: Array[f64], c: f64) -> f64:
    r = readwriteread_helper(x)
    x[0] = -1.0  # the caller overwrites the input after the call
    return r * c


def _reference_gradient(kernel: iz.Kernel, x: np.ndarray, *rest: object) -> np.ndarray:
    """d kernel / d x by central differences of the plain Python functions (x copied: the kernels write it)."""
    f = python_reference(kernel)
    return np.array([central_difference(lambda v: np.float64(f(v.copy(), *rest)), x, np.eye(x.size)[k], 1e-4)
                     for k in range(x.size)])


@by_variant
def test_a_split_call_of_a_local_array_returned_directly(opt: str, backend: str) -> None:
    x = np.array([0.5, -1.25, 2.0, 0.75])
    dx = np.zeros(4)
    value, _ = iz.autodiff(squares_of_a_local_copy, iz.Duplicated(x, dx), iz.Const(4), opt=opt, backend=backend)
    assert value == pytest.approx(python_reference(squares_of_a_local_copy)(x, 4), rel=1e-15)
    assert np.allclose(dx, _reference_gradient(squares_of_a_local_copy, x, 4), rtol=1e-7, atol=0)
    assert np.allclose(dx, 8.0 * x, rtol=1e-15)
    v = np.array([1.0, -2.0, 0.5, 3.0])
    assert np.allclose(iz.hvp(squares_of_a_local_copy, argnums=0, opt=opt, backend=backend)(x, 4, v), 8.0 * v,
                       rtol=1e-15)  # forward over reverse: the Hessian is 8 I


@by_variant
def test_rwrmeta_a_split_call_returned_after_the_caller_overwrites_its_input(opt: str, backend: str) -> None:
    x, dx = np.array([3.0]), np.zeros(1)
    value, _ = iz.autodiff(load_then_overwrite, iz.Duplicated(x, dx), opt=opt, backend=backend)
    assert value == 9.0 and x[0] == 3.14159265
    assert dx[0] == pytest.approx(float(_reference_gradient(load_then_overwrite, np.array([3.0]))[0]), rel=1e-7)
    assert dx[0] == 6.0  # Enzyme's expected value


@by_variant
def test_readwriteread_split_calls_that_read_write_and_read(opt: str, backend: str) -> None:
    x, dx = np.array([2.0]), np.zeros(1)
    ret, dret = np.zeros(1), np.ones(1)
    iz.autodiff(readwriteread, iz.Duplicated(x, dx), iz.Duplicated(ret, dret), opt=opt, backend=backend)
    assert ret[0] == 8.0 and x[0] == 8.0 and dret[0] == 0.0
    assert dx[0] == pytest.approx(3 * 2.0 * 2.0, rel=1e-14)  # Enzyme's expected value
    x, dx = np.array([2.0]), np.zeros(1)
    value, (dc,) = iz.autodiff(readwriteread_scaled, iz.Duplicated(x, dx), iz.Active(1.5), opt=opt, backend=backend)
    assert value == pytest.approx(python_reference(readwriteread_scaled)(np.array([2.0]), 1.5), rel=1e-15)
    assert dx[0] == pytest.approx(float(_reference_gradient(readwriteread_scaled, np.array([2.0]), 1.5)[0]), rel=1e-7)
    assert dc == pytest.approx(8.0, rel=1e-15)
