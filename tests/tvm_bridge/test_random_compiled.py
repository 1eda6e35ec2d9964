"""Random control-flow programs (the generator of tests/ad/test_random_programs.py:
nested fori/while loops with traced bounds, cond, switch, scan, gathers and row
writes) compiled with `egad.optimize(..., target="llvm")`, without rewrites
(`rules=()`) and with the default rule families, also under a `memory_budget`: the
compiled value agrees with the interpreter and the compiled gradients with central
differences (issue 4, "Must show"). Each example is a TVM build (about a second), so
the default run draws a few dozen; `make test-slow` draws more."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

import egad
from egad.ad import checkpoint
from tests.ad.gradcheck import NotComparable, assert_gradients_match, run_with_decision_margin, scalar_loss
from tests.ad.test_random_programs import WRT, arguments, build_program, program_descriptions, show_program


# A comparison closer than this (relative) is a tie that float rounding decides
# (measured: sum(a * tanh(centered pair)) > 0 read -8.6e-17 in the interpreter, and the
# compiled program took the other branch).
ROUNDING_TIE = 1e-12


def _check(description, args, loss_seed, rules=(), budget_fraction=None):
    note(show_program(description))
    loss = scalar_loss(build_program(description), loss_seed)
    primal = egad.trace(loss, *args)
    expected, margin = run_with_decision_margin(primal, args)
    if not np.isfinite(expected) or margin < ROUNDING_TIE:
        reject()  # a branch decided by rounding: compiled code may sum in another order and take the other
    budget = None
    if budget_fraction is not None:
        store_all = checkpoint.plan(primal, WRT, 1).store_all_bytes
        if not store_all:
            reject()  # no loop tapes anything: no budget to plan
        budget = max(store_all // budget_fraction, 1)
        note(f"memory_budget={budget} (store-all tapes {store_all} bytes)")
    value, grads = egad.optimize(primal, wrt=WRT, target="llvm", rules=rules, memory_budget=budget)(*args)
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


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3),
       budget_fraction=st.sampled_from([2, 3, 8]))
def test_optimized_gradient_under_a_memory_budget_matches_central_differences(description, args, loss_seed,
                                                                              budget_fraction):
    """Under a memory_budget below store-all: the plan's checkpointed program, or the
    e-graph's own checkpointing of the store-all gradient (rules/checkpoint.py's
    checkpoint-every-k-trips), whichever `optimize` builds."""
    _check(description, args, loss_seed, rules=None, budget_fraction=budget_fraction)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3))
def test_many_compiled_gradients_match_central_differences(description, args, loss_seed):
    _check(description, args, loss_seed, rules=None)
