"""`egad.function` converter bugs found by fuzzing (the repros of fuzz run 17): each
program runs traced and interpreted, and eagerly (the decorated function on numpy
values is the original Python), and the two must agree; refusals are EgadErrors that
name the user's file and line."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp

X = np.array([0.5, -1.2, 2.0])


def _check(fn, *args, trace_args=None):
    """Traced (on `trace_args` when given) and interpreted equals eager Python."""
    program = egad.trace(fn, *(trace_args if trace_args is not None else args))
    got, want = egad.interpret(program, *args), fn(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), err_msg=f"{fn.__name__}{args}")
    return program


# --- `:=` in a while test, with a break or nested in and/or -----------------------------

@egad.function
def _walrus_test_with_break(x, n):
    k = 0
    while k < n and (w := enp.tanh(x[0] * k)) > -0.5:
        k = k + 1
        if k % 2 == 1:
            break
    return x[0] + k + w


@egad.function
def _walrus_in_nested_and_under_or(x, n):
    k = 0
    w = x[0]
    while k < 1 or (k < n and (w := enp.tanh(x[0] * k)) > -0.5):
        k = k + 1
    return x[0] + k + w


@pytest.mark.parametrize("fn", [_walrus_test_with_break, _walrus_in_nested_and_under_or])
def test_a_walrus_nested_in_a_while_test_is_carried(fn):
    """The converter converted the while test in place and then copied the half-converted
    test into the body, so a generated name became loop state and the trace died with a
    raw UnboundLocalError on `__egad_bound_N`. Found by fuzzing."""
    for n in (1, 2, 3):
        _check(fn, X, n)  # static n: a Python loop until the test turns traced
        _check(fn, X, np.int64(n), trace_args=(X, np.int64(3)))


# --- a < b < c evaluates b once ---------------------------------------------------------

@egad.function
def _chain_with_a_static_side_effect(x):
    it = iter([1.0, 2.0, 3.0])
    s = enp.sum(x)
    if 0 < next(it) < 5:  # static: Python's if, but next() ran twice
        s = s + next(it)
    return s


@egad.function
def _chain_with_a_traced_middle_call(x):
    calls = []

    def middle(v):
        calls.append(1)
        return v

    c = -5 < middle(enp.sum(x)) < 5
    return enp.sum(x) * len(calls) + enp.where(c, 1.0, 0.0)


@egad.function
def _chains_in_loops_tests_and_comprehensions(x, n):
    i = 0
    acc = 0.0 * x[0]
    while 0 <= i < n and -5 < x[i % 3] * i < 5:
        acc = acc + x[i % 3]
        i = i + 1
    ys = [1.0 if -1 < v < 1 else 0.0 for v in [x[0], x[1]]]
    zs = [v for v in range(3 if 0 < len(x) < 9 < 10 else 2)]  # `:=` is a SyntaxError here
    for v in x:
        if -1 < v < (w := 1.5) <= 3:  # a name bound in the last operand
            acc = acc + w
    return acc + ys[0] + len(zs) + (1.0 if 0 < enp.sum(x) < 1.5 < 2 else 3.0)


def test_a_chained_comparison_evaluates_its_middle_operand_once():
    """`a < b < c` became `(a < b) and (b < c)` with the same node `b` twice, so b ran
    twice (next() skipped an element; a call under tracing ran two or three times).
    Found by fuzzing."""
    _check(_chain_with_a_static_side_effect, X)
    _check(_chain_with_a_traced_middle_call, X)
    _check(_chain_with_a_traced_middle_call, -10 * X, trace_args=(X,))
    for n in (0, 2, 5):
        _check(_chains_in_loops_tests_and_comprehensions, X, n)
        _check(_chains_in_loops_tests_and_comprehensions, X, np.int64(n), trace_args=(X, np.int64(5)))


# --- names bound by `:=` in comprehensions and by `match` captures are assigned ----------

@egad.function
def _walrus_in_a_comprehension_under_an_if(x):
    t = x[0]
    if enp.sum(x) > 0:
        ys = [(t := a * 2) for a in [x[1], x[2]]]
        zs = {i: (t := t + a) for i, a in enumerate([x[0]])}
        _ = [[(t := t + u) for u in [x[2]]] for _ in range(2)]  # nested: still binds the function's t
    return t


@egad.function
def _walrus_in_a_comprehension_in_a_loop(xs):
    t = xs[0, 0]
    for row in xs:
        ys = [(t := a * 2) for a in [row[0], row[1]]]
    return t


@egad.function
def _match_captures_under_an_if(x):
    a, r, m = x[0], x[0], x[0]
    if enp.sum(x) > 0:
        match x[1] * 3:
            case a:
                pass
        match (x[1], x[2], x[0]):
            case (p, *rest):
                r = rest[1] + p
        match {"k": x[2], "j": x[1]}:
            case {"k": v, **others}:
                m = others["j"] + v
    return a + r + m


@egad.function
def _match_captures_in_a_loop(xs):
    a = xs[0, 0]
    for row in xs:
        match [row[0], row[2]]:
            case [c, *d]:
                a = a + c
    return a + c + d[0]


def test_names_bound_in_comprehensions_and_match_patterns_are_carried():
    """assigned_names skipped comprehensions (a `:=` in one binds in the function) and
    saw only Name stores (not `case a:`, `*rest`, `**rest`), so such a name assigned
    under a traced if or loop silently kept its old value. Found by fuzzing."""
    rows = np.arange(12.0).reshape(4, 3) / 5 - 1
    for fn in (_walrus_in_a_comprehension_under_an_if, _match_captures_under_an_if):
        _check(fn, X)
        _check(fn, -X, trace_args=(X,))
    for fn in (_walrus_in_a_comprehension_in_a_loop, _match_captures_in_a_loop):
        _check(fn, rows)
        _check(fn, rows[:1] * 3, trace_args=(egad.Spec(("T", 3), "float64"),))


@egad.function
def _traced_if_in_a_case(x, mode="up"):
    a = x[0]
    match mode:
        case "up":
            if enp.sum(x) > 0:
                a = a * 2
        case _:
            a = a - 1
    return a


@egad.function
def _jumps_in_cases_in_a_traced_loop(xs, mode="up"):
    a = xs[0, 0]
    for row in xs:
        match mode:
            case "up":
                if enp.sum(row) > 0.5:
                    break
                if enp.sum(row) > 0:
                    continue
            case _:
                pass
        a = a + row[0]
    return a + row[1]


@egad.function
def _return_in_a_case_in_a_traced_loop(xs, mode="up"):
    for row in xs:
        match mode:
            case "up":
                if enp.sum(row) > 0.5:
                    return row[0]
    return xs[0, 0]


def test_the_bodies_of_match_cases_are_converted():
    """A `match` statement's case bodies were left as Python: a traced `if` in one was a
    TracerConversionError, and a `break` or `return` in one inside a traced loop was not
    turned into a flag. Found while fixing the fuzzing bug above (match captures)."""
    rows = np.arange(12.0).reshape(4, 3) / 5 - 1
    _check(_traced_if_in_a_case, X)
    _check(_traced_if_in_a_case, -X, trace_args=(X,))
    for fn in (_jumps_in_cases_in_a_traced_loop, _return_in_a_case_in_a_traced_loop):
        _check(fn, rows)
        _check(fn, -rows, trace_args=(rows,))


# --- falling off the end after a return in a traced loop is refused ------------------------

def _first_large_row_sum(xs):
    for row in xs:
        if enp.sum(row) > 10.0:
            return enp.sum(row)


def _static_early_return(x, n):
    for i in range(n):
        if i > 5:
            return x * i


@egad.function
def _returns_on_every_path(xs, t):
    for row in xs:
        if enp.sum(row) > t:
            return enp.sum(row)
    if t > 100:
        return xs[0, 0]
    else:
        return xs[0, 1]


def test_a_return_in_a_traced_loop_without_a_final_return_is_refused():
    """A function returning from inside a traced loop and falling off its end (Python
    returns None when the loop ends without returning) silently returned zeros, the
    return value's placeholder. Now an UnsupportedError naming the function and its
    line; a static fall-off returns None, as in Python. Found by fuzzing."""
    rows = np.ones((4, 3))
    with pytest.raises(egad.UnsupportedError) as info:
        egad.trace(_first_large_row_sum, rows, convert=True)
    text = str(info.value)
    line = _first_large_row_sum.__code__.co_firstlineno + 3
    assert f"test_convert_fuzz_fixes.py:{line} (in _first_large_row_sum)" in text
    assert "returns None" in text and "add a final `return`" in text
    assert egad.function(_static_early_return)(X, 3) is None
    results = []
    egad.trace(lambda x: results.append(egad.function(_static_early_return)(x, 2)) or x, X)
    assert results == [None]  # converted, static: the loop ends without returning
    for t in (0.0, 2.0, 200.0):
        _check(_returns_on_every_path, rows * 0.5, np.float64(t), trace_args=(rows, np.float64(1.0)))


# --- converted functions share the original's closure cells ---------------------------

def test_a_converted_function_shares_its_closure_cells():
    """The converted function got copies of its closure's values at the first trace: a
    `nonlocal` write never reached the enclosing scope, a variable rebound later was
    stale in later traces, and one not bound yet was a raw `ValueError: Cell is empty`.
    Found by fuzzing."""
    count = 0
    scale = 1.0

    @egad.function
    def f(y):
        nonlocal count
        count += 1
        if enp.sum(y) > 0:
            return y * scale
        return y

    np.testing.assert_allclose(egad.interpret(egad.trace(f, X), X), X)
    assert count == 1
    scale = 3.0
    np.testing.assert_allclose(egad.interpret(egad.trace(f, X), X), X * 3.0)
    assert count == 2

    @egad.function
    def g(y):
        if enp.sum(y) > 0:
            return helper(y)
        return y

    with pytest.raises(NameError, match="helper"):  # as Python's own call would
        egad.trace(g, X)

    def helper(y):
        return y * 2

    np.testing.assert_allclose(egad.interpret(egad.trace(g, X), X), X * 2)


# --- refusals name the user's file and line --------------------------------------------

def _while_else(x):
    i = 0
    while enp.sum(x) > i:
        i = i + 1
    else:
        i = i + 10
    return x[0] * i


def _range_with_a_traced_step(x, n):
    acc = 0.0 * x[0]
    for i in range(0, 10, n):
        acc = acc + 1
    return acc


def _append_in_a_traced_loop(xs):
    ys = []
    for row in xs:
        ys.append(enp.sum(row))
    return ys[0]


def test_conversion_refusals_name_the_file_and_line():
    """`while ... else` said only "at line N", range() with a traced step named no place,
    and a value appended to a list in a traced loop was "from a probe region" (an
    internal trial trace) at the def line. Found by fuzzing."""
    here = "test_convert_fuzz_fixes.py"

    def line_of(fn, offset):
        return f"{here}:{fn.__code__.co_firstlineno + offset} (in {fn.__name__})"

    with pytest.raises(egad.UnsupportedError, match="while ... else") as info:
        egad.trace(_while_else, X, convert=True)
    assert line_of(_while_else, 2) in str(info.value)
    with pytest.raises(egad.EgadError, match="static, non-zero step") as info:
        egad.trace(_range_with_a_traced_step, X, np.int64(2), convert=True)
    assert line_of(_range_with_a_traced_step, 2) in str(info.value)
    with pytest.raises(egad.TracerLeakError) as info:
        egad.trace(_append_in_a_traced_loop, np.ones((4, 3)), convert=True)
    text = str(info.value)
    assert "computed in a loop body or branch on a traced value at " in text
    assert f"{line_of(_append_in_a_traced_loop, 3)} was used outside it" in text
    assert "probe" not in text


# --- a nested def that writes nonlocal, called under a traced condition, is refused --------

def _nonlocal_writer_called_under_a_traced_if(x, hits=0):
    def bump():
        nonlocal hits
        hits += 1

    if enp.sum(x) > 0:
        bump()
    return x[0] * hits


def _nonlocal_writer_called_in_a_traced_loop(xs):
    rows = 0

    def count():
        nonlocal rows
        rows = rows + 1

    for row in xs:
        count()
    return xs[0, 0] * rows


@egad.function
def _nonlocal_writer_called_under_static_conditions(x, n=2):
    hits = 0

    def bump():
        nonlocal hits
        hits += 1

    for i in range(n):
        if i > 0:
            bump()
    return x[0] * hits


def test_a_call_to_a_nonlocal_writer_under_a_traced_condition_is_refused():
    """A nested def writing a `nonlocal` and called under a traced if or loop ran once,
    while tracing, so its write applied on every path (or once for all trips): a silent
    wrong value. Now refused like a direct nonlocal write; under static conditions it
    runs as Python. Found by fuzzing."""
    for fn, arg, offset in [(_nonlocal_writer_called_under_a_traced_if, X, 6),
                            (_nonlocal_writer_called_in_a_traced_loop, np.ones((4, 3)), 8)]:
        with pytest.raises(egad.UnsupportedError, match="a call to a nested function that assigns") as info:
            egad.trace(fn, arg, convert=True)
        assert f"test_convert_fuzz_fixes.py:{fn.__code__.co_firstlineno + offset}" in str(info.value)
    _check(_nonlocal_writer_called_under_static_conditions, X)
