"""Fills with inf and NaN compile (TVM's legalization of full raises on them), and
reductions over an axis of static size 0 (what a loop that runs zero times stacks)
compute numpy's value: TVM's reduction blocks initialise their output in the first
trip of the reduction loop, so an empty one would leave the output unwritten
(tvm_bridge/reduction.py `empty_reduction`)."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.nn as enn
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache


def empty_reductions(x, empty, rows):
    return (enp.sum(empty, axis=0), enp.mean(empty, axis=0), x @ enp.transpose(empty) @ empty,
            enp.einsum("ti,tj->ij", empty, empty), x.at[rows].add(empty))


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # numpy's, in the interpreter: the mean is nan
def test_reductions_over_an_empty_axis_match_the_interpreter():
    x = np.ones((3, 4), np.float32)
    empty, rows = np.zeros((0, 4), np.float32), np.zeros((0,), np.int64)
    program = egad.trace(empty_reductions, x, empty, rows)
    got = build(program, cache=BuildCache(None))(x, empty, rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = egad.interpret(program, x, empty, rows)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def loop_that_never_runs(x, xs):
    h = egad.fori_loop(0, 0, lambda i, h: enp.tanh(xs[i % 2] + h), enp.tanh(x))
    return enp.sum(h * h)


def test_the_gradient_through_a_loop_that_never_runs_is_zero_for_what_only_the_loop_reads():
    x, xs = np.array([0.1, -0.2]), np.array([[0.9, -0.7], [-1.2, -0.6]])
    program = egad.value_and_grad(egad.trace(loop_that_never_runs, x, xs), wrt=(0, 1))
    (value, (dx, dxs)), (want_value, (want_dx, want_dxs)) = (build(program, cache=BuildCache(None))(x, xs),
                                                          egad.interpret(program, x, xs))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12)
    np.testing.assert_array_equal(dxs, np.zeros_like(xs))
    np.testing.assert_array_equal(want_dxs, np.zeros_like(xs))


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_a_non_finite_fill_compiles_as_a_full_and_as_a_splat_constant(value):
    x = np.ones(3, np.float32)
    program = egad.trace(lambda x: (x + enp.full((3,), value, np.float32), x * np.full(3, value, np.float32)), x)
    for got, want in zip(build(program, cache=BuildCache(None))(x), egad.interpret(program, x)):
        np.testing.assert_array_equal(got, want)


NO_IDENTITY = {"max": lambda x: enp.max(x, axis=0), "min": lambda x: enp.min(x, axis=0),
               "argmax": lambda x: enp.argmax(x, axis=0), "max of all": lambda x: enp.max(x)}


@pytest.mark.parametrize("name", NO_IDENTITY)
def test_a_reduction_without_identity_over_a_symbolic_axis_of_size_0_raises_like_the_interpreter(name):
    """max, min and argmax of nothing have no value: compiled code returned the lowest
    float, or memory never written, where the interpreter raises."""
    program = egad.trace(NO_IDENTITY[name], egad.Spec(("T", 5), "float32"))
    compiled = build(program, cache=BuildCache(None))
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    np.testing.assert_array_equal(compiled(x), egad.interpret(program, x))
    empty = np.zeros((0, 5), np.float32)
    with pytest.raises(egad.ShapeError, match="zero-size array|empty sequence") as interpreted:
        egad.interpret(program, empty)
    with pytest.raises(egad.ShapeError) as raised:
        compiled(empty)
    assert str(raised.value).startswith(str(interpreted.value))  # the op, the message and the user's line


def empty_results(a, z):
    return (a[:, 3:1], enp.sum(a[1:3:-1]) + enp.sum(a), enp.reshape(z, (0, 6)), enp.expand_dims(z, 0) + 1,
            enp.sum(z[0].T @ z[1]) + enp.sum(enp.mean(z, axis=0)))


def test_ops_whose_results_are_empty_compile_as_empty_constants():
    """A static size-0 result is an empty constant: TVM rejects an empty strided_slice's
    bounds and a reshape to a shape holding 0 (which Relax reads as "keep that dim")."""
    a, z = np.arange(8.0).reshape(2, 4), np.zeros((2, 0, 3))
    program = egad.trace(empty_results, a, z)
    for got, want in zip(build(program, cache=BuildCache(None))(a, z), egad.interpret(program, a, z)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    gradient = egad.grad(egad.trace(lambda a, z: empty_results(a, z)[1] + empty_results(a, z)[4], a, z), wrt=(0, 1))
    for got, want in zip(build(gradient, cache=BuildCache(None))(a, z), egad.interpret(gradient, a, z)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_an_index_whose_result_is_empty_is_still_checked():
    program = egad.trace(lambda x, i: x[i], np.zeros((5, 0), np.float32), np.int64(0))
    compiled = build(program, cache=BuildCache(None))
    assert compiled(np.zeros((5, 0), np.float32), np.int64(4)).shape == (0,)
    with pytest.raises(egad.IndexOutOfRangeError):
        compiled(np.zeros((5, 0), np.float32), np.int64(7))


NN_OVER_NOTHING = {"softmax": lambda x: enn.softmax(x, axis=-1), "log_softmax": lambda x: enn.log_softmax(x, axis=-1),
                   "logsumexp": lambda x: enn.logsumexp(x, axis=-1)}


@pytest.mark.parametrize("name", NN_OVER_NOTHING)
def test_softmax_and_logsumexp_over_nothing_are_empty_and_minus_inf_as_in_jax(name):
    """The interpreter raised numpy's "zero-size array to reduction operation maximum"
    where compiled code (static or symbolic) gave jax's answers."""
    fn = NN_OVER_NOTHING[name]
    x = np.zeros((3, 0))
    expected = np.full(3, -np.inf) if name == "logsumexp" else x
    with np.errstate(divide="ignore"):
        interpreted = egad.interpret(egad.trace(fn, x), x)
    static = build(egad.trace(fn, x), cache=BuildCache(None))(x)
    symbolic = build(egad.trace(fn, egad.Spec((3, "M"), "float64")), cache=BuildCache(None))(x)
    for result in (interpreted, static, symbolic):
        np.testing.assert_array_equal(result, expected)


def reshaped_to_another_symbol(x, y):
    return enp.sum(enp.reshape(x, (y.shape[0], 2)))


def filled_short(x):
    return enp.sum(enp.ones((x.shape[0] - 3, 2))) + enp.sum(enp.zeros((x.shape[0], 2)))


@pytest.mark.parametrize("fn, specs, calls", [
    (reshaped_to_another_symbol, [("T", 2), ("U", 1)], [((3, 2), (3, 1)), ((3, 2), (2, 1)), ((0, 2), (1, 1))]),
    (filled_short, [("T",)], [((5,),), ((3,),), ((1,),)]),
])
def test_shapes_from_sizes_that_do_not_fit_raise_like_the_interpreter(fn, specs, calls):
    """A reshape to another symbol's element count returned a value (or, from 0 elements,
    killed the process with SIGFPE) and a negative size made an empty array, where numpy
    and the interpreter raise. Found by fuzzing."""
    program = egad.trace(fn, *(egad.Spec(shape, "float64") for shape in specs))
    compiled = build(program, cache=BuildCache(None))
    for shapes in calls:
        args = [np.ones(shape) for shape in shapes]
        try:
            want = egad.interpret(program, *args)
        except egad.ShapeError as interpreted:
            with pytest.raises(egad.ShapeError) as raised:
                compiled(*args)
            assert str(raised.value).startswith(str(interpreted).split("\n")[0])
        else:
            np.testing.assert_array_equal(compiled(*args), want)


def test_sizes_known_to_fit_are_not_checked_on_the_host():
    from egad.tvm_bridge.host_checks import host_check_sites

    def fills(x):  # (a reshape to -1 is checked: (T, 3) to (-1, 2) needs an even T)
        return enp.sum(enp.zeros((x.shape[0], 3))) + enp.sum(enp.arange(1, x.shape[0])) + enp.sum(
            enp.reshape(x, (x.shape[0], 1, 2)))

    assert host_check_sites(egad.trace(fills, egad.Spec(("T", 2), "float64"))) == []


def _empty_at_run_time(v, M):
    return (enp.any(v > 0), enp.all(v > 0), v @ v, enp.sum(v * 2.0), M.T @ M, enp.any(M > 0, axis=0),
            enp.all(M > 0, axis=0), enp.mean(M, axis=1))


def test_reductions_over_a_symbolic_axis_empty_at_run_time_give_their_identity():
    """TVM writes a reduction's initial value in its first trip, so over an axis that a
    symbolic T makes empty at run time a kernel no rule scheduled kept whatever memory
    held (`v @ v` was 4.7e-310), and `any` was the max of nothing, INT_MIN, cast to
    True. Found by fuzzing."""
    program = egad.trace(_empty_at_run_time, egad.Spec(("T",), "float64"), egad.Spec(("T", 3), "float64"))
    compiled = build(program, cache=BuildCache(None))
    for length in (0, 1, 5):
        v, M = np.linspace(-1.0, 1.0, length), np.linspace(0.5, 1.5, 3 * length).reshape(length, 3)
        with np.errstate(invalid="ignore"):
            want = _empty_at_run_time(v, M)
        for got, expected in zip(compiled(v, M), want):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
