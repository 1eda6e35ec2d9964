"""`for ... in enumerate(xs)` and `for ... in zip(xs, ys, ...)` over traced arrays in an
`egad.function`: a loop over the rows, like `for row in xs`, for static and symbolic
(`egad.Spec(("T", 3))`) first axes. Each program runs traced and interpreted, and
eagerly (the decorated function on numpy values is the original Python), and the two
must agree; gradients of a float loss match central finite differences."""
from __future__ import annotations

import builtins

import numpy as np
import pytest

import egad
import egad.numpy as enp

T = egad.Spec(("T", 3), "float64")
U = egad.Spec(("U", 3), "float64")


def _rows(n, seed=0):
    return np.random.default_rng(seed + n).normal(size=(n, 3))


def _check(fn, *args, trace_args=None):
    """Traced (on `trace_args` when given) and interpreted equals eager Python."""
    program = egad.trace(fn, *(trace_args if trace_args is not None else args))
    got, want = egad.interpret(program, *args), fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), err_msg=f"{fn.__name__} on {args}")
    return program


def _is_a_loop(program) -> bool:
    return " = for [" in str(program)


# --- programs -------------------------------------------------------------------------

@egad.function
def _enumerate_weighted(xs):
    acc = enp.zeros(3)
    for i, row in enumerate(xs):
        acc = acc + row * i
    return acc


@egad.function
def _enumerate_from_two(xs):
    acc = enp.zeros(3)
    for i, row in enumerate(xs, start=2):
        acc = acc + enp.sin(row) * i
    return acc


@egad.function
def _enumerate_positional_start(xs):
    acc = enp.zeros(3)
    for i, row in enumerate(xs, -1):
        acc = acc + row * i
    return acc


@egad.function
def _zip_product(xs, ys):
    acc = enp.zeros(3)
    for a, b in zip(xs, ys):
        acc = acc + a * b
    return acc


@egad.function
def _zip_three(xs, ys, zs):
    acc = enp.zeros(3)
    for a, b, c in zip(xs, ys, zs):
        acc = acc + a * b - c
    return acc


@egad.function
def _zip_with_range(xs, n):
    acc = enp.zeros(3)
    for k, row in zip(range(n), xs):
        acc = acc + row * (k + 1)
    return acc


@egad.function
def _zip_with_enumerate(xs, ys):
    acc = enp.zeros(3)
    for (i, a), b in zip(enumerate(xs, 1), ys):
        acc = acc + a * b * i
    return acc


@egad.function
def _enumerate_of_zip(xs, ys):
    acc = enp.zeros(3)
    for i, (a, b) in enumerate(zip(xs, ys)):
        acc = acc + (a - b) * i
    return acc


@egad.function
def _zip_break(xs, ys):
    acc = enp.zeros(3)
    for a, b in zip(xs, ys):
        if enp.sum(a * b) > 0.5:
            break
        acc = acc + enp.tanh(a * b)
    return acc


@egad.function
def _enumerate_continue(xs):
    acc = enp.zeros(3)
    for i, row in enumerate(xs):
        if i % 2 == 1:
            continue
        acc = acc + row * row
    return acc


@egad.function
def _enumerate_return(xs):
    for i, row in enumerate(xs):
        if enp.sum(row) > 0.0:
            return row * i
    return enp.zeros(3) - 1.0


@egad.function
def _zip_targets_after_break(xs, ys):
    a, b = xs[0], ys[0]
    for a, b in zip(xs, ys):
        if enp.sum(a) > 0.0:
            break
    return a + 2 * b


@egad.function
def _enumerate_targets_after(xs):
    acc = enp.zeros(3)
    for i, row in enumerate(xs, start=3):
        acc = acc + row
    return acc, row * i, i


LOOPS_OVER_ONE = [_enumerate_weighted, _enumerate_from_two, _enumerate_positional_start, _enumerate_continue,
                  _enumerate_return]
LOOPS_OVER_TWO = [_zip_product, _zip_with_enumerate, _enumerate_of_zip, _zip_break]


# --- values -----------------------------------------------------------------------------

@pytest.mark.parametrize("fn", LOOPS_OVER_ONE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_enumerate_of_a_static_array_is_a_loop_with_python_values(fn, n):
    program = _check(fn, _rows(n))
    assert _is_a_loop(program)


@pytest.mark.parametrize("fn", LOOPS_OVER_ONE, ids=lambda f: f.__name__)
def test_enumerate_of_a_symbolic_array_is_one_program_for_every_length(fn):
    program = egad.trace(fn, T)
    assert _is_a_loop(program)
    for n in (0, 1, 5):
        xs = _rows(n)
        np.testing.assert_allclose(egad.interpret(program, xs), fn(xs), err_msg=f"n={n}")


@pytest.mark.parametrize("fn", LOOPS_OVER_TWO, ids=lambda f: f.__name__)
@pytest.mark.parametrize("lengths", [(0, 0), (1, 1), (5, 5), (5, 2), (1, 5), (0, 3)])
def test_zip_stops_at_the_shortest_static_and_symbolic(fn, lengths):
    xs, ys = _rows(lengths[0], 1), _rows(lengths[1], 2)
    _check(fn, xs, ys)
    _check(fn, xs, ys, trace_args=(T, U))


@pytest.mark.parametrize("lengths", [(5, 4, 3), (2, 5, 5), (4, 4, 0)])
def test_zip_of_three_symbolic_lengths_uses_the_smallest(lengths):
    xs, ys, zs = (_rows(n, k) for k, n in enumerate(lengths))
    _check(_zip_three, xs, ys, zs)
    _check(_zip_three, xs, ys, zs, trace_args=(T, U, egad.Spec(("V", 3), "float64")))


@pytest.mark.parametrize("n", [0, 1, 3, 7])
def test_zip_with_a_static_and_a_traced_range(n):
    xs = _rows(5)
    _check(_zip_with_range, xs, n)  # range(n) with n a Python int beside a traced array
    program = egad.trace(_zip_with_range, T, np.int64(2))  # n traced, the rows symbolic
    np.testing.assert_allclose(egad.interpret(program, xs, np.int64(n)), _zip_with_range(xs, n))


def test_the_targets_after_the_loop_hold_the_element_it_stopped_on():
    for n in (1, 5):
        xs, ys = _rows(n, 3), _rows(n + 1, 4)
        _check(_zip_targets_after_break, xs, ys)
        _check(_zip_targets_after_break, xs, ys, trace_args=(T, U))
        _check(_enumerate_targets_after, xs)
        _check(_enumerate_targets_after, xs, trace_args=(T,))


# --- gradients --------------------------------------------------------------------------

def _central_differences(f, args, argnum, eps=1e-6):
    x = np.array(args[argnum], dtype=np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[index] += eps
        minus[index] -= eps
        grad[index] = (f(*args[:argnum], plus, *args[argnum + 1:]) -
                       f(*args[:argnum], minus, *args[argnum + 1:])) / (2 * eps)
    return grad


@pytest.mark.parametrize("fn", [_enumerate_from_two, _zip_product, _zip_with_enumerate, _zip_break],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_gradients_match_central_differences(fn, symbolic):
    single = fn is _enumerate_from_two
    xs, ys = _rows(5, 5) * 0.3, _rows(4, 6) * 0.3
    args = (xs,) if single else (xs, ys)
    weights = np.array([0.7, -1.3, 2.1])

    def loss(*a):
        return enp.sum(fn(*a) * weights)

    specs = ((T,) if single else (T, U)) if symbolic else args
    wrt = (0,) if single else (0, 1)
    grads = egad.interpret(egad.grad(egad.trace(loss, *specs), wrt=wrt), *args)
    for argnum, got in zip(wrt, grads):
        want = _central_differences(lambda *a: float(np.sum(fn(*a) * weights)), args, argnum)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=f"d/d arg {argnum}")


# --- plain Python stays Python ---------------------------------------------------------------

def test_enumerate_and_zip_of_python_values_stay_python():
    @egad.function
    def f(xs, weights):
        acc = xs[0] * 0.0
        for i, (w, name) in enumerate(zip(weights, ["a", "b"])):
            acc = acc + xs[i] * w + len(name)
        return acc

    program = _check(f, _rows(3), [0.5, 2.0])
    assert not _is_a_loop(program)


def test_a_users_own_zip_and_enumerate_are_called_as_written():
    calls = []

    def zip(*sequences):  # noqa: A001 - shadows the builtin on purpose
        calls.append("zip")
        return list(builtins.zip(*sequences))[:1]

    def enumerate(sequence):  # noqa: A001
        calls.append("enumerate")
        return [(10, sequence[0])]

    @egad.function
    def f(xs, ys):
        acc = enp.zeros(3)
        for a, b in zip(xs, ys):
            acc = acc + a * b
        for i, row in enumerate(xs):
            acc = acc + row * i
        return acc

    xs, ys = _rows(4, 7), _rows(4, 8)
    program = _check(f, xs, ys)
    assert calls.count("zip") == 2 and calls.count("enumerate") == 2  # once eagerly, once traced
    assert not _is_a_loop(program)


def test_zip_strict_checks_static_lengths_and_refuses_symbolic_ones():
    @egad.function
    def f(xs, ys):
        acc = enp.zeros(3)
        for a, b in zip(xs, ys, strict=True):
            acc = acc + a * b
        return acc

    _check(f, _rows(3), _rows(3, 1))
    with pytest.raises(ValueError):
        egad.trace(f, _rows(3), _rows(4))
    with pytest.raises(egad.EgadError, match="strict=True"):
        egad.trace(f, T, U)


def test_zip_of_a_traced_array_with_a_list_is_refused_naming_the_argument():
    @egad.function
    def f(xs):
        acc = enp.zeros(3)
        for a, w in zip(xs, [1.0, 2.0]):
            acc = acc + a * w
        return acc

    with pytest.raises(egad.EgadError, match=r"list as argument 2[\s\S]*test_convert_enumerate_zip\.py"):
        egad.trace(f, T)
