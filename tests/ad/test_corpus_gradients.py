"""Every corpus program's gradient against central finite differences (issue 3).

For each program with `differentiable_argnums`, for two seeds: arguments cast to
float64, the program's output reduced to a scalar by `scalar_loss` (fixed random
weights per float output leaf), `egad.grad` w.r.t. all differentiable arguments,
compared norm-wise with central differences of the primal program (1e-6 relative,
see `gradcheck.py`), at entries whose perturbations keep the control path.
`egad.value_and_grad` must return the primal value and the same gradients.

The first tests check the checker itself (no `egad.grad` needed): central
differences against hand-derived gradients, and the control-path fingerprint
noticing a branch flip, a trip-count change and a kink.
"""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.pytree import flatten
from tests.programs import all_programs

from .gradcheck import (
    NotComparable, assert_gradients_match, central_difference, path_fingerprint, run_with_decision_margin,
    same_control_path, scalar_loss, to_float64,
)

DIFFERENTIABLE = [p for p in all_programs() if p.differentiable_argnums]
SEEDS = (0, 1)


# --- the checker, checked --------------------------------------------------------------


def test_central_difference_matches_a_hand_derived_gradient():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))

    def f(x, params):
        return enp.sum(params["w"] * enp.tanh(x)) + params["s"] * enp.sum(x * x)

    params = {"w": w, "s": 0.7}
    program = egad.trace(f, x, params)
    run = lambda *a: egad.interpret(program, *a)  # noqa: E731
    dx = central_difference(run, (x, params), 0)
    np.testing.assert_allclose(dx, w * (1 - np.tanh(x) ** 2) + 2 * 0.7 * x, rtol=1e-8, atol=1e-9)
    dparams = central_difference(run, (x, params), 1)
    np.testing.assert_allclose(dparams["w"], np.tanh(x), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(dparams["s"], np.sum(x * x), rtol=1e-8)


def test_scalar_loss_weights_every_float_leaf_and_ignores_ints():
    x = np.array([1.0, 2.0])

    def fn(x):
        return {"v": x * 3.0, "n": enp.sum(x > 0), "s": enp.sum(x)}

    loss = scalar_loss(fn, 5)
    eager = float(loss(x))
    traced = float(egad.interpret(egad.trace(loss, x), x))
    assert eager == pytest.approx(traced, rel=1e-14)
    # linear in x: the loss at 2x is twice the loss at x, and the int leaf does not enter
    assert float(loss(2 * x)) == pytest.approx(2 * eager, rel=1e-12)
    assert eager != 0.0


def test_to_float64_casts_float_leaves_in_pytrees_only():
    args = (np.ones(2, np.float32), {"a": np.ones((), np.float32), "n": np.int64(3)}, 2.0, np.int32(1))
    out = to_float64(args)
    assert out[0].dtype == np.float64 and out[1]["a"].dtype == np.float64
    assert out[1]["n"].dtype == np.int64 and out[2] == 2.0 and out[3].dtype == np.int32


def test_fingerprint_sees_a_branch_flip_a_trip_count_and_a_kink():
    def branchy(x):
        return egad.cond(x[0] > 0, lambda v: v * 2.0, lambda v: -v, x)

    def looped(x):
        return egad.while_loop(lambda v: enp.sum(v) < 3.0, lambda v: v + 1.0, x)

    def kinked(x):
        return enp.sum(enp.maximum(x, 0.5) + enp.abs(x) + enp.max(x))

    smooth_step, flip_step = np.array([1e-6, 0.0]), np.array([0.0, 0.0])
    for fn, at in ((branchy, np.array([0.0, 1.0])), (looped, np.array([1.0, 0.0])), (kinked, np.array([0.5, 0.0]))):
        program = egad.trace(fn, at)
        assert not same_control_path(program, (at + smooth_step,), (at - smooth_step,)), fn.__name__
        away = at + np.array([0.3, 0.1])
        assert same_control_path(program, (away + smooth_step,), (away - smooth_step,)), fn.__name__
        assert path_fingerprint(program, (away + flip_step,)) == path_fingerprint(program, (away,))


def test_decision_margin_finds_a_comparison_decided_by_rounding():
    """sum(x - mean(x)) > 0 is a tie in real arithmetic: its gap is rounding noise."""
    def centered(x):
        return egad.cond(enp.sum(x - enp.mean(x)) > 0, lambda v: v * 2.0, lambda v: -v, x)

    def plain(x):
        return egad.cond(enp.sum(x) > 0, lambda v: v * 2.0, lambda v: -v, x)

    x = np.array([0.3, -0.7, 0.123456789])

    def margin(fn):
        return run_with_decision_margin(egad.trace(fn, x), (x,))[1]

    assert margin(centered) < 1e-15
    assert margin(plain) == pytest.approx(abs(x.sum()))
    assert margin(lambda v: v * 2.0) == np.inf


# --- the corpus --------------------------------------------------------------------------


def _float64_args(program, seed):
    return to_float64(program.make_args(np.random.default_rng(seed)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("program", DIFFERENTIABLE, ids=[p.name for p in DIFFERENTIABLE])
def test_gradient_matches_central_differences(program, seed):
    args = _float64_args(program, seed)
    loss = scalar_loss(program.fn, seed)
    try:
        assert_gradients_match(loss, args, tuple(program.differentiable_argnums),
                               static_argnums=program.static_argnums, context=f"{program.name} seed {seed}")
    except NotComparable as why:
        pytest.skip(f"{program.name} seed {seed}: {why}")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("program", DIFFERENTIABLE, ids=[p.name for p in DIFFERENTIABLE])
def test_value_and_grad_agrees_with_interpret_and_grad(program, seed):
    args = _float64_args(program, seed)
    wrt = tuple(program.differentiable_argnums)
    primal = egad.trace(scalar_loss(program.fn, seed), *args, static_argnums=program.static_argnums)
    value, grads = egad.interpret(egad.value_and_grad(primal, wrt=wrt), *args)
    expected_value = egad.interpret(primal, *args)
    assert np.shape(value) == () and np.asarray(value).dtype == np.float64
    np.testing.assert_allclose(value, expected_value, rtol=1e-12, atol=0)
    expected_grads = egad.interpret(egad.grad(primal, wrt=wrt), *args)
    assert isinstance(grads, tuple) and len(grads) == len(wrt)
    for got, want in zip(grads, expected_grads):
        got_leaves, got_tree = flatten(got)
        want_leaves, want_tree = flatten(want)
        assert got_tree == want_tree
        for g, w in zip(got_leaves, want_leaves):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
