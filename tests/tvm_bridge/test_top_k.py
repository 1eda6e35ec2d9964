"""egad.nn.top_k at its edges, interpreted and compiled: NaN ranks above +inf (as jax,
torch and numpy's sort; TVM's topk compares with `>`, which a NaN breaks), the most
negative integer is the smallest, and the gradient over a symbolic axis."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.nn as enn
import egad.numpy as enp

NAN, INF = np.nan, np.inf


def _both(x, k):
    """(interpreted, compiled) top_k(x, k)."""
    program = egad.trace(lambda a: enn.top_k(a, k), x)
    return egad.interpret(program, x), egad.optimize(program, wrt=None, rules=())(x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("x, k, values, indices", [
    ([1.0, NAN, 3.0], 2, [NAN, 3.0], [1, 2]),
    ([1.0, NAN, 3.0], 3, [NAN, 3.0, 1.0], [1, 2, 0]),
    ([NAN, -INF, INF, 0.0], 3, [NAN, INF, 0.0], [0, 2, 3]),
    ([3.0, NAN, 3.0, NAN], 4, [NAN, NAN, 3.0, 3.0], [1, 3, 0, 2]),
    ([-NAN, 1.0, -INF], 2, [NAN, 1.0], [0, 1]),
    ([-0.0, 0.0, -1.0], 2, [0.0, 0.0], [0, 1]),  # -0.0 == 0.0: the lower index first
    ([1e-30, -1e-30, 0.0], 3, [1e-30, 0.0, -1e-30], [0, 2, 1]),
])
def test_nan_ranks_highest_and_ties_keep_the_lower_index(dtype, x, k, values, indices):
    x = np.array(x, dtype)
    for values_got, indices_got in _both(x, k):
        np.testing.assert_array_equal(values_got, np.array(values, dtype))
        np.testing.assert_array_equal(indices_got, indices)


def test_subnormals_order_by_value():
    x = np.array([5e-324, -5e-324, 0.0, -1e-310, 1e-310])
    for values, indices in _both(x, 5):
        np.testing.assert_array_equal(indices, [4, 0, 2, 1, 3])
        np.testing.assert_array_equal(values, x[[4, 0, 2, 1, 3]])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_the_most_negative_integer_is_the_smallest(dtype):
    lowest, highest = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = np.array([lowest, -5, highest, -7, lowest], dtype)
    for values, indices in _both(x, 5):
        np.testing.assert_array_equal(values, [highest, -5, -7, lowest, lowest])
        np.testing.assert_array_equal(indices, [2, 1, 3, 0, 4])


def test_the_gradient_over_a_symbolic_axis():
    def loss(a):
        values, _ = enn.top_k(a, 2)
        return enp.sum(values * values)

    program = egad.trace(loss, egad.Spec((2, "M"), "float64"))
    gradient = egad.grad(program)
    compiled = egad.optimize(program)
    for m in (2, 3, 6):
        a = np.random.default_rng(m).standard_normal((2, m))
        top = np.argsort(-a, axis=-1)[:, :2]
        expected = np.zeros_like(a)
        np.put_along_axis(expected, top, 2 * np.take_along_axis(a, top, axis=-1), axis=-1)
        (interpreted,) = egad.interpret(gradient, a)
        np.testing.assert_allclose(interpreted, expected, rtol=1e-12)
        np.testing.assert_allclose(compiled(a)[1][0], expected, rtol=1e-12)


def test_top_k_of_a_symbolic_axis_shorter_than_k_raises_like_numpy_eagerly():
    """A symbolic last axis shorter than k at run time: the interpreter returned arrays
    shorter than the program's (k,) and the compiled code read past the end (garbage,
    or a segfault). Both raise now, as egad.nn.top_k does eagerly. Found by fuzzing."""
    program = egad.trace(lambda v: egad.nn.top_k(v, 2), egad.Spec(("T",), "float64"))
    compiled = egad.optimize(program, wrt=None, rules=())
    np.testing.assert_array_equal(compiled(np.arange(3.0))[0], [2.0, 1.0])
    for length in (1, 0):
        for run in (lambda v: egad.interpret(program, v), compiled):
            with pytest.raises(egad.ShapeError, match=f"at least k elements along the last axis: k=2, {length} given"):
                run(np.arange(float(length)))
