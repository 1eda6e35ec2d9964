"""rules/ad_simplify.py's transformer `scatters-into-concat` (CONVENTIONS 4: judged by
running the program before and after), and the optimizer's check of results that are
many orders below the others (egad/optimizer.py `results_differ`).

(a) The intended effect: the cotangent of an LSTM cell's four gate slices, four
scatters into a zero buffer in the reverse loop, becomes one concat of the gates'
gradients, equal values; the cost extraction takes it. (b) Where it must not fire:
slices that leave a gap or overlap. (c) Semantics on Hypothesis inputs and on random
partitions of an axis into slices, through the rule-preferring test extractor.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from benchmarks.lstm import cell
from egad.egraph import Snapshot
from egad.extract import extract
from egad.ir.program import walk_bindings
from egad.optimizer import results_differ
from tests.egraph.test_rules import SETTINGS, Optimized, assert_same_results, floats

RULE = "scatters-into-concat"
B, I, H, T = 2, 3, 4, 5


def lstm_loss(Wx, Wh, b, xs, h, c):
    (h, c) = egad.fori_loop(0, T, lambda t, hc: cell(Wx, Wh, b, xs[t], hc[0], hc[1]), (h, c))
    return enp.sum(h * h) + enp.sum(c)


LSTM_SHAPES = ((I, 4 * H), (H, 4 * H), (4 * H,), (T, B, I), (B, H), (B, H))


def lstm_gradient():
    args = tuple(np.random.default_rng(0).normal(size=shape) for shape in LSTM_SHAPES)
    return args, egad.value_and_grad(egad.trace(lstm_loss, *args), wrt=tuple(range(6)))


def count(program, op: str) -> int:
    return sum(1 for b in walk_bindings(program.region) if b.op == op)


# --- (a) the intended effect ---------------------------------------------------------------------

def test_an_lstm_cells_gate_scatters_become_one_concat_of_equal_values():
    args, gradient = lstm_gradient()
    optimized = Optimized(gradient, ["ad_simplify"])
    assert optimized.report.fired().get(RULE, 0) >= 1
    assert count(optimized.program, "index_add") <= count(gradient, "index_add") - 3  # four scatters: one concat
    assert count(optimized.program, "concat") > count(gradient, "concat")
    got, want = egad.interpret(optimized.program, *args), egad.interpret(gradient, *args)
    assert all(np.array_equal(g, w) for g, w in zip(egad.pytree.flatten(got)[0], egad.pytree.flatten(want)[0]))


def test_the_cost_model_takes_the_concat():
    args, gradient = lstm_gradient()
    optimized = Optimized(gradient, ["ad_simplify"])
    snapshot = Snapshot.of(optimized.encoding.egraph)
    chosen = extract(optimized.encoding, snapshot).choice.values()
    origins = optimized.encoding.provenance.resolve(snapshot)
    assert any(node in origins and origins[node].site.name == RULE for node in chosen)


# --- (b) where it must not fire ------------------------------------------------------------------

def gapped(z, w):
    return enp.sum(enp.tanh(z[:, :2]) * w[:, :2]) + enp.sum(enp.sin(z[:, 4:]) * w[:, 4:])  # rows 2, 3 untouched


def overlapping(z, w):
    return enp.sum(enp.tanh(z[:, :4]) * w[:, :4]) + enp.sum(enp.sin(z[:, 2:]) * w[:, 2:])  # rows 2, 3 twice


def tiled(z, w):
    return enp.sum(enp.tanh(z[:, :2]) * w[:, :2]) + enp.sum(enp.sin(z[:, 2:5]) * w[:, 2:5]) + \
        enp.sum(enp.exp(z[:, 5:]) * w[:, 5:])


def test_slices_that_leave_a_gap_or_overlap_keep_their_scatters():
    args = (np.random.default_rng(1).normal(size=(3, 6)), np.random.default_rng(2).normal(size=(3, 6)))
    for fn in (gapped, overlapping):
        gradient = egad.value_and_grad(egad.trace(fn, *args), wrt=(0,))
        optimized = Optimized(gradient, ["ad_simplify"])
        assert RULE not in optimized.report.fired(), fn.__name__
        assert_same_results(egad.interpret(optimized.program, *args), egad.interpret(gradient, *args))
    gradient = egad.value_and_grad(egad.trace(tiled, *args), wrt=(0,))
    assert RULE in Optimized(gradient, ["ad_simplify"]).report.fired()


# --- (c) semantics ---------------------------------------------------------------------------------

@SETTINGS
@given(floats(*LSTM_SHAPES[0]), floats(*LSTM_SHAPES[1]), floats(*LSTM_SHAPES[2]), floats(*LSTM_SHAPES[3]),
       floats(*LSTM_SHAPES[4]), floats(*LSTM_SHAPES[5]))
def test_the_lstm_gradient_keeps_its_results(Wx, Wh, b, xs, h, c):
    args = (Wx, Wh, b, xs, h, c)
    _, gradient = lstm_gradient()
    optimized = Optimized(gradient, ["ad_simplify"])
    assert_same_results(egad.interpret(optimized.program, *args), egad.interpret(gradient, *args))


@SETTINGS
@given(st.lists(st.integers(1, 3), min_size=2, max_size=4), st.data())
def test_any_partition_of_an_axis_into_slices(widths, data):
    size = sum(widths)
    bounds = np.cumsum([0] + widths)
    z = data.draw(floats(2, size))
    w = data.draw(floats(2, size))

    def loss(z, w):
        total = 0.0
        for k, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
            piece = z[:, int(start):int(stop)]
            total = total + enp.sum((enp.tanh(piece) if k % 2 else piece * piece) * w[:, int(start):int(stop)])
        return total

    gradient = egad.value_and_grad(egad.trace(loss, z, w), wrt=(0,))
    optimized = Optimized(gradient, ["ad_simplify"])
    assert RULE in optimized.report.fired()
    assert_same_results(egad.interpret(optimized.program, z, w), egad.interpret(gradient, z, w))


# --- the optimizer's check of very small results -----------------------------------------------------

def test_a_result_far_below_the_others_is_compared_at_a_floor_and_a_real_error_is_still_caught():
    loss, cancelled = np.array(6.2), np.array([1.2e-11, -3e-12])  # a gradient that cancels to rounding residue
    noise = cancelled + 1.5e-14  # what reassociating the sums behind it changes (float64, ~10 ulp of the loss)
    assert results_differ([loss, noise], [loss, cancelled]) is None
    assert "result 1" in results_differ([loss, cancelled * 3], [loss, cancelled])  # wrong, though tiny
    assert "result 0" in results_differ([loss * (1 + 1e-6), cancelled], [loss, cancelled])
    assert results_differ([noise, loss], [cancelled, loss]) is None  # the order does not matter
    # results all exactly zero in the reference: a fused multiply-add's rounding is no difference
    zeros = np.zeros(3)
    assert results_differ([zeros + 3.7e-16], [zeros]) is None
    assert "result 0" in results_differ([zeros + 1e-9], [zeros])
