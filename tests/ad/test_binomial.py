"""Binomial checkpoint schedules (egad/ad/binomial.py) and loops cut at uneven
positions (`checkpoint.segment_at`): the schedule's arithmetic, the cut program's
gradient against store-all's, and its peak tape memory against the model."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from egad.ad import binomial, checkpoint
from egad.errors import EgadError

from .test_checkpoint import _store_all, arguments, rnn_loss, scan_loss


@pytest.mark.parametrize("levels", range(4))
def test_with_equal_state_and_residual_sizes_capacity_is_a_binomial_coefficient(levels):
    assert [binomial.capacity(m, levels, 1, 1) for m in range(12)] == [math.comb(m, levels + 1) for m in range(12)]


@settings(max_examples=60, deadline=None)
@given(trips=st.integers(1, 400), levels=st.integers(1, 4), state=st.integers(1, 64), residual=st.integers(1, 64),
       slack=st.integers(0, 200))
def test_cuts_cover_the_trips_refine_each_other_and_fit_the_memory(trips, levels, state, residual, slack):
    least = binomial.least_memory(trips, levels, state, residual)
    assert binomial.capacity(least, levels, state, residual) >= trips
    assert binomial.capacity(least - 1, levels, state, residual) < trips  # the least: one byte less does not do
    memory = least + slack
    cuts = binomial.cuts(trips, levels, state, residual, memory)
    assert len(cuts) == levels
    above = {0, trips}
    for level in cuts:
        assert list(level) == sorted(set(level)) and level[0] == 0 and level[-1] == trips
        assert above <= set(level)
        above = set(level)
    assert binomial.peak_bytes(cuts, state, residual) <= memory


def test_one_level_of_binomial_cuts_needs_less_than_even_segments():
    trips, state, residual = 1024, 64 << 10, 288 << 10  # an LSTM's (h, c) against its gates' residuals
    even = min(math.ceil(trips / k) * state + k * residual for k in range(1, trips))
    uneven = binomial.least_memory(trips, 1, state, residual)
    assert uneven < 0.75 * even  # about sqrt(2 T S R) against 2 sqrt(T S R)
    assert binomial.least_memory(trips, 2, state, residual) < 0.4 * uneven


def _assert_same_gradient(program, cut, args, wrt=(0, 1, 3)):
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=wrt), *args)
    got_value, got_grads = egad.interpret(egad.value_and_grad(cut, wrt=wrt), *args)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def offset_rnn_loss(W, U, xs, h0):
    """rnn_loss over trips 2..T-1: the cut positions are relative to the loop's start."""
    def step(t, h):
        return enp.tanh(xs[t] @ U + h @ W)

    return enp.sum(egad.fori_loop(2, xs.shape[0], step, h0) ** 2)


def reverse_scan_loss(W, U, xs, h0):
    """A reverse loop without per-trip outputs: its last segment runs first."""
    def step(h, x):
        return enp.tanh(x @ U + h @ W), None

    h, _ = egad.scan(step, h0, xs, reverse=True)
    return enp.sum(h * h)


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("loss", [rnn_loss, offset_rnn_loss, reverse_scan_loss])
def test_cut_loops_keep_the_gradient_and_tape_what_the_model_says(levels, loss):
    args = arguments(seed=4, steps=29)
    program = egad.trace(loss, *args)
    roomy = checkpoint.plan(program, wrt=(0, 1, 3), memory_budget=10**9)
    (store_all,) = roomy.policies
    trips, state, residual = store_all.trips, store_all.checkpoint_bytes, store_all.residual_bytes
    cuts = binomial.cuts(trips, levels, state, residual, binomial.least_memory(trips, levels, state, residual))
    cut = checkpoint.segment_at(program, 0, cuts)
    assert checkpoint.checkpointed_loops(cut) == levels
    _assert_same_gradient(program, cut, args)
    _, peak = _store_all(cut, args)
    _, store_all_peak = _store_all(program, args)
    assert peak < store_all_peak
    assert peak <= binomial.peak_bytes(cuts, state, residual)


def test_cuts_that_do_not_refine_or_a_loop_with_per_trip_outputs_are_refused():
    program = egad.trace(rnn_loss, *arguments())
    for bad in [((0, 5, 12), (0, 6, 12)), ((0, 5, 11),), ((0, 7, 5, 12),)]:
        with pytest.raises(EgadError, match="not a refinement"):
            checkpoint.segment_at(program, 0, bad)
    with pytest.raises(EgadError, match="no cut positions"):
        checkpoint.segment_at(program, 0, ())
    with pytest.raises(EgadError, match="per-trip outputs"):
        checkpoint.segment_at(egad.trace(scan_loss, *arguments()), 0, ((0, 5, 12),))
