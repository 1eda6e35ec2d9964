"""Slices with traced bounds a static length apart, `x[t:t + k]` (windows): traced
as a take of k rows, so they interpret, differentiate, optimize and compile as numpy's
slice does wherever the window lies inside the axis, and raise an index error where
it does not (a window that numpy would cut short, or a negative start, which a take
would wrap). Other traced bounds are refused: the length would depend on the data."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close

X = np.arange(24.0).reshape(6, 4) * 0.25 - 2.0


def windows(x, t):
    """Every form of window at once, each beside the numpy slice it stands for."""
    return (x[t:t + 2], x[2 * t:2 * (t + 1)], x[:, t - 1:t + 1], x[t + 1:t + 3] * 2.0, x[t:t])


def numpy_windows(x, t):
    return (x[t:t + 2], x[2 * t:2 * (t + 1)], x[:, t - 1:t + 1], x[t + 1:t + 3] * 2.0, x[t:t])


@pytest.mark.parametrize("t", [1, 2])
def test_windows_are_numpys_slices_interpreted_and_compiled(t):
    program = egad.trace(windows, X, np.int64(1))
    compiled = build(program, cache=BuildCache(None))
    want = numpy_windows(X, t)
    assert_trees_close(egad.interpret(program, X, np.int64(t)), want, 0, "interpreted")
    assert_trees_close(compiled(X, np.int64(t)), want, 0, "compiled")


@pytest.mark.parametrize("t", [-1, -3, 5, 6])
def test_a_window_outside_the_axis_raises_an_index_error(t):
    """x[5:7] of 6 rows is one row in numpy and x[-1:1] none: neither is 2 long."""
    program = egad.trace(lambda x, t: x[t:t + 2] * 2.0, X, np.int64(1))
    compiled = build(program, cache=BuildCache(None))
    for run in (lambda: egad.interpret(program, X, np.int64(t)), lambda: compiled(X, np.int64(t))):
        with pytest.raises(egad.IndexOutOfRangeError, match=r"(?s)test_windows.py.*a window x\[t:t \+ k\] must lie"):
            run()


def sliding_sums(xs, h):
    def body(i, h):
        return enp.tanh(h * 0.5 + enp.sum(xs[i:i + 3], axis=0))

    return enp.sum(egad.fori_loop(0, xs.shape[0] - 2, body, h) ** 2)


def test_the_gradient_through_windows_in_a_loop_is_right():
    rng = np.random.default_rng(0)
    xs, h = rng.standard_normal((7, 4)), rng.standard_normal(4)
    program = egad.trace(sliding_sums, xs, h)
    gradient = egad.value_and_grad(program, wrt=(0, 1))
    value, (dxs, dh) = egad.interpret(gradient, xs, h)
    for arg, grad in ((xs, dxs), (h, dh)):
        numeric, eps = np.zeros_like(arg), 1e-6
        for index in np.ndindex(arg.shape):
            saved = arg[index]
            arg[index] = saved + eps
            up = egad.interpret(program, xs, h)
            arg[index] = saved - eps
            down = egad.interpret(program, xs, h)
            arg[index] = saved
            numeric[index] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, atol=1e-6)
    compiled = build(gradient, cache=BuildCache(None))
    assert_trees_close(compiled(xs, h), (value, (dxs, dh)), 1e-12, "compiled gradient")
    optimized = egad.optimize(program, wrt=(0, 1))
    assert_trees_close(optimized(xs, h), (value, (dxs, dh)), 1e-9, "optimized gradient")


def test_a_window_of_a_symbolic_axis_compiles_for_every_length():
    program = egad.trace(lambda x, t: x[t:t + 2] * 3.0, egad.Spec(("T", 3), "float64"), np.int64(0))
    compiled = build(program, cache=BuildCache(None))
    for length in (2, 3, 6):
        x = np.arange(length * 3.0).reshape(length, 3)
        for t in range(length - 1):
            np.testing.assert_array_equal(compiled(x, np.int64(t)), x[t:t + 2] * 3.0)
        with pytest.raises(egad.IndexOutOfRangeError):
            compiled(x, np.int64(length - 1))


@pytest.mark.parametrize("fn", [lambda x, t, u: x[t:5], lambda x, t, u: x[t:u], lambda x, t, u: x[t:2 * t],
                                lambda x, t, u: x[:t], lambda x, t, u: x[t:t + 2:2], lambda x, t, u: x[t:t - 2]],
                         ids=["static-stop", "two-bases", "two-scales", "open-start", "step", "backwards"])
def test_traced_bounds_not_a_static_length_apart_are_refused(fn):
    """x[t:t - 2] too: numpy's is empty, or not where t - 2 wraps around (x[1:-1])."""
    with pytest.raises(egad.UnsupportedError, match=r"(?s)unless the bounds are a static length apart.*"
                                                     r"test_windows.py.*x\[t:t \+ k\]"):
        egad.trace(fn, X, np.int64(1), np.int64(2))


def test_a_traced_step_and_a_window_inside_at_are_refused_for_what_they_are():
    """Both raised "unsupported operand NoneType: dtype object is not supported": `in`
    and tuple `==` compared a traced bound with None through the tracer's `==`. Found
    by fuzzing."""
    with pytest.raises(egad.UnsupportedError, match="slicing with traced bounds"):
        egad.trace(lambda x, t: x[::t], X, np.int64(2))
    with pytest.raises(egad.UnsupportedError, match=r"(?s)\.at\[<traced>:<traced>\] is not an index egad can update"
                                                     r".*test_windows.py"):
        egad.trace(lambda x, t: x.at[t:t + 2].set(0.0), X, np.int64(2))


@pytest.mark.parametrize("fn, x", [(lambda x, t: enp.sum(x[:, t:t + 2]), np.zeros((0, 3))),
                                   (lambda x, t: x[1::2, 2 * t:2 * (t + 1), None], np.ones((1, 4))),
                                   (lambda x, t: enp.sum(x[:, t]), np.zeros((0, 3)))],
                         ids=["empty-rows", "emptied-by-a-slice", "row-index"])
def test_an_index_out_of_range_raises_compiled_where_the_result_is_empty(fn, x):
    """An empty result is a constant to what reads it, so its op was dead code in the
    compiled program and its index check went with it: the interpreter raised, compiled
    code answered. Found by fuzzing."""
    program = egad.trace(fn, x, np.int64(0))
    compiled = build(program, cache=BuildCache(None))
    for run in (lambda: egad.interpret(program, x, np.int64(5)), lambda: compiled(x, np.int64(5))):
        with pytest.raises(egad.IndexOutOfRangeError):
            run()
    assert_trees_close(compiled(x, np.int64(0)), egad.interpret(program, x, np.int64(0)), 0, "in range")
