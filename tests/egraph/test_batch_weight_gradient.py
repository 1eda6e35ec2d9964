"""rules/batching.py's loop transformer `batch-weight-gradient` (CONVENTIONS 4: judged by
running the program before and after).

A per-step accumulation `acc' = acc + A_t^T @ B_t` of a for loop (the weight gradients
of a reverse loop) becomes `acc0 + einsum('tki,tkj->ij', As, Bs)` after a new loop that
carries everything else and stacks A_t, B_t. (a) The intended effect: the reverse loop
of an RNN's and an LSTM's gradient no longer carries the weight-gradient accumulators,
each is one einsum after it, and the cost model prefers that, for a large LSTM and for
the small corpus one. (b) Semantics on Hypothesis inputs (float64, 1e-12), through the
rule-preferring test extractor and the cost-based one: the RNN, a gate-by-gate LSTM, a
loop with several accumulators of different forms, and loops where the rule must not
(or only partly) fire. (c) The old and the new loop pop the same tapes: an extraction
never takes outputs from both (egad/extract.py keeps tapes linear).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from egad.cost_model import TARGETS
from egad.egraph import Snapshot, decode, encode
from egad.egraph.schedule import saturate
from egad.frontend.primitives import to_tracer
from egad.extract import CostModel, _Extractor, _tape_read_twice, extract, predicted_cost
from tests.ad.gradcheck import scalar_loss
from tests.egraph.test_rules import (GATED_SHAPES, LSTM, SCAN_SHAPES, SETTINGS, Optimized, assert_same_results,
                                     floats, gated_cell, scanned_rnn_gradient)

RULE = "batch-weight-gradient"


def rnn_loss(W, U, xs, h0):
    h = egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0)
    return enp.sum(h * h)


RNN_SHAPES = dict(W=(3, 3), U=(4, 3), xs=(5, 2, 4), h0=(2, 3))


def rnn_gradient(args, wrt=(0, 1)):
    return egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=wrt)


def cost_extracted(program, families=("batching",), model=None):
    """encode -> saturate -> extract by cost -> decode."""
    encoding = encode(program)
    report = saturate(encoding, families=list(families))
    snapshot = Snapshot.of(encoding.egraph)
    extraction = extract(encoding, snapshot, model)
    return decode(encoding, snapshot, extraction), report


def reverse_loop(program):
    return next(b for b in program.region.bindings if b.op == "for" and b.attrs["reverse"])


def producer(program, var):
    return next(b for b in program.region.bindings if any(v is var for v in b.outputs))


# --- (a) the intended effect -----------------------------------------------------------------------

def test_rnn_weight_gradients_leave_the_reverse_loop_as_one_einsum_each():
    args = tuple(np.random.default_rng(0).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = rnn_gradient(args)
    before = reverse_loop(gradient)
    assert before.attrs["n_state"] == 5  # dh, dU, dW and two tapes (xs[t] is read again, not taped)
    assert [b.op for b in before.regions[0].bindings].count("matmul") == 3  # dz @ W.T, x.T @ dz, h.T @ dz
    program, report = cost_extracted(gradient)
    assert report.fired()[RULE] == 1 and report.limit_hit is None
    after = reverse_loop(program)
    assert after.attrs["n_state"] == 3  # dh and the tapes: the accumulators are gone
    body = [b.op for b in after.regions[0].bindings]
    assert body.count("matmul") == 1 and "transpose" not in body  # only dz @ W.T is left per step
    assert len(after.outputs) == 3 + 2  # and the steps' h and dz come out stacked
    xs = program.region.params[2]  # the steps' x are the rows of xs itself: not stacked again
    _, dW, dU = program.region.results
    stacked = after.outputs[3:]
    einsums = []
    for result, shape in ((dW, (3, 3)), (dU, (4, 3))):
        add = producer(program, result)
        assert add.op == "add" and add.outputs[0].type.shape == shape
        (einsum,) = [producer(program, v) for v in add.inputs if producer(program, v).op == "einsum"]
        assert einsum.attrs["spec"] == "tki,tkj->ij"
        einsums.append(einsum)
    (dz,) = {einsums[0].inputs[1], einsums[1].inputs[1]}  # both read the stacked dz
    assert dz in stacked and einsums[0].inputs[0] in stacked and einsums[1].inputs[0] is xs
    assert [b.op for b in program.region.bindings].count("einsum") == 2
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


@pytest.mark.parametrize("lo", [1, 0])
def test_rows_of_an_invariant_are_read_in_place_only_when_the_loop_covers_them(lo):
    def loss(W, U, xs, h0):  # from lo: the stacked xs[t] are xs[lo:], not xs
        h = egad.fori_loop(lo, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0)
        return enp.sum(h * h)

    args = tuple(np.random.default_rng(2).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(loss, *args), wrt=(0, 1))
    program, report = cost_extracted(gradient)
    assert report.fired()[RULE] == 1
    xs = program.region.params[2]
    einsum_inputs = [v for b in program.region.bindings if b.op == "einsum" for v in b.inputs]
    assert (xs in einsum_inputs) == (lo == 0)
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def lstm_gradient(B=2, I=3, H=4, T=6):
    rng = np.random.default_rng(1)
    args = (rng.normal(size=(T, B, I)), rng.normal(size=(I, 4 * H)), rng.normal(size=(H, 4 * H)),
            rng.normal(size=(4 * H,)), rng.normal(size=(B, H)), rng.normal(size=(B, H)))
    return args, egad.value_and_grad(egad.trace(scalar_loss(LSTM.fn, 0), *args), wrt=LSTM.differentiable_argnums)


def test_lstm_weight_and_bias_gradients_leave_the_reverse_loop():
    args, gradient = lstm_gradient()
    program, _ = cost_extracted(gradient)
    assert reverse_loop(gradient).attrs["n_state"] - reverse_loop(program).attrs["n_state"] == 3  # dWx, dWh, db
    specs = sorted(b.attrs["spec"] for b in program.region.bindings if b.op == "einsum")
    # db: the per-step sum over the batch, batched; dxs: the stacked dz_t @ Wx.T, one product after the loop
    assert specs == ["tab->b", "tik,jk->tij", "tki,tkj->ij", "tki,tkj->ij"]
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def gated_cell_with_biases(xs, Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, h0, c0):
    """An LSTM gate by gate whose biases are the rows of one (4, H) weight, `b[0]` ..
    `b[3]` (benchmarks/lstm_lm.py): the adjoint of each row read is a scatter into zeros."""
    def step(t, carry):
        h, c = carry
        x = xs[t]
        i = egad.nn.sigmoid(x @ Wi + h @ Ui + b[0])
        f = egad.nn.sigmoid(x @ Wf + h @ Uf + b[1])
        g = enp.tanh(x @ Wg + h @ Ug + b[2])
        o = egad.nn.sigmoid(x @ Wo + h @ Uo + b[3])
        c = f * c + i * g
        return o * enp.tanh(c), c

    h, _ = egad.fori_loop(0, xs.shape[0], step, (h0, c0))
    return enp.sum(h * h)


BIASED_SHAPES = dict(xs=(5, 2, 3), **{f"W{k}": (3, 4) for k in "ifgo"}, **{f"U{k}": (4, 4) for k in "ifgo"},
                     b=(4, 4), h0=(2, 4), c0=(2, 4))


def test_a_bias_gradient_scattered_into_rows_leaves_the_reverse_loop():
    """db' = db + index_add(..index_add(zeros, 0, sum(dz_i))..., 3, sum(dz_o)) per step (after
    `scatter-into-sum`, a chain of scatters into db) becomes four sums over the stacked
    dz's scattered into db0 after the loop: the dz's are stacked for dU anyway."""
    args = tuple(np.random.default_rng(4).normal(size=shape) for shape in BIASED_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(gated_cell_with_biases, *args), wrt=tuple(range(1, 10)))
    program, _ = cost_extracted(gradient, families=("batching", "ad_simplify"))
    body = [b.op for b in reverse_loop(program).regions[0].bindings]
    assert "index_add" not in body and "reduce_sum" not in body
    # the carried dh, dc and the tapes only: the eight weight gradients and db left
    assert reverse_loop(gradient).attrs["n_state"] - reverse_loop(program).attrs["n_state"] == 9
    after = [b.op for b in program.region.bindings]
    assert after.count("index_add") == 4
    assert sorted(b.attrs["spec"] for b in program.region.bindings if b.op == "einsum") == \
        ["tab->b"] * 4 + ["tki,tkj->ij"] * 8
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_a_scans_input_gradient_is_one_matmul_after_the_reverse_loop():
    """`dx_t = dz_t @ W.T`, stacked as the scan's xs gradient, from the dz_t the loop
    stacks for dW anyway: one (T*B)-row product after the loop, none per step."""
    args = tuple(np.random.default_rng(7).normal(size=shape) for shape in SCAN_SHAPES.values())
    gradient = scanned_rnn_gradient(args)
    assert [b.op for b in reverse_loop(gradient).regions[0].bindings].count("matmul") == 2  # dz @ W.T, x.T @ dz
    program, report = cost_extracted(gradient, families=("ad_simplify", "batching"))
    assert report.fired()[RULE] == 1
    assert "matmul" not in [b.op for b in reverse_loop(program).regions[0].bindings]
    _, dxs, dW = program.region.results
    assert producer(program, dxs).op == "einsum" and producer(program, dxs).attrs["spec"] == "tik,jk->tij"
    assert producer(program, dW).attrs["spec"] == "tki,tkj->ij"
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def _costs(gradient, target):
    model = CostModel.for_target(target)
    costs = []
    for families in ([], ["batching"]):
        encoding = encode(gradient)
        saturate(encoding, families=families)
        snapshot = Snapshot.of(encoding.egraph)
        extraction = extract(encoding, snapshot, model)
        program = decode(encoding, snapshot, extraction)
        einsums = sum(b.op == "einsum" for b in program.region.bindings)
        costs.append((predicted_cost(encoding, snapshot, extraction, model).total, einsums))
    return costs


def test_the_cost_model_prefers_the_batched_form_for_a_large_lstm():
    _, gradient = lstm_gradient(B=32, I=256, H=256, T=64)
    for target in ("llvm", "cuda"):
        (plain, none), (batched, einsums) = _costs(gradient, target)
        assert none == 0 and einsums == 4, target  # dWx, dWh, db and dxs
        assert batched < 0.95 * plain, (target, plain, batched)


def test_the_cost_model_prefers_the_batched_form_for_a_tiny_lstm_too():
    """Fewer kernels per step: a transpose, a matmul and an add per step and accumulator
    against one einsum and one add in all. The model finds no size where that loses."""
    _, gradient = lstm_gradient(B=1, I=2, H=2, T=2)
    for target in ("llvm", "cuda"):
        (plain, _), (batched, einsums) = _costs(gradient, target)
        assert einsums == 4 and batched < plain, (target, plain, batched)


# --- (b) semantics ---------------------------------------------------------------------------------

_OPTIMIZED: dict = {}


def optimized(name, build):
    """Through the rule-preferring test extractor and the cost-based one, once per session."""
    if name not in _OPTIMIZED:
        program = build()
        _OPTIMIZED[name] = (program, Optimized(program, ["batching"]), cost_extracted(program))
    return _OPTIMIZED[name]


def check(name, build, args, batched: int):
    """Both extractions interpret like the original; `batched` accumulators left the loop."""
    program, latest, (by_cost, report) = optimized(name, build)
    assert report.fired().get(RULE, 0) == (1 if batched else 0), report
    want = egad.interpret(program, *args)
    for got in (latest.program, by_cost):
        assert_same_results(egad.interpret(got, *args), want, name)
    loops = [b for b in program.region.bindings if b.op == "for"]
    after = [b for b in latest.program.region.bindings if b.op == "for"]
    assert sum(b.attrs["n_state"] for b in loops) - sum(b.attrs["n_state"] for b in after) == batched


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in RNN_SHAPES.items()}))
def test_rnn_gradient_keeps_results(args):
    args = tuple(args[name] for name in RNN_SHAPES)
    check("rnn", lambda: rnn_gradient(args, wrt=(0, 1, 3)), args, batched=2)


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in SCAN_SHAPES.items()}))
def test_scanned_rnn_gradient_with_stacked_outputs_keeps_results(args):
    args = tuple(args[name] for name in SCAN_SHAPES)
    check("scanned", lambda: scanned_rnn_gradient(args), args, batched=1)  # dW; dxs leaves as rows


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in GATED_SHAPES.items()}))
def test_gate_by_gate_lstm_gradient_keeps_results(args):
    args = tuple(args[name] for name in GATED_SHAPES)
    check("gated", lambda: egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11))), args,
          batched=8)  # dW_i .. dW_o, dU_i .. dU_o


def accumulators(xs, W, h0, A0, b0, C0, D0):
    """Four accumulators, four forms: x^T @ h, a sum over the batch (of h * h, which
    no product stacks, so it stays in the loop), an einsum, and a product with the
    invariant W (which is not stacked)."""
    def step(t, carry):
        h, A, b, C, D = carry
        x = xs[t]
        h = enp.tanh(x @ W + h)
        A = A + enp.transpose(x) @ h
        b = enp.sum(h * h, axis=0) + b
        C = C + enp.einsum("bi,bj->ij", h, h)
        D = D + x @ W
        return h, A, b, C, D

    return egad.fori_loop(0, xs.shape[0], step, (h0, A0, b0, C0, D0))


ACCUMULATOR_SHAPES = dict(xs=(4, 2, 3), W=(3, 5), h0=(2, 5), A0=(3, 5), b0=(5,), C0=(5, 5), D0=(2, 5))


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in ACCUMULATOR_SHAPES.items()}))
def test_several_accumulators_of_different_forms_keep_results(args):
    args = tuple(args[name] for name in ACCUMULATOR_SHAPES)
    check("accumulators", lambda: egad.trace(accumulators, *args), args, batched=3)
    _, latest, _ = optimized("accumulators", None)
    specs = sorted(b.attrs["spec"] for b in latest.program.region.bindings if b.op == "einsum")
    assert specs == sorted(["tki,tkj->ij", "tbi,tbj->ij", "tik,kj->ij"])  # W is read as it is


def scattered(xs, W, h0, A0, B0, C0, E0, k):
    """Accumulators of per-step sums scattered into rows: B through a zero buffer at
    constant rows, C straight into itself (both leave: h is stacked for A's product
    anyway), E at the row `k`, an argument (not a constant: a scatter after the loop
    could fail where a loop that runs no trip does not, so E stays)."""
    def step(t, carry):
        h, A, B, C, E = carry
        x = xs[t]
        h = enp.tanh(x @ W + h)
        total = enp.sum(h, axis=0)
        A = A + enp.transpose(x) @ h
        B = B + to_tracer(np.zeros(B.shape)).at[0].add(total).at[2].add(total)
        C = C.at[1].add(total)
        E = E.at[k].add(total)
        return h, A, B, C, E

    return egad.fori_loop(0, xs.shape[0], step, (h0, A0, B0, C0, E0))


SCATTERED_SHAPES = dict(xs=(4, 2, 3), W=(3, 5), h0=(2, 5), A0=(3, 5), B0=(3, 5), C0=(3, 5), E0=(3, 5))


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in SCATTERED_SHAPES.items()}),
       k=st.integers(0, 2))
def test_accumulators_of_scattered_sums_keep_results(args, k):
    args = (*(args[name] for name in SCATTERED_SHAPES), np.int64(k))
    check("scattered", lambda: egad.trace(scattered, *args), args, batched=3)  # A, B, C; E stays


def feedback(xs, W, h0, A0):
    """The accumulator is read by the recurrence: it must stay in the loop."""
    def step(t, carry):
        h, A = carry
        h = enp.tanh(xs[t] @ W + h @ A)
        return h, A + enp.transpose(h) @ h

    return egad.fori_loop(0, xs.shape[0], step, (h0, A0))


FEEDBACK_SHAPES = dict(xs=(4, 2, 3), W=(3, 3), h0=(2, 3), A0=(3, 3))


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in FEEDBACK_SHAPES.items()}))
def test_an_accumulator_the_body_reads_stays(args):
    args = tuple(args[name] for name in FEEDBACK_SHAPES)
    program, _, (by_cost, report) = optimized("feedback", lambda: egad.trace(feedback, *args))
    assert RULE not in report.fired()
    assert_same_results(egad.interpret(by_cost, *args), egad.interpret(program, *args))


def chained(xs, h0, A0, B0):
    """B's step reads A: A stays in the loop (B's einsum reads the stacked A's), B leaves."""
    def step(t, carry):
        h, A, B = carry
        x = xs[t]
        h = enp.tanh(x + h)
        return h, A + enp.transpose(x) @ h, B + (A @ enp.transpose(h)) @ h

    return egad.fori_loop(0, xs.shape[0], step, (h0, A0, B0))


CHAINED_SHAPES = dict(xs=(4, 2, 3), h0=(2, 3), A0=(3, 3), B0=(3, 3))


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in CHAINED_SHAPES.items()}))
def test_an_accumulator_another_one_reads_stays(args):
    args = tuple(args[name] for name in CHAINED_SHAPES)
    check("chained", lambda: egad.trace(chained, *args), args, batched=1)
    _, latest, _ = optimized("chained", None)
    (loop,) = [b for b in latest.program.region.bindings if b.op == "for"]
    assert loop.attrs["n_state"] == 2  # h and A


def test_saturating_again_batches_nothing_new():
    args = tuple(np.random.default_rng(2).normal(size=shape) for shape in RNN_SHAPES.values())
    encoding = encode(rnn_gradient(args))
    first = saturate(encoding, families=["batching"])
    second = saturate(encoding, families=["batching"])
    assert first.fired()[RULE] == 1 and RULE not in second.fired()
    assert second.nodes == first.nodes


# --- (c) the old and the new loop pop the same tapes --------------------------------------------------

def test_an_extraction_never_takes_outputs_from_both_loops():
    """With a target where the loop is latency-bound, dispatch nearly free and copies
    and stacks cheap (the new loop stacks its per-step operands), the
    greedy per-class choice takes dh0 from the new loop (a little cheaper) and dW, dU
    from the old one (their einsums cost more than the per-step matmuls hidden under
    the recurrence): both loops would pop the forward loop's tapes. `extract` sees the
    tape read twice and extracts again without one of the loops."""
    args = tuple(np.random.default_rng(3).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = rnn_gradient(args, wrt=(0, 1, 3))
    target = dataclasses.replace(TARGETS["cpu"], dispatch_seconds=1e-7, latency_seconds=1.0,
                                 flops_per_second=1e6, bytes_per_second=1e10, stacked_output_seconds=0.0)
    model = CostModel(target)
    encoding = encode(gradient)
    saturate(encoding, families=["batching"])
    snapshot = Snapshot.of(encoding.egraph)
    greedy = _Extractor(encoding, snapshot, model)
    assert _tape_read_twice(greedy.types, greedy.extraction()) is not None  # the hazard is real
    extraction = extract(encoding, snapshot, model)
    assert _tape_read_twice(greedy.types, extraction) is None
    program = decode(encoding, snapshot, extraction)
    assert sum(b.op == "for" for b in program.region.bindings) == 2  # forward and one reverse loop
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def invariant_row_factor(X, U, h, j, n):
    """dU += X[j]^T @ dz_t: the invariant factor X[j] may raise, and a loop of n trips may run none."""
    return enp.sum(egad.fori_loop(0, n, lambda t, a: enp.tanh(X[j] @ U + a), h))


def test_an_invariant_factor_that_may_raise_stays_in_a_loop_that_may_run_no_trip():
    """After the loop, einsum(X[j], dzs) read X[9] of a 3-row X where the loop, of zero
    trips, never reads it: the optimized gradient raised where the original returns. Found
    by fuzzing."""
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((3, 2, 4)), rng.standard_normal((4, 4)), rng.standard_normal((2, 4)),
            np.int64(1), np.int64(3))
    gradient = egad.value_and_grad(egad.trace(invariant_row_factor, *args), wrt=(0, 1, 2))
    result = Optimized(gradient, ["batching"])
    zero_trips = (*args[:3], np.int64(9), np.int64(0))
    assert_same_results(egad.interpret(result.program, *zero_trips), egad.interpret(gradient, *zero_trips),
                        "zero trips")
    assert_same_results(egad.interpret(result.program, *args), egad.interpret(gradient, *args), "three trips")
