"""Compiled elementwise ops agree with the interpreter (numpy) on their edge inputs:
NaN through max/min/sign/argmax/!= and x - x, x == x, numpy's float divmod, integer division by 0
and INT_MIN // -1 without a trap, integer powers, comparisons of bools, any/all over
an empty axis and float32 exp just below its overflow (tvm_bridge/elementwise.py,
tvm_bridge/reduction.py)."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache

FLOATS = ["float32", "float64"]
INTS = ["int32", "int64"]


def compiled_and_interpreted(fn, *args):
    """(compiled results, interpreter results) of fn traced at args, as tuples."""
    program = egad.trace(fn, *args)
    got = build(program, cache=BuildCache(None))(*args)
    with np.errstate(all="ignore"):
        want = egad.interpret(program, *args)
    as_tuple = (lambda r: r if isinstance(r, tuple) else (r,))
    return as_tuple(got), as_tuple(want)


def assert_same(got, want, numpy_results):
    """Compiled == interpreter == numpy, NaN where NaN, and the sign of zeros too."""
    for g, w, n in zip(got, want, numpy_results, strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, n)
        assert np.asarray(g).dtype == np.asarray(n).dtype
        if np.asarray(g).dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(n))


def with_numpy(fn, *args):
    with np.errstate(all="ignore"):
        result = fn(np, *args)
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_power_matches_numpy_wrapping_included(dtype):
    base = np.array([3, -3, 2, 0, 1, -1, 7, -2, 5], dtype)
    exponent = np.array([0, 3, 5, 0, 60, 61, 41, 63 if dtype == "int64" else 31, 20], dtype)

    def fn(xp, a, b):
        return a ** 2, 2 ** b, a ** b, xp.power(a, b)

    got, want = compiled_and_interpreted(lambda a, b: fn(enp, a, b), base, exponent)
    assert_same(got, want, with_numpy(fn, base, exponent))


def test_a_negative_integer_exponent_raises_the_interpreters_error():
    base, exponent = np.array([2, 3], "int64"), np.array([1, -1], "int64")
    program = egad.trace(lambda a, b: a ** b, base, exponent)
    with pytest.raises(egad.ShapeError, match="pow: Integers to negative integer powers are not allowed"):
        egad.interpret(program, base, exponent)
    compiled = build(program, cache=BuildCache(None))
    with pytest.raises(egad.ShapeError, match="(?s)pow: Integers to negative integer powers are not allowed.*<lambda>"):
        compiled(base, exponent)
    np.testing.assert_array_equal(compiled(base, np.array([1, 2], "int64")), [2, 9])


@pytest.mark.parametrize("dtype", FLOATS)
def test_maximum_minimum_clip_and_sign_propagate_nan(dtype):
    x = np.array([np.nan, 1.0, -np.inf, 2.0, np.inf, -0.0, 0.5], dtype)
    y = np.array([0.5, np.nan, np.nan, 3.0, -np.inf, 0.0, 0.5], dtype)

    def fn(xp, a, b):
        return (xp.maximum(a, b), xp.minimum(a, b), xp.maximum(a, 0.5), xp.minimum(0.5, a), xp.clip(a, -1, 1),
                xp.sign(a), xp.sign(b))

    got, want = compiled_and_interpreted(lambda a, b: fn(enp, a, b), x, y)
    for g, w, n in zip(got, want, with_numpy(fn, x, y)):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, n)  # (which zero max(-0.0, 0.0) is, numpy leaves to the hardware)


def test_gradients_through_maximum_minimum_and_clip_match_the_interpreter():
    x = np.array([-2.0, -0.5, 0.3, 1.0, 2.5, 0.5])
    y = np.array([0.0, -0.5, 1.0, -1.0, 2.5, 0.7])

    def loss(a, b):
        return enp.sum(enp.maximum(a, b) * 3.0 + enp.minimum(a, b) * a + enp.clip(a * b, -1.0, 1.0) ** 2)

    program = egad.value_and_grad(egad.trace(loss, x, y), wrt=(0, 1))
    (value, grads), (want_value, want_grads) = build(program, cache=BuildCache(None))(x, y), egad.interpret(
        program, x, y)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_argmax_is_the_first_nan_as_in_numpy(dtype):
    x = np.array([[1.0, np.nan, 0.0, np.nan], [np.nan, 5.0, 3.0, 1.0], [2.0, 7.0, 7.0, -1.0],
                  [-np.inf, -np.inf, -np.inf, -np.inf], [0.0, -np.inf, np.inf, np.inf]], dtype)

    def fn(xp, a):
        return xp.argmax(a, axis=1), xp.argmax(a, axis=0), xp.argmax(a[2])

    got, want = compiled_and_interpreted(lambda a: fn(enp, a), x)
    assert_same(got, want, [np.asarray(r, "int64") for r in with_numpy(fn, x)])


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_argmax_of_a_row_of_the_least_value_is_its_first_index(dtype):
    """TVM's argmax starts from (-1, the dtype's least value) and a row of only that
    value never beats it: argmax([INT_MIN, INT_MIN]) was -1. Found by fuzzing."""
    least, most = (False, True) if dtype == "bool" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    x = np.array([[least, least, least], [least, most, most], [most, least, most]], dtype)

    def fn(xp, a):
        return xp.argmax(a, axis=1), xp.argmax(a, axis=0)

    got, want = compiled_and_interpreted(lambda a: fn(enp, a), x)
    assert_same(got, want, [np.asarray(r, "int64") for r in with_numpy(fn, x)])


@pytest.mark.parametrize("shape", [(50, 3), (64, 8), (7, 16, 5), (2, 3, 64)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32"])
def test_argmax_max_and_min_over_every_axis_match_numpy(shape, dtype):
    """A reduction of two values at once (argmax's index and value; float max/min's
    value and NaN count) vectorized across a contiguous output axis came out wrong:
    argmax over axis 0 of a (50, 3) array gave one index for every column. Found by
    fuzzing."""
    x = (np.random.default_rng(0).standard_normal(shape) * 10).astype(dtype)
    for axis in range(len(shape)):
        def fn(xp, a):
            return xp.argmax(a, axis=axis), xp.max(a, axis=axis), xp.min(a, axis=axis)

        got, want = compiled_and_interpreted(lambda a: fn(enp, a), x)
        assert_same(got, want, [np.asarray(r) for r in with_numpy(fn, x)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_not_equal_is_unordered_and_so_is_float_truthiness(dtype):
    a = np.array([np.nan, 1.0, 2.0, np.nan, 0.0, -0.0], dtype)
    b = np.array([np.nan, np.nan, 2.0, 1.0, -0.0, 1.0], dtype)

    def fn(xp, a, b):
        return (a != b, xp.not_equal(a, 1.0), xp.where(a, 1.0, 0.0), xp.any(a[:1]), xp.all(b[:2]),
                xp.logical_not(a), xp.logical_or(a, False), xp.logical_and(a, b))

    got, want = compiled_and_interpreted(lambda a, b: fn(enp, a, b), a, b)
    assert_same(got, want, [np.asarray(r) for r in with_numpy(fn, a, b)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_value_minus_or_compared_with_itself_keeps_nan(dtype):
    """Fused with what reads them, x - x and x == x were folded by TVM's simplifier
    (A[i] - A[i] to 0, A[i] == A[i] to True): numpy's are NaN beside inf and NaN, and
    False for NaN, on which where(x == x, x, 0), the idiom that clears NaNs, rests.
    Found by fuzzing."""
    x = np.array([np.inf, np.nan, 1.0, -np.inf, -0.0, 3.0], dtype)

    def fn(xp, x):
        return (xp.sum(x - x), (x - x) + 1.0, xp.where(x == x, x, 0.0), xp.exp(x - x), x == x, x - x)

    got, want = compiled_and_interpreted(lambda x: fn(enp, x), x)
    numpy_results = [np.asarray(r) for r in with_numpy(fn, x)]
    for g, w, n in zip(got, want, numpy_results, strict=True):  # NaN's sign bit is not numpy's to promise
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, n)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_floor_divide_and_mod_are_numpys_divmod(dtype):
    special = [0.0, -0.0, 1.0, -1.0, 0.1, -0.1, 0.2, 2.0, 3.0, -7.5, 1e-10, np.finfo(dtype).max, np.inf, -np.inf,
               np.nan]
    rng = np.random.default_rng(1)
    a = np.concatenate([np.repeat(special, len(special)), rng.standard_normal(500) * 10]).astype(dtype)
    b = np.concatenate([np.tile(special, len(special)), rng.standard_normal(500)]).astype(dtype)

    def fn(xp, a, b):
        return xp.floor_divide(a, b), xp.mod(a, b), a // 0.1, a % 0.1

    got, want = compiled_and_interpreted(lambda a, b: fn(enp, a, b), a, b)
    assert_same(got, want, with_numpy(fn, a, b))


@pytest.mark.parametrize("dtype", INTS)
def test_integer_division_by_zero_and_lowest_by_minus_one_do_not_trap(dtype):
    lowest = np.iinfo(dtype).min
    a = np.array([7, -7, 7, -7, lowest, lowest, lowest, 5, 0, -1], dtype)
    b = np.array([0, 0, -1, 2, -1, 0, 3, -3, 0, -1], dtype)

    def fn(xp, a, b):
        return a // b, a % b, xp.floor_divide(a, -1), a % 3, a // 2  # (constant divisors: the plain ops)

    got, want = compiled_and_interpreted(lambda a, b: fn(enp, a, b), a, b)
    assert_same(got, want, with_numpy(fn, a, b))


def test_any_and_all_over_an_empty_axis_are_false_and_true():
    x = np.full((2, 0, 3), 1.0, np.float32)  # (uninitialised memory read as true showed the bug)

    def fn(xp, a):
        return xp.any(a > 0, axis=1), xp.all(a > 0, axis=1), xp.any(a < 0), xp.all(a < 0)

    got, want = compiled_and_interpreted(lambda a: fn(enp, a), x)
    assert_same(got, want, [np.asarray(r) for r in with_numpy(fn, x)])


def test_comparisons_of_bools_compile():
    a, b = np.array([True, False, True, False]), np.array([True, True, False, False])

    def fn(xp, a, b):
        return a == b, a != b, a < b, a <= b, a > b, a >= b, xp.maximum(a, b), xp.minimum(a, True)

    got, want = compiled_and_interpreted(lambda a, b: fn(enp, a, b), a, b)
    assert_same(got, want, with_numpy(fn, a, b))


def test_float32_exp_is_finite_up_to_its_overflow():
    # topi's fast_exp clamps at 88.376; float32 exp is finite up to 88.7228
    x = np.concatenate([np.linspace(88.3, 88.72283935546875, 2001), [np.nextafter(np.float32(88.72283935546875),
                                                                                    np.float32(100))]])
    x = x.astype(np.float32)
    (got,), (want,) = compiled_and_interpreted(lambda a: (enp.exp(a),), x)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
    finite = exact < np.finfo(np.float32).max
    assert np.isfinite(got[finite]).all() and np.isfinite(want[finite]).all()
    ulp = np.abs(got[finite] - exact[finite]) / np.spacing(exact[finite].astype(np.float32))
    assert ulp.max() <= 6, x[finite][ulp.argmax()]
    assert np.isinf(got[~finite]).all() and np.isinf(want[~finite]).all()


def test_the_edge_case_lowerings_build_for_cuda():
    f, i, c = np.ones(4), np.ones(4, "int64"), np.ones(4, bool)

    def fn(f, i, c):
        return (enp.maximum(f, 0.0), enp.sign(f), enp.argmax(f), f != 1.0, f // 0.1, f % 0.1, i // i, i % i,
                i ** i, i ** 2, c < c, enp.exp(f.astype(np.float32)))

    compiled = build(egad.trace(fn, f, i, c), target="cuda", cache=BuildCache(None))
    assert "__global__" in compiled.source["cuda"]


def test_sigmoid_far_below_zero_keeps_its_relative_accuracy():
    """The interpreter computed 0.5 tanh(x/2) + 0.5, which rounds sigmoid(-40) = 4.2e-18 to 0
    (log of it: -inf instead of -40); compiled float64 code was right."""
    import egad.nn as enn

    x = np.array([-200.0, -40.0, -30.0, -1.0, 0.0, 3.0, 40.0])
    exact = np.array([float(1 / (1 + np.exp(np.longdouble(-v)))) for v in x])
    got, want = compiled_and_interpreted(lambda a: enp.log(enn.sigmoid(a)), x)
    for result in (got[0], want[0]):
        np.testing.assert_allclose(result, np.log(exact), rtol=1e-14)


def test_float64_tanh_keeps_its_relative_accuracy_near_zero():
    """TVM's tanh cancels for small x: tanh(1e-20) was 0, tanh(1e-12) off by 2e-5, and
    tanh(-0.0) was +0.0. Found by fuzzing."""
    x = np.array([5e-324, 1e-300, 1e-20, -1e-12, 1e-9, -0.0, 0.0, 0.26, -0.3, 1.0, 19.0, 22.0, np.inf, -np.inf,
                  np.nan])
    x = np.concatenate([x, np.random.default_rng(0).standard_normal(1000) * 3])
    got, want = compiled_and_interpreted(enp.tanh, x)
    np.testing.assert_allclose(got[0], np.tanh(x), rtol=4e-16, atol=0)
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(np.tanh(x)))
    np.testing.assert_array_equal(want[0], np.tanh(x))


def test_int32_arithmetic_wraps_before_it_is_widened():
    """Fused into the widening cast, TVM's simplifier computed the int32 op in 64 bits:
    sum(a * 3) of a = 2**30 was 3 * 2**30, not numpy's wrapped sum. Found by fuzzing."""
    a, b = np.array([2**30, 2**30, 5], np.int32), np.array([-2**31, 7, -3], np.int32)
    wide = np.array([3, -1, 2])

    def f(a, b, wide):
        return (enp.sum(a * 3), enp.sum(a + a, axis=0), enp.abs(b).astype("int64") + 1, enp.abs(b) * wide,
                (a * 4).astype("float64"))

    got, want = compiled_and_interpreted(f, a, b, wide)
    with np.errstate(over="ignore"):
        expected = (np.sum(a * 3), np.sum(a + a, axis=0), np.abs(b).astype("int64") + 1, np.abs(b) * wide,
                    (a * 4).astype("float64"))
    assert_same(got, want, expected)


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_power_of_one_half_is_numpys_square_root(dtype):
    """numpy's power takes x ** 0.5 as sqrt: (-inf) ** 0.5 is nan and (-0.0) ** 0.5 is -0.0,
    where C's pow (compiled code's) gave inf and 0.0. Found by fuzzing."""
    x = np.array([-np.inf, -0.0, 0.0, 0.25, 4.0, -1.0, np.inf, np.nan], dtype)
    got, want = compiled_and_interpreted(lambda a: (a ** 0.5, enp.power(a, 0.5)), x)
    with np.errstate(invalid="ignore"):
        assert_same(got, want, (x ** 0.5, np.power(x, 0.5)))
