"""Random control-flow programs (the generator of tests/ad/test_random_programs.py:
nested fori/while loops with traced bounds, cond, switch, scan, gathers and row
writes) compiled with `egad.optimize(..., target="llvm")`, without rewrites
(`rules=()`) and with the default rule families: the compiled value agrees
with the interpreter and the compiled gradients with central differences (issue 4,
"Must show"). Each example is a TVM build (about a second), so the default run draws
a few dozen; `make test-slow` draws more."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

import egad
from tests.ad.gradcheck import NotComparable, assert_gradients_match, scalar_loss
from tests.ad.test_random_programs import WRT, arguments, build_program, program_descriptions, show_program


def _check(description, args, loss_seed, rules=()):
    note(show_program(description))
    loss = scalar_loss(build_program(description), loss_seed)
    primal = egad.trace(loss, *args)
    expected = egad.interpret(primal, *args)
    if not np.isfinite(expected):
        reject()
    value, grads = egad.optimize(primal, wrt=WRT, target="llvm", rules=rules)(*args)
    np.testing.assert_allclose(value, expected, rtol=1e-9, atol=1e-12)
    try:
        result = assert_gradients_match(loss, args, WRT, primal=primal, grads=grads,
                                        context="the compiled gradient of the random program above")
    except NotComparable:
        reject()
    note(result.describe())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3))
def test_compiled_gradient_matches_central_differences(description, args, loss_seed):
    _check(description, args, loss_seed)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3))
def test_optimized_gradient_matches_central_differences(description, args, loss_seed):
    _check(description, args, loss_seed, rules=None)  # the e-graph with every default family


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3))
def test_many_compiled_gradients_match_central_differences(description, args, loss_seed):
    _check(description, args, loss_seed, rules=None)
