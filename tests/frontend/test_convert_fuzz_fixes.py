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
