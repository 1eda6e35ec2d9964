"""rules/checkpoint.py's `checkpoint-every-k-trips` (CONVENTIONS 4: judged by running the
program before and after), and the extraction that weighs it under a memory limit.

A forward/reverse loop pair of T trips becomes, beside the loops as they are, a pair
split into segments of k trips (k the divisor of T that holds the fewest bytes): the
forward loop stacks only the states a segment starts from, the reverse loop re-runs
each segment from its row, stacking the residuals, then runs its adjoint over them.
(a) The intended effect: the alternative is made only under a memory limit; it holds
fewer bytes than storing every residual (and than segments of sqrt(T) trips where the
residuals outweigh the checkpoints); an extraction pricing bytes held takes it, the
time-only one does not; loops it does not fit are left alone. (b) Semantics on
Hypothesis inputs (float64, 1e-12): an RNN and a gate-by-gate LSTM through the
alternative itself.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from egad.ad.checkpoint import kept_bytes
from egad.egraph import Snapshot, decode, encode
from egad.egraph.schedule import Limits, saturate
from egad.extract import CostModel, _Extractor, _linear_in_tapes, extract
from egad.ir.program import walk_bindings
from egad.rules import checkpoint as checkpoint_rules
from egad.rules.checkpoint import EVERY_K
from tests.ad.test_checkpoint import rnn_loss
from tests.egraph.test_rules import GATED_SHAPES, SETTINGS, assert_same_results, floats, gated_cell

MEMORY_FIRST = CostModel(held_byte_seconds=1e-3)  # a byte held costs far more than any time here


def rnn_arguments(T: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(4, 4)) * 0.5, rng.normal(size=(3, 4)), rng.normal(size=(T, 2, 3)), rng.normal(size=(2, 4))


def saturated(gradient, memory_limited=True):
    encoding = encode(gradient)
    report = saturate(encoding, families=["checkpoint"], limits=Limits(seconds=300), memory_limited=memory_limited)
    return encoding, report, Snapshot.of(encoding.egraph)


def every_k_alternative(encoding, snapshot):
    """The extraction that takes this rule's loops: every other loop node banned."""
    banned = frozenset(node for members in snapshot.nodes.values() for node in members
                       if node.head in ("For", "While") and (encoding.regions[node.args[0]].copied_from or ("",))[0]
                       != EVERY_K)
    return decode(encoding, snapshot, _linear_in_tapes(_Extractor(encoding, snapshot, CostModel()).without(banned),
                                                       banned)[1])


def loops(program):
    return [b for b in walk_bindings(program.region) if b.op == "for"]


# --- (a) the intended effect -----------------------------------------------------------------------

def test_an_rnns_loops_are_split_into_segments_of_sqrt_t_trips():
    T = 16
    args = rnn_arguments(T)
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(0, 1))
    encoding, report, snapshot = saturated(gradient)
    assert report.fired()[EVERY_K] == 1 and report.limit_hit is None
    program = every_k_alternative(encoding, snapshot)
    forward, backward = (b for b in program.region.bindings if b.op == "for")
    assert (forward.attrs["trip_dim"], backward.attrs["trip_dim"]) == (4, 4) and backward.attrs["reverse"]
    # the forward loop stacks h at each segment's start (the running total is not re-run: nothing pushed reads it)
    assert [v.type.shape for v in forward.outputs[forward.attrs["n_state"]:]] == [(4, 2, 4)]
    rerun, adjoint = (b for b in backward.regions[0].bindings if b.op == "for")
    assert rerun.attrs["trip_dim"] == adjoint.attrs["trip_dim"] == 4 and adjoint.attrs["reverse"]
    assert not {"tape_alloc", "tape_push", "tape_pop"} & {b.op for b in walk_bindings(program.region)}
    assert kept_bytes(program) < kept_bytes(gradient)
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_the_segment_length_holds_the_fewest_bytes_not_merely_sqrt_t(monkeypatch):
    """An LSTM trip pushes more residual bytes (gates, tanh(c), h, c) than its
    checkpoint row holds (h, c): segments shorter than sqrt(T) hold less."""
    T = 64
    args = tuple(np.random.default_rng(3).normal(size=(T, *shape[1:]) if name == "xs" else shape) * 0.5
                 for name, shape in GATED_SHAPES.items())
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(1, 11)))

    def segmented():
        program = every_k_alternative(*saturated(gradient)[::2])
        forward = next(b for b in program.region.bindings if b.op == "for")
        return T // forward.attrs["trip_dim"], kept_bytes(program), program

    length, held, program = segmented()
    monkeypatch.setattr(checkpoint_rules, "_segment_length", lambda trips, divisors, *_: 8)  # sqrt(T)
    assert length < 8 and held < segmented()[1]
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_without_a_memory_limit_the_alternative_is_not_made():
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *rnn_arguments(16)), wrt=(0, 1))
    _, report, _ = saturated(gradient, memory_limited=False)
    assert EVERY_K not in report.fired() and "stack-taped-residuals" in report.fired()


def test_an_extraction_pricing_bytes_held_takes_the_segments_and_a_time_only_one_does_not():
    T = 64
    args = rnn_arguments(T, seed=1)
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(0, 1))
    encoding, report, snapshot = saturated(gradient)
    fastest = decode(encoding, snapshot, extract(encoding, snapshot))
    frugal = decode(encoding, snapshot, extract(encoding, snapshot, MEMORY_FIRST))
    assert max(b.attrs["trip_dim"] for b in loops(fastest)) == T
    assert max(b.attrs["trip_dim"] for b in loops(frugal)) == 8  # 8 segments of 8 trips
    assert kept_bytes(frugal) < kept_bytes(fastest) / 3
    assert_same_results(egad.interpret(frugal, *args), egad.interpret(gradient, *args))


def test_a_segments_rows_are_priced_as_held_once_not_once_per_segment():
    """The re-run's stacked residuals (k rows) are made again in each of the T/k
    segments but held one segment at a time: priced as k rows, not T."""
    T = 64
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *rnn_arguments(T)), wrt=(0, 1))
    encoding, _, snapshot = saturated(gradient)
    frugal = extract(encoding, snapshot, MEMORY_FIRST)
    per_byte = MEMORY_FIRST.held_byte_seconds
    time_only = _Extractor(encoding, snapshot, CostModel()).program_cost(frugal.roots).total
    priced = _Extractor(encoding, snapshot, MEMORY_FIRST).program_cost(frugal.roots).total
    held = (priced - time_only) / per_byte
    row = 2 * 4 * 8  # an h of (2, 4) float64
    # the checkpoints (8 rows of h), a segment's residuals (8 rows of h, 8 of h_{t-1}), the values
    # computed at the top level: well under the T rows of storing every trip
    assert held < T * row, held


def scan_in_a_loop_of_no_trips(xs, h0):
    def outer(i, h):
        _, hs = egad.scan(lambda c, x: (enp.tanh(c + x),) * 2, h, xs)
        return h + enp.sum(hs, axis=0)

    return enp.sum(egad.fori_loop(0, 0, outer, h0))


def test_rows_stacked_inside_a_loop_of_no_trips_are_priced_with_or_without_bytes_held():
    """Dividing the rows' price by the runs of the loops around them must not divide by
    the zero runs of a loop of no trips (Hypothesis found one: tests/tvm_bridge)."""
    args = (np.ones((3, 2)), np.ones(2))
    gradient = egad.value_and_grad(egad.trace(scan_in_a_loop_of_no_trips, *args), wrt=(0,))
    encoding = encode(gradient)
    snapshot = Snapshot.of(encoding.egraph)
    for model in (CostModel(), MEMORY_FIRST):
        program = decode(encoding, snapshot, extract(encoding, snapshot, model))
        assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def scan_loss(W, U, xs, h0):
    """The stacked hs (a forward per-trip output) read after the loop; the gradient with
    respect to xs is a reverse per-trip output."""
    _, hs = egad.scan(lambda h, x: (enp.tanh(x @ U + h @ W),) * 2, h0, xs)
    return enp.sum(hs * hs * hs)


def test_per_trip_outputs_are_stacked_per_segment_and_joined():
    T = 9
    args = rnn_arguments(T, seed=2)
    gradient = egad.value_and_grad(egad.trace(scan_loss, *args), wrt=(0, 1, 2))
    encoding, report, snapshot = saturated(gradient)
    assert report.fired()[EVERY_K] == 1
    program = every_k_alternative(encoding, snapshot)
    forward, backward = (b for b in program.region.bindings if b.op == "for")
    n_state = forward.attrs["n_state"]
    assert [v.type.shape for v in forward.outputs[n_state:]] == [(3, 2, 4), (3, 3, 2, 4)]  # checkpoints, hs
    backward_ys = [v.type.shape for v in backward.outputs[backward.attrs["n_state"]:]]
    assert (3, 3, 2, 3) in backward_ys and all(shape[:2] == (3, 3) for shape in backward_ys)  # dxs among them
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_loops_it_does_not_fit_are_left_alone():
    for T in (3, 7):  # too short; a prime trip count has no segment length
        gradient = egad.value_and_grad(egad.trace(rnn_loss, *rnn_arguments(T)), wrt=(0, 1))
        _, report, _ = saturated(gradient)
        assert EVERY_K not in report.fired(), T


# --- (b) semantics ---------------------------------------------------------------------------------

@SETTINGS
@given(W=floats(4, 4), U=floats(3, 4), xs=floats(12, 2, 3), h0=floats(2, 4))
def test_rnn_gradient_keeps_results(W, U, xs, h0):
    args = (W * 0.5, U, xs, h0)
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(0, 1))
    encoding, report, snapshot = saturated(gradient)
    assert report.fired()[EVERY_K] == 1
    assert_same_results(egad.interpret(every_k_alternative(encoding, snapshot), *args),
                        egad.interpret(gradient, *args))


_GATED: dict = {}


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in GATED_SHAPES.items()}))
def test_gate_by_gate_lstm_gradient_keeps_results(args):
    """h and c are checkpointed; every gate is re-run from them (T = 4: 2 segments of 2)."""
    args = tuple(args[name] for name in GATED_SHAPES)
    if not _GATED:
        gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))  # dxs: per-trip rows
        encoding, report, snapshot = saturated(gradient)
        assert report.fired()[EVERY_K] == 1
        _GATED.update(gradient=gradient, program=every_k_alternative(encoding, snapshot))
    forward = next(b for b in _GATED["program"].region.bindings if b.op == "for")
    assert [v.type.shape for v in forward.outputs[forward.attrs["n_state"]:]] == [(2, 2, 4), (2, 2, 4)]
    assert_same_results(egad.interpret(_GATED["program"], *args), egad.interpret(_GATED["gradient"], *args))

