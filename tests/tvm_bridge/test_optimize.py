"""`egad.optimize` on the unoptimized path: value and gradients from the compiled
program agree with the interpreter and with finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp


def _loss(W, xs, h0):
    def step(t, h):
        return enp.tanh(xs[t] @ W + h)

    h = egad.fori_loop(0, xs.shape[0], step, h0)
    return enp.sum(h * h)


RNG = np.random.default_rng(0)
W, XS, H0 = RNG.standard_normal((3, 3)) * 0.5, RNG.standard_normal((6, 2, 3)), np.zeros((2, 3))


def test_optimize_returns_value_and_gradients():
    program = egad.trace(_loss, W, XS, H0)
    f = egad.optimize(program, wrt=(0, 1), target="llvm", rules=())
    value, (dW, dxs) = f(W, XS, H0)
    expected_value, (expected_dW, expected_dxs) = egad.interpret(egad.value_and_grad(program, wrt=(0, 1)), W, XS, H0)
    np.testing.assert_allclose(value, expected_value, rtol=1e-12)
    np.testing.assert_allclose(dW, expected_dW, rtol=1e-10)
    np.testing.assert_allclose(dxs, expected_dxs, rtol=1e-10)
    eps, k = 1e-6, (1, 2)
    shifted = [W.copy(), W.copy()]
    shifted[0][k] += eps
    shifted[1][k] -= eps
    numeric = (egad.interpret(program, shifted[0], XS, H0) - egad.interpret(program, shifted[1], XS, H0)) / (2 * eps)
    assert abs(dW[k] - numeric) <= 1e-6 * max(1.0, abs(numeric))
    assert "R.function" in f.relax_text and "builds: 1" in f.report()


def test_optimize_without_wrt_returns_the_value():
    program = egad.trace(_loss, W, XS, H0)
    np.testing.assert_allclose(egad.optimize(program, wrt=None)(W, XS, H0), egad.interpret(program, W, XS, H0))


def test_symbolic_length_never_rebuilds():
    program = egad.trace(_loss, W, egad.Spec(("T", 2, 3), "float64"), H0)
    f = egad.optimize(program, wrt=(0,))
    for T in (1, 4, 9):
        xs = RNG.standard_normal((T, 2, 3))
        value, (dW,) = f(W, xs, H0)
        np.testing.assert_allclose(value, egad.interpret(program, W, xs, H0), rtol=1e-12)
    assert f.builds == 1


def test_unsupported_options_are_refused():
    program = egad.trace(_loss, W, XS, H0)
    with pytest.raises(egad.ArgumentError, match="not a rule family"):
        egad.optimize(program, rules=[42])
    with pytest.raises(egad.ArgumentError, match="no rule family 'algebre'"):
        egad.optimize(program, rules=["algebre"])
    with pytest.raises(egad.UnsupportedError, match="target"):
        egad.optimize(program, target="tpu")
    with pytest.raises(egad.ArgumentError, match="not a collection of rule families"):
        egad.optimize(program, rules=3)


@pytest.mark.parametrize("wrt, error", [(1.0, "neither an argument index"), (5, "not a positional argument index"),
                                        ((0, "1"), "not a positional argument index")])
def test_a_wrong_wrt_is_refused_when_optimizing_not_at_the_first_call(wrt, error):
    with pytest.raises(egad.ArgumentError, match=error):
        egad.optimize(egad.trace(_loss, W, XS, H0), wrt=wrt)


@pytest.mark.parametrize("example_args, error", [((W, XS), "takes 3 positional arguments, got 2"),
                                                 ((W.astype(np.float32), XS, H0), "float32"),
                                                 (W, "not a tuple")])
def test_example_args_that_do_not_fit_the_program_are_refused(example_args, error):
    """Else both builds fail on them alike, which the check reads as agreement: the
    optimized program would be kept without having been checked."""
    with pytest.raises(egad.ArgumentError, match=error):
        egad.optimize(egad.trace(_loss, W, XS, H0), example_args=example_args)


def test_symbolic_shapes_are_lowered_without_rebuilding():
    def f(xs, h0):
        T = xs.shape[0]
        h = egad.fori_loop(0, T, lambda t, h: enp.tanh(xs[t] + h), h0)
        ramp = enp.zeros((T, 3)) + enp.arange(T)[:, None] * 0.5  # shapes built from the traced length
        return enp.sum(h) + enp.sum(ramp * xs) + enp.sum(xs.reshape(-1) ** 2)

    program = egad.trace(f, egad.Spec(("T", 3), "float64"), np.zeros(3))
    optimized = egad.optimize(program, wrt=(0, 1))
    for T in (1, 3, 6):
        xs = RNG.standard_normal((T, 3))
        value, (dxs, dh0) = optimized(xs, np.zeros(3))
        expected, (expected_dxs, expected_dh0) = egad.interpret(egad.value_and_grad(program, wrt=(0, 1)), xs,
                                                                 np.zeros(3))
        np.testing.assert_allclose(value, expected, rtol=1e-12)
        np.testing.assert_allclose(dxs, expected_dxs, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dh0, expected_dh0, rtol=1e-10, atol=1e-12)
    assert optimized.builds == 1


def test_new_concrete_shape_respecializes_once_per_shape():
    program = egad.trace(_loss, W, XS, H0)  # T=6, batch 2: static dims
    f = egad.optimize(program, wrt=(0,))
    f(W, XS, H0)
    for T, batch in ((3, 2), (3, 5), (3, 2), (6, 2)):
        xs, h0 = RNG.standard_normal((T, batch, 3)), np.zeros((batch, 3))
        value, (dW,) = f(W, xs, h0)
        retraced = egad.value_and_grad(egad.trace(_loss, W, xs, h0), wrt=(0,))
        expected_value, (expected_dW,) = egad.interpret(retraced, W, xs, h0)
        np.testing.assert_allclose(value, expected_value, rtol=1e-12)
        np.testing.assert_allclose(dW, expected_dW, rtol=1e-10)
    assert f.builds == 3  # (6, 2), (3, 2), (3, 5)
    assert "builds: 3" in f.report()


def test_symbolic_dims_stay_symbolic_when_other_dims_respecialize():
    program = egad.trace(_loss, W, egad.Spec(("T", 2, 3), "float64"), H0)
    f = egad.optimize(program, wrt=(0,))
    for T in (2, 7):
        for batch in (2, 4):
            xs, h0 = RNG.standard_normal((T, batch, 3)), np.zeros((batch, 3))
            value, _ = f(W, xs, h0)
            np.testing.assert_allclose(value, egad.interpret(egad.trace(_loss, W, xs, h0), W, xs, h0), rtol=1e-12)
    assert f.builds == 2  # one per batch size; T never rebuilds


def test_a_changed_static_argument_is_traced_again():
    def scaled(x, k):
        return enp.sum(x * k)

    f = egad.optimize(egad.trace(scaled, np.ones(3), 2.0, static_argnums=(1,)), wrt=(0,))
    assert f(np.ones(3), 2.0)[0] == 6.0 and f(np.ones(3), 5.0)[0] == 15.0 and f(np.ones(3), 2.0)[0] == 6.0
    assert f.builds == 2


def test_static_floats_are_told_apart_by_their_bits():
    """Static arguments were compared with ==: a call with -0.0 ran the build for 0.0
    (inf where -inf is right), and a static NaN was refused on the very value it was
    traced with. Found by fuzzing."""
    def divided(x, s):
        return enp.sum(x / s)

    f = egad.optimize(egad.trace(divided, np.ones(3), 0.0, static_argnums=(1,)), wrt=None, rules=())
    with np.errstate(divide="ignore"):
        assert f(np.ones(3), 0.0) == np.inf and f(np.ones(3), -0.0) == -np.inf
    assert f.builds == 2
    traced_with_nan = egad.trace(divided, np.ones(3), float("nan"), static_argnums=(1,))
    assert np.isnan(egad.interpret(traced_with_nan, np.ones(3), float("nan")))
    assert np.isnan(egad.optimize(traced_with_nan, wrt=None, rules=())(np.ones(3), float("nan")))
    with pytest.raises(egad.ArgumentError, match="was 0.0 when traced, got -0.0"):
        egad.interpret(egad.trace(divided, np.ones(3), 0.0, static_argnums=(1,)), np.ones(3), -0.0)


def test_a_call_that_does_not_fit_the_program_is_refused_before_anything_is_built():
    """A call with the wrong number of arguments or pytree structure ran the whole
    pipeline (the e-graph, two builds) before raising, and counted as a build. Found
    by fuzzing."""
    f = egad.optimize(egad.trace(_loss, W, XS, H0), wrt=(0,))
    with pytest.raises(egad.ArgumentError, match="program _loss takes 3 positional arguments, got 2"):
        f(W, XS)
    with pytest.raises(egad.ArgumentError, match="argument 0 has structure"):
        f([W, W], XS, H0)
    assert f.builds == 0 and not f.optimizations


def test_a_program_that_cannot_be_traced_again_reports_the_shape():
    gradient = egad.grad(egad.trace(_loss, W, XS, H0))  # made by a transformation: no function to retrace
    f = egad.optimize(gradient, wrt=None)
    np.testing.assert_allclose(f(W, XS, H0), egad.interpret(gradient, W, XS, H0), rtol=1e-12)
    with pytest.raises(egad.ArgumentError, match=r"shape \(4, 2, 3\)"):
        f(W, XS[:4], H0)


def test_a_spec_fixes_the_rank_a_new_call_may_have():
    f = egad.optimize(egad.trace(_loss, W, egad.Spec(("T", 2, 3), "float64"), H0), wrt=(0,))
    with pytest.raises(egad.ArgumentError, match=r"argument 1 has shape \(6, 2\): rank 2 where rank 3 was expected"):
        f(W, XS[:, :, 0], H0)


def _features(xs):
    return enp.sum(xs.reshape((xs.shape[0], xs.shape[1] * xs.shape[2])))  # needs rank 3


def test_a_function_that_fails_on_new_shapes_is_reported_with_them_and_its_line():
    f = egad.optimize(egad.trace(_features, XS), wrt=None)
    with pytest.raises(egad.ArgumentError, match=r"(?s)argument 0 has shape \(6, 2\), traced as f64\[6,2,3\].*"
                                                 r"IndexError.*test_optimize\.py:\d+ \(in _features\)"):
        f(XS[:, :, 0])


def test_an_egad_error_on_new_shapes_says_which_shapes_and_a_non_array_is_refused():
    f = egad.optimize(egad.trace(_loss, W, XS, H0), wrt=None)
    with pytest.raises(egad.ShapeError, match=r"(?s)test_optimize\.py:\d+.*while tracing _loss again for new argument "
                                              r"shapes: argument 0 has shape \(\), traced as f64\[3,3\]"):
        f(1.0, XS, H0)  # the user's matmul fails on a scalar weight
    with pytest.raises(egad.ArgumentError, match="argument 0: str is not an array"):
        f("W", XS, H0)


class _DLPackOnly:
    """An array offered only through DLPack (like a torch or cupy tensor)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    @property
    def shape(self):
        return self._array.shape


class _DLPackWithoutShape(_DLPackOnly):
    shape = property(lambda self: (_ for _ in ()).throw(AttributeError("no shape")))


@pytest.mark.parametrize("offered", [_DLPackOnly, _DLPackWithoutShape], ids=["with-shape", "dlpack-only"])
def test_dlpack_arguments_are_accepted(offered):
    """An array with __dlpack__ and no .shape was taken for a scalar: traced again for
    shape () and refused with a misleading error about the user's code. Found by fuzzing."""
    program = egad.trace(_loss, W, XS, H0)
    f = egad.optimize(program, wrt=(0,))
    value, (dW,) = f(offered(W), offered(XS), H0)
    expected_value, (expected_dW,) = egad.interpret(egad.value_and_grad(program), W, XS, H0)
    np.testing.assert_allclose(value, expected_value, rtol=1e-12)
    np.testing.assert_allclose(dW, expected_dW, rtol=1e-10)


def test_dlpack_arguments_reach_a_while_loops_trip_observation_and_the_interpreter():
    """optimize interprets a program with while loops on its first call's arguments
    (egad/trip_counts.py): arrays offered only through DLPack, or TVM tensors, are
    read there as they are by the compiled program."""
    import tvm

    def loss(W, x):
        h, _ = egad.while_loop(lambda s: s[1] < 5.0, lambda s: (enp.tanh(s[0] @ W), s[1] + 1.0), (x, 0.0))
        return enp.sum(h * h)

    x = np.ones((2, 3))
    program = egad.trace(loss, W, x)
    expected_value, (expected_dW,) = egad.interpret(egad.value_and_grad(program), W, x)
    assert egad.interpret(program, _DLPackOnly(W), tvm.runtime.tensor(x)) == pytest.approx(expected_value)
    value, (dW,) = egad.optimize(program, wrt=(0,))(_DLPackOnly(W), tvm.runtime.tensor(x))
    np.testing.assert_allclose(value, expected_value, rtol=1e-12)
    np.testing.assert_allclose(dW, expected_dW, rtol=1e-10)


def test_arguments_and_results_are_never_aliased_wrongly():
    import tvm

    def f(x, k, y):
        return x, x * k + y, y

    program = egad.trace(f, np.ones(16), 2.0, np.zeros(16), static_argnums=(1,))
    compiled = egad.optimize(program, wrt=None)
    x = np.zeros(64 + 16)[8:24]  # a view, not 64-byte aligned in general
    y = tvm.runtime.tensor(np.arange(16.0))  # already a TVM tensor: passed through
    out_x, combined, out_y = compiled(x, 2.0, y)
    np.testing.assert_array_equal(combined, np.arange(16.0))
    out_x[:] = 5.0
    out_y[:] = 7.0  # results are the caller's: writing them changes no argument
    assert x.max() == 0.0 and y.numpy()[3] == 3.0
    np.testing.assert_array_equal(compiled(x, 2.0, y)[1], np.arange(16.0))


def test_tvm_tensor_views_are_read_from_their_offset():
    """A TVM tensor that is a view into a larger one (a byte offset, maybe not 64-byte
    aligned) is read where it points, as the interpreter reads it: re-based, or copied
    when misaligned; never read from the start of its storage."""
    import tvm

    program = egad.trace(lambda x, y: x * 2.0 + y, np.zeros(16, np.float32), np.zeros((2, 16), np.float32))
    compiled = egad.optimize(program, wrt=None)
    table = tvm.runtime.tensor(np.arange(64 * 16, dtype=np.float32).reshape(64, 16))
    pairs = tvm.runtime.tensor(np.arange(64 * 16, dtype=np.float32).reshape(32, 2, 16))
    for offset in (5 * 64, 5 * 64 + 4, 7 * 64 + 16):  # 64-byte aligned rows, and two that are not
        x = table._create_view((16,), "float32", offset)
        y = pairs._create_view((2, 16), "float32", offset)
        want = egad.interpret(program, x, y)
        np.testing.assert_array_equal(want, np.from_dlpack(x) * 2.0 + np.from_dlpack(y))
        np.testing.assert_array_equal(compiled(x, y), want)


def test_a_compiled_while_loop_stops_at_max_iters():
    from ..ad.test_tapes import bounded_growth

    x = np.array([0.3, 0.7])
    program, _ = bounded_growth(x, max_iters=3)
    want_value, (want_grad,) = egad.interpret(egad.value_and_grad(program, wrt=(0,)), x)
    value, (grad,) = egad.optimize(program, wrt=(0,), rules=())(x)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10)
