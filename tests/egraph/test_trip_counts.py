"""Observed while-loop trip counts as the cost model's guesses (egad/trip_counts.py):
`observe` writes each loop's mean trips, AD carries them to the gradient's loops,
the extractor prices those loops with them, and `egad.optimize` reports them."""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp
from egad import trip_counts
from egad.egraph import Snapshot, encode
from egad.extract import CostModel, trip_count_guesses
from egad.ir.program import walk_bindings


def newton_sqrt(a, x0):
    """Newton's iteration for sqrt(a), elementwise, until the step is small: a few trips."""
    def cond(x):
        return enp.max(enp.abs(x * x - a)) > 1e-9

    def body(x):
        return 0.5 * (x + a / x)

    return enp.sum(egad.while_loop(cond, body, x0) * a)


def halvings(xs, h):
    """Per row of xs, an inner while loop halving a value until it is below 1: as many
    trips as the row's magnitude needs (1, 3, 5 and 7 for these rows: mean 4)."""
    def step(t, h):
        def cond(state):
            v, _ = state
            return v > 1.0

        def body(state):
            v, g = state
            return v * 0.5, enp.tanh(g * 1.1)

        _, g = egad.while_loop(cond, body, (xs[t], h))
        return g

    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h))


NEWTON_ARGS = (np.array([2.0, 3.0, 10.0]), np.array([1.0, 1.0, 1.0]))
HALVINGS_ARGS = (np.array([1.5, 6.0, 20.0, 100.0]), np.array([0.3, -0.2]))


def _while_loops(program):
    return [b for b in walk_bindings(program.region) if b.op == "while"]


def test_observe_writes_each_while_loops_mean_trips():
    program = egad.trace(newton_sqrt, *NEWTON_ARGS)
    stats = egad.RunStats()
    egad.interpret(program, *NEWTON_ARGS, stats=stats)
    (trips,) = stats.while_trips.values()
    observed, seen = trip_counts.observe(program, NEWTON_ARGS)
    (loop,) = _while_loops(observed)
    assert loop.attrs["trip_guess"] == trips[0] and 2 < trips[0] < 10
    assert [s.mean_trips for s in seen] == [trips[0]]
    assert str(seen[0]).startswith("while loop at test_trip_counts.py:") and "runs" not in str(seen[0])
    np.testing.assert_allclose(egad.interpret(observed, *NEWTON_ARGS), egad.interpret(program, *NEWTON_ARGS))
    assert "trip_guess" not in _while_loops(program)[0].attrs  # the program observed is not changed


def test_a_nested_while_loop_takes_the_mean_of_its_runs():
    program = egad.trace(halvings, *HALVINGS_ARGS)
    observed, (seen,) = trip_counts.observe(program, HALVINGS_ARGS)
    (loop,) = _while_loops(observed)
    assert seen.runs == 4 and seen.mean_trips == 4.0 and loop.attrs["trip_guess"] == 4
    assert "mean of 4 runs" in str(seen)


def test_the_gradients_loops_are_priced_with_the_observed_trips():
    program, _ = trip_counts.observe(egad.trace(newton_sqrt, *NEWTON_ARGS), NEWTON_ARGS)
    trips = _while_loops(program)[0].attrs["trip_guess"]
    gradient = egad.value_and_grad(program, wrt=(0,))
    encoded = encode(gradient)
    guesses = trip_count_guesses(encoded, Snapshot.of(encoded.egraph), CostModel(default_guess=1000))
    # the forward copy (a while) and its adjoint (a for over the counted trips): both the observed count
    assert sorted(guesses.values()) == [trips, trips], guesses
    unobserved = encode(egad.value_and_grad(egad.trace(newton_sqrt, *NEWTON_ARGS), wrt=(0,)))
    assert set(trip_count_guesses(unobserved, Snapshot.of(unobserved.egraph),
                                  CostModel(default_guess=1000)).values()) == {1000}


def test_optimize_reports_the_trips_it_observed_and_keeps_the_gradient():
    optimized = egad.optimize(egad.trace(newton_sqrt, *NEWTON_ARGS), wrt=(0,))
    value, (grad,) = optimized(*NEWTON_ARGS)
    program = egad.trace(newton_sqrt, *NEWTON_ARGS)
    want_value, (want_grad,) = egad.interpret(egad.value_and_grad(program, wrt=(0,)), *NEWTON_ARGS)
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-8)
    assert "trips observed on the example inputs" in optimized.report()
    assert "observe trips" in optimized.report()


def spec_rnn(W, xs, h0):
    return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W + h), h0))


SPEC_RNN = (egad.Spec((8, 8), "float64"), egad.Spec(("T", 4, 8), "float64"), egad.Spec((4, 8), "float64"))


def _spec_rnn_arguments(steps):
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 8)) * 0.3, rng.standard_normal((steps, 4, 8)), np.zeros((4, 8))


def test_symbol_sizes_read_the_arguments_shapes():
    program = egad.trace(spec_rnn, *SPEC_RNN)
    assert trip_counts.symbol_sizes(program, _spec_rnn_arguments(37)) == {"T": 37}
    assert trip_counts.symbol_sizes(program, _spec_rnn_arguments(37)[:2]) == {}  # too few: the build says so
    assert trip_counts.symbol_sizes(program, (np.ones((8, 8)), np.ones((5, 3, 8)), np.ones((4, 8)))) == {}


def test_optimize_prices_symbolic_loops_at_the_sizes_they_run():
    program = egad.trace(spec_rnn, *SPEC_RNN)
    predicted = {}
    for steps in (10, 400):
        optimized = egad.optimize(program, wrt=(0,))
        value, (grad,) = optimized(*_spec_rnn_arguments(steps))
        want_value, (want_grad,) = egad.interpret(egad.value_and_grad(program, wrt=(0,)),
                                                  *_spec_rnn_arguments(steps))
        np.testing.assert_allclose(grad, want_grad, rtol=1e-8)
        assert f"T={steps}" in optimized.report()
        predicted[steps] = optimized.optimizations[0].predicted_before.seconds
    assert 20 < predicted[400] / predicted[10] < 60  # a loop of 40 times the steps: about 40 times the cost
