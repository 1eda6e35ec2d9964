"""`egad.function` bugs found by fuzzing: each program runs traced and interpreted, and
eagerly (the decorated function on numpy values is the original Python), on inputs
that take different paths, and the two must agree."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.ir import walk_bindings


def _check(fn, *args, spec=None):
    """Traced (on `spec`'s types when given) and interpreted equals eager Python."""
    program = egad.trace(fn, *(spec if spec is not None else args))
    got, want = egad.interpret(program, *args), fn(*args)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), err_msg=f"{fn.__name__}{args}")
    return program


ROWS = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
THRESHOLDS = (np.float64(0.0), np.float64(3.0), np.float64(5.0), np.float64(100.0))  # break at row 0, 1, 2, never


# --- 1. after a traced `break`, the loop target keeps the element it stopped on ------------

@egad.function
def _row_at_break(xs, t):
    for row in xs:
        if enp.sum(row) > t:
            break
    return row


@egad.function
def _index_at_break(xs, t, n):
    i = -1
    for i in range(n):
        if enp.sum(xs[i]) > t:
            break
    return i


@egad.function
def _static_range_break(xs, t):
    for i in range(3):
        if enp.sum(xs[i]) > t:
            break
    return xs[i], i


@egad.function
def _pair_target_with_return(xs, t):
    for k, row in enumerate(xs):
        if enp.sum(row) > t:
            return row * 2, k
    return row, k


@pytest.mark.parametrize("t", THRESHOLDS)
def test_break_leaves_the_for_target_at_the_row_it_stopped_on(t):
    _check(_row_at_break, ROWS, t)
    _check(_row_at_break, ROWS, t, spec=(egad.Spec(("T", "U"), "float64"), t))


@pytest.mark.parametrize("t", THRESHOLDS)
def test_break_leaves_a_traced_range_target_at_its_index(t):
    for n in (np.int64(0), np.int64(2), np.int64(3)):  # zero trips: i keeps -1
        _check(_index_at_break, ROWS, t, n)


@pytest.mark.parametrize("t", THRESHOLDS)
def test_break_leaves_a_static_range_target_at_its_index(t):
    _check(_static_range_break, ROWS, t)


@pytest.mark.parametrize("t", THRESHOLDS)
def test_return_from_a_loop_over_pairs_leaves_the_targets(t):
    _check(_pair_target_with_return, ROWS, t)


# --- 2. a closure sees the current value of a variable a traced loop or branch changes ------

@egad.function
def _closure_in_loop(x, n):
    scale = 1.0

    def step(v):
        return v * scale

    for _ in range(n):
        scale = scale * 0.5
        x = step(x)
    return x, scale


@egad.function
def _closure_in_branch(x):
    scale = 1.0
    step = lambda v: v * scale  # noqa: E731 (a lambda closes over scale as a def does)
    if x[0] > 0:
        scale = 3.0
        y = step(x)
    else:
        y = step(x) - 1.0
    return y, step(x)


@egad.function
def _closure_in_while(x, limit):
    total = x[0] * 0.0

    def grown():
        return total + 1.0

    while total < limit:
        total = grown() * 2.0
    return total


def test_a_closure_called_in_a_traced_loop_sees_the_loop_variable():
    x = np.array([1.0, 2.0])
    for n in (np.int64(0), np.int64(1), np.int64(3)):
        _check(_closure_in_loop, x, n)
    for limit in (np.float64(-1.0), np.float64(10.0)):
        _check(_closure_in_while, x, limit)


def test_a_closure_called_in_a_traced_branch_sees_the_branch_variable():
    for x in (np.array([1.0, 2.0]), np.array([-1.0, 2.0])):
        _check(_closure_in_branch, x)


# --- 3. `:=` bindings survive conversion --------------------------------------------------

@egad.function
def _walrus_in_while(x, t):
    s = x[0] * 0.0
    while (s := enp.sum(x)) < t:
        x = x * 2.0
    return s, x


@egad.function
def _walrus_first_bound_in_while(x, t):
    while (s := enp.sum(x)) < t:
        x = x * 2.0
    return s


@egad.function
def _walrus_in_while_with_break(x, t):
    k = 0
    while (s := enp.sum(x)) < t:
        if k >= 2:
            break
        x, k = x * 2.0, k + 1
    return s + k


@egad.function
def _walrus_in_and(x, t):
    s = x[1] * 0.0
    if x[0] > 0 and (s := enp.sum(x)) > t:
        x = x * 2.0
    return s + x[0]


@egad.function
def _walrus_in_or(x, t):
    s = x[1] * 0.0
    r = x[0] > 0 or (s := enp.sum(x)) > t
    return s, r


@egad.function
def _walrus_read_only_where_bound(x, t):
    if x[0] > 0 and (s := enp.sum(x)) > t:  # s has no value before: read only where bound
        return s
    return x[0]


@egad.function
def _walrus_in_if_exp(x, t):
    s = x[1] * 0.0
    y = (s := x[0] * 3.0) if x[1] > t else x[1]
    return s + y


@pytest.mark.parametrize("t", (np.float64(0.0), np.float64(2.0), np.float64(10.0)))
def test_walrus_in_a_traced_while_condition(t):
    x = np.array([1.0, 2.0])
    _check(_walrus_in_while, x, t)
    _check(_walrus_first_bound_in_while, x, t)
    _check(_walrus_in_while_with_break, x, t)


@pytest.mark.parametrize("x", (np.array([1.0, 2.0]), np.array([-1.0, 2.0]), np.array([0.5, -0.25])))
@pytest.mark.parametrize("t", (np.float64(0.0), np.float64(10.0)))
def test_walrus_in_lazy_operands(x, t):
    for fn in (_walrus_in_and, _walrus_in_or, _walrus_read_only_where_bound, _walrus_in_if_exp):
        _check(fn, x, t)


def test_walrus_in_a_lazy_operand_on_static_values():
    @egad.function
    def f(x, flag):
        s = 0.0
        if flag and (s := 2.0) > 1.0:
            x = x * s
        return x, s

    x = np.array([1.0, 2.0])
    for flag in (True, False):
        got = egad.interpret(egad.trace(lambda x: f(x, flag), x), x)
        assert np.allclose(got[0], f(x, flag)[0]) and float(got[1]) == f(x, flag)[1]


# --- 4. `a and b` runs b only when a is true -----------------------------------------------

@egad.function
def _count_above(x, t):
    i = 0
    while i < x.shape[0] and x[i] > t:
        i = i + 1
    return i


@egad.function
def _guarded_or(x, i, t):
    return i >= x.shape[0] or x[i] > t


@egad.function
def _guarded_chain(x, i, t):
    return 0 <= i < x.shape[0] and x[i] > t


@pytest.mark.parametrize("t", (np.float64(0.1), np.float64(0.55), np.float64(0.65), np.float64(1.0)))
def test_and_does_not_read_past_the_end_when_its_guard_is_false(t):
    x = np.array([0.5, 0.6, 0.7])
    _check(_count_above, x, t)
    _check(_count_above, x, t, spec=(egad.Spec(("N",), "float64"), t))
    for i in (np.int64(-1), np.int64(0), np.int64(2), np.int64(3), np.int64(7)):
        _check(_guarded_or, x, i, t)
        _check(_guarded_chain, x, i, t)


def test_and_is_a_branch_only_when_its_right_operand_can_fail():
    x = np.array([0.5, 0.6, 0.7])
    guarded = egad.trace(_guarded_or, x, np.int64(0), 0.5)
    assert [b.op for b in walk_bindings(guarded.region)].count("if") == 1

    @egad.function
    def arithmetic(a, b):
        return a > 0 and b > 0

    plain = egad.trace(arithmetic, np.float64(1.0), np.float64(2.0))
    assert "if" not in [b.op for b in walk_bindings(plain.region)]
    for a, b in ((1.0, 2.0), (-1.0, 2.0), (1.0, -2.0)):
        got = egad.interpret(plain, np.float64(a), np.float64(b))
        assert np.asarray(got).dtype == np.bool_ and bool(got) == arithmetic(np.float64(a), np.float64(b))
    got = egad.interpret(guarded, x, np.int64(3), 0.5)
    assert np.asarray(got).dtype == np.bool_ and bool(got)


# --- 5. loops over arrays whose rows have symbolic dims -----------------------------------

@egad.function
def _sum_of_squares(xs):
    acc = 0.0
    for r in xs:
        acc = acc + enp.sum(r * r)
    return acc


@egad.function
def _first_large_row(xs, threshold):
    for row in xs:
        if enp.sum(row) > threshold:
            return row * 2
    return xs[0]


def test_loop_over_rows_of_symbolic_width():
    xs = np.arange(6.0).reshape(2, 3)
    _check(_sum_of_squares, xs, spec=(egad.Spec(("T", "U"), "float64"),))
    xs = np.arange(12.0).reshape(4, 3)
    for threshold in (10.0, 100.0):
        for spec in (egad.Spec(("T", 3), "float64"), egad.Spec(("T", "U"), "float64")):
            _check(_first_large_row, xs, threshold, spec=(spec, threshold))


# --- 6. a loop variable that changes shape is named ---------------------------------------

def test_a_python_scalar_accumulator_that_becomes_an_array_is_named():
    @egad.function
    def f(x, n):
        acc = 0.0
        for i in range(n):
            acc = acc + x * i
        return acc

    with pytest.raises(egad.EgadError, match=r"(?s)`acc`.*enp\.zeros_like"):
        egad.trace(f, np.array([1.0, 2.0]), np.int64(3))


def test_an_array_that_grows_in_a_traced_loop_is_named_with_its_shapes():
    @egad.function
    def f(x, n):
        y = x
        for i in range(n):
            y = enp.concatenate([y, x])
        return y

    with pytest.raises(egad.LoopStateError) as info:
        egad.trace(f, np.array([1.0, 2.0]), np.int64(3))
    text = str(info.value)
    assert "variable `y` enters" in text and "float64[2]" in text and "float64[4]" in text
    assert "y must keep its shape" in text and "state[" not in text


def test_a_variable_whose_dtype_changes_in_a_traced_while_is_named():
    @egad.function
    def f(x, n):
        k = np.zeros(2, "int32")
        while n > 0:
            k = k + x
            n = n - 1
        return k

    with pytest.raises(egad.LoopStateError, match=r"(?s)variable `k` enters .*int32\[2\].*float64\[2\]"
                                                 r".*keep k's dtype stable"):
        egad.trace(f, np.array([1.0, 2.0]), np.int64(3))


def test_a_leaf_inside_a_container_variable_is_named_by_its_path():
    @egad.function
    def f(x, n):
        pair = (x, x)
        for i in range(n):
            pair = (pair[0], enp.concatenate([pair[1], x]))
        return pair[1]

    with pytest.raises(egad.LoopStateError, match=r"variable `pair\[1\]` enters"):
        egad.trace(f, np.array([1.0, 2.0]), np.int64(3))


@egad.function
def _shape_read_in_a_branch_and_after(x, t):
    y = x[0]
    if t > 0:
        y = y * x.shape[0]
    return y + x.shape[0]


@egad.function
def _shape_read_in_a_lazy_operand_and_after(x, t):
    i = 0
    while t > i and x[i % x.shape[0]] < 10.0:
        i = i + 1
    return i + x.shape[0]


@egad.function
def _shape_read_in_a_probed_loop_body(x, n):
    for _ in range(n):
        y = x * x.shape[0]
    return y + x.shape[0]


def test_symbolic_sizes_read_inside_a_region_and_after_it():
    x = np.array([0.5, 0.6, 0.7])
    spec = egad.Spec(("N",), "float64")
    for t in (np.float64(-1.0), np.float64(2.5)):
        _check(_shape_read_in_a_branch_and_after, x, t, spec=(spec, t))
        _check(_shape_read_in_a_lazy_operand_and_after, x, t, spec=(spec, t))
    _check(_shape_read_in_a_probed_loop_body, x, np.int64(2), spec=(spec, np.int64(2)))


def truth_of_floats(x):
    total = 0.0
    if x[0]:  # a float: true when non-zero, as in Python
        total = total + 1.0
    k = x[1]
    while k:  # counts down to exactly 0.0
        k = k - 1.0
        total = total + 10.0
    return total + (100.0 if x[2] else 0.0)


@pytest.mark.parametrize("x", [[0.0, 0.0, 0.0], [0.5, 2.0, -1.0], [float("nan"), 1.0, 0.0]])
def test_a_float_test_is_true_when_non_zero_as_in_python(x):
    x = np.array(x)
    program = egad.trace(egad.function(truth_of_floats), np.array([1.0, 1.0, 1.0]))
    assert egad.interpret(program, x) == truth_of_floats(x)
