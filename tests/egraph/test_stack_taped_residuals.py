"""rules/checkpoint.py's loop transformers `stack-taped-residuals`,
`recompute-taped-residuals` and `checkpoint-carried-states` (CONVENTIONS 4: judged by
running the program before and after).

A forward loop's tape pushes become stacked outputs and its reverse loop's pops rows of
them (store); a residual that is a few elementwise ops of others is rebuilt by the
reverse loop from their rows instead (recompute). (a) The intended effect: the store
alternative is in the e-graph for every taped residual, and the cost model takes it (no
tape op is left in an RNN's or an LSTM's gradient); one stacked forward loop serves
every reverse loop that pops its tapes; a residual the reverse loop only popped to
stack again (the weight gradient's h_{t-1}) is read from the forward loop's rows; an
LSTM's h_t = o_t * tanh(c_t) is recomputed from the two rows, not stored; the
recompute rule runs only once nothing else changes the e-graph; checkpointing the
carried state stacks one row of state a trip and recomputes the step's residuals in the
reverse loop, and is left out where the state is no smaller than the residuals. (b)
Semantics on Hypothesis inputs (float64, 1e-12), through the rule-preferring test
extractor: an RNN, a gate-by-gate LSTM, a scan run backwards, and loops the rules must
leave.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from egad import rules
from egad.egraph import Snapshot, decode, encode
from egad.egraph.enode import ENode
from egad.egraph.extraction import Extraction
from egad.egraph.schedule import Limits, saturate
from egad.extract import CostModel, _alternative_loops_taken, _Extractor, _linear_in_tapes, extract, predicted_cost
from egad.ir.program import walk_bindings
from egad.rules.checkpoint import RECOMPUTE, STACK, STATES
from tests.egraph.test_batch_weight_gradient import RNN_SHAPES, lstm_gradient, producer, reverse_loop, rnn_gradient
from tests.egraph.test_rules import RNN_SHAPES as CELL_SHAPES
from tests.egraph.test_rules import (GATED_SHAPES, SCAN_SHAPES, SETTINGS, Optimized, assert_same_results,
                                     check_family, floats, gated_cell, optimized, rnn)

TAPE_OPS = {"tape_alloc", "tape_push", "tape_pop"}


def cost_extracted(program, families):
    """encode -> saturate -> extract by cost -> decode; with the encoding, for its regions."""
    encoding = encode(program)
    report = saturate(encoding, families=list(families))
    snapshot = Snapshot.of(encoding.egraph)
    return decode(encoding, snapshot, extract(encoding, snapshot)), report, encoding


def ops(program) -> list[str]:
    return [b.op for b in walk_bindings(program.region)]


def forward_loop(program):
    return next(b for b in program.region.bindings if b.op == "for" and not b.attrs["reverse"])


def stacked_bytes(program) -> int:
    """Bytes of the forward loop's stacked outputs."""
    forward = forward_loop(program)
    return sum(int(np.prod(v.type.shape)) * 8 for v in forward.outputs[forward.attrs["n_state"]:])


def copies(encoding) -> list[int]:
    """The regions this rule copied, in the order it copied them."""
    return [info.copied_from[1] for _, info in sorted(encoding.regions.items())
            if info.copied_from is not None and info.copied_from[0] == STACK]


# --- (a) the intended effect -----------------------------------------------------------------------

def test_an_rnns_tapes_become_rows_the_forward_loop_stacks():
    args = tuple(np.random.default_rng(0).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = rnn_gradient(args)
    assert ops(gradient).count("tape_push") == 2 and ops(gradient).count("tape_pop") == 2  # h_t, h_{t-1}
    program, report, encoding = cost_extracted(gradient, ["checkpoint"])
    assert report.fired()[STACK] == 1 and copies(encoding) == [1, 2]  # the forward loop, then the reverse one
    assert not TAPE_OPS & set(ops(program))
    forward, backward = forward_loop(program), reverse_loop(program)
    assert forward.attrs["n_state"] == 1 and len(forward.outputs) == 1 + 2  # h, and the stacked h_t, h_{t-1}
    body = backward.regions[0]
    takes = [b for b in body.bindings if b.op == "take" and b.inputs[1] is body.params[0]]
    assert len(takes) == 3  # xs[i] as before, and row i of h_t and of h_{t-1}, where it popped them
    assert {id(v) for v in forward.outputs[1:]} <= {id(v) for v in backward.inputs}
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_a_residual_popped_only_to_be_stacked_again_is_the_forward_loops_rows():
    """batch-weight-gradient stacks the popped h_{t-1} for `dW = einsum(Hprev, dZ)`: with
    the residuals stacked, Hprev is the forward loop's own stacked output."""
    args = tuple(np.random.default_rng(1).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = rnn_gradient(args)
    program, report, encoding = cost_extracted(gradient, ["batching", "checkpoint"])
    assert report.fired()[STACK] == 2 and len(copies(encoding)) == 3  # one forward copy shared by two reverse
    assert not TAPE_OPS & set(ops(program))
    _, dW, _ = program.region.results
    add = producer(program, dW)
    (einsum,) = [producer(program, v) for v in add.inputs if producer(program, v).op == "einsum"]
    assert producer(program, einsum.inputs[0]) is forward_loop(program)
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_an_lstm_gradients_loops_hold_no_tape_op_under_the_default_rules():
    args, gradient = lstm_gradient()
    assert ops(gradient).count("tape_push") >= 6
    program, report, encoding = cost_extracted(gradient, [f.name for f in rules.default()])
    assert report.limit_hit is None and STACK in report.fired()
    assert copies(encoding).count(1) == 1  # the forward loop is copied once, whatever pops its tapes
    assert not TAPE_OPS & set(ops(program))
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def extracted_without_copies_of(encoding, snapshot, banned_rules: set[str]):
    """The cost extraction with the loops those transformers copied banned."""
    banned = frozenset(node for members in snapshot.nodes.values() for node in members
                       if node.head in ("For", "While") and encoding.regions[node.args[0]].copied_from is not None
                       and encoding.regions[node.args[0]].copied_from[0] in banned_rules)
    return _linear_in_tapes(_Extractor(encoding, snapshot, CostModel()).without(banned), banned)[1]


def test_an_lstms_h_t_is_recomputed_from_the_rows_of_o_t_and_tanh_c_t():
    """The recompute alternative, extracted with the other transformers' copies banned
    (on a CPU's constants, stacking h_t is cheaper, and the cost extraction takes that)."""
    args = tuple(np.random.default_rng(2).normal(size=shape) for shape in GATED_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))
    pushes = ops(gradient).count("tape_push")
    encoding = encode(gradient)
    report = saturate(encoding, families=["checkpoint"], limits=Limits(seconds=300))
    assert report.fired()[RECOMPUTE] == 1 and report.limit_hit is None
    snapshot = Snapshot.of(encoding.egraph)
    recomputing = extracted_without_copies_of(encoding, snapshot, {STACK, STATES})
    program = decode(encoding, snapshot, recomputing)
    cheapest = extract(encoding, snapshot)
    assert predicted_cost(encoding, snapshot, cheapest).total <= predicted_cost(encoding, snapshot, recomputing).total
    chosen = copies(encoding)
    assert not TAPE_OPS & set(ops(program))
    forward, backward = forward_loop(program), reverse_loop(program)
    stacked = len(forward.outputs) - forward.attrs["n_state"]
    assert stacked == pushes - 1, (stacked, pushes)  # h_t is not stacked: o_t * tanh(c_t) again
    body = backward.regions[0]
    rows = {id(b.outputs[0]) for b in body.bindings if b.op == "take" and b.inputs[1] is body.params[0]}
    assert any(b.op == "mul" and {id(v) for v in b.inputs} <= rows and b.inputs[0] is not b.inputs[1]
               for b in body.bindings)  # a product of two rows read this trip
    assert [encoding.regions[r].copied_from[2] for r in encoding.regions
            if encoding.regions[r].copied_from is not None and encoding.regions[r].copied_from[0] == RECOMPUTE
            and encoding.regions[r].copied_from[2]]  # the forward copy records what it stores
    assert chosen  # the stacked copies exist too: both alternatives are in the e-graph
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_recomputing_waits_until_nothing_else_changes_the_egraph():
    """A late transformer (Rule.late) runs in the schedule's second phase only: under a
    round limit that stops the first phase, it never runs."""
    args = tuple(np.random.default_rng(3).normal(size=shape) for shape in GATED_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))
    families = [f.name for f in rules.default()]
    early = saturate(encode(gradient), families=families, limits=Limits(rounds=2))
    assert early.fired().get(STACK, 0) >= 1 and RECOMPUTE not in early.fired()
    full = saturate(encode(gradient), families=families, limits=Limits(seconds=300))  # rounds, not a slow machine
    assert full.stopped_by == "saturated" and full.fired().get(RECOMPUTE, 0) >= 1
    assert full.rounds > early.rounds


def test_checkpointing_the_state_stacks_one_row_a_trip_and_recomputes_the_step():
    """The gate-by-gate LSTM's forward loop tapes every gate and tanh(c) (R = 8 rows of
    (2, 4) a trip); checkpointing its carried state stacks h and c (S = 2 rows) and the
    reverse loop recomputes the gates from them, matmuls included."""
    args = tuple(np.random.default_rng(5).normal(size=shape) for shape in GATED_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))
    stored = Optimized(gradient, ["checkpoint"], limits=Limits(rounds=1))  # the first phase only: stacking
    assert STACK in stored.chosen_rules() and STATES not in stored.report.fired()
    checkpointed = Optimized(gradient, ["checkpoint"])
    assert checkpointed.report.fired()[STATES] == 1 and STATES in checkpointed.chosen_rules()
    program = checkpointed.program
    assert not TAPE_OPS & set(ops(program))
    forward, backward = forward_loop(program), reverse_loop(program)
    n_state = forward.attrs["n_state"]
    assert [v.type.shape[1:] for v in forward.outputs[n_state:]] == [v.type.shape for v in forward.outputs[:n_state]]
    assert [b.op for b in backward.regions[0].bindings].count("matmul") > 2  # the gates again, then dh
    assert 3 * stacked_bytes(program) < stacked_bytes(stored.program)  # h and c a trip, against 7 residuals
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_the_cost_model_keeps_stored_rows_where_recomputing_the_step_costs_more():
    """An RNN step's matmul again in every reverse trip costs more than reading the
    stored rows back: the cost-based extraction takes no node of the states copy."""
    args = tuple(np.random.default_rng(6).normal(size=shape) for shape in GATED_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))
    program, report, encoding = cost_extracted(gradient, ["checkpoint"])
    assert report.fired()[STATES] == 1
    states_copies = [r for r, info in encoding.regions.items()
                     if info.copied_from is not None and info.copied_from[0] == STATES]
    assert len(states_copies) == 2  # the forward and the reverse loop
    forward = forward_loop(program)
    assert len(forward.outputs) - forward.attrs["n_state"] > 2  # the residuals' rows, not the state's
    assert_same_results(egad.interpret(program, *args), egad.interpret(gradient, *args))


def test_a_copys_cheaper_forward_loop_does_not_bind_the_extraction_to_its_dearer_reverse_loop():
    """The states copy of an RNN's forward loop stacks one row a trip instead of two, so
    the greedy pass takes it, and with it the reverse loop that recomputes the step. The
    extraction without that transformer's loops is tried too (egad/extract.py,
    `_copied_loops_taken`): it costs what the extraction before the copy was made did."""
    args = tuple(np.random.default_rng(8).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = rnn_gradient(args)
    costs = []
    for rounds in (1, Limits().rounds):  # stacking only; then the late states copy too
        encoding = encode(gradient)
        report = saturate(encoding, families=["checkpoint"], limits=Limits(rounds=rounds))
        snapshot = Snapshot.of(encoding.egraph)
        costs.append(predicted_cost(encoding, snapshot, extract(encoding, snapshot)).total)
    assert STATES in report.fired() and costs[1] == pytest.approx(costs[0])


def test_with_three_transformers_copies_the_extraction_is_no_dearer_than_with_stacking_alone():
    """A gate-by-gate LSTM cell's loops get copies from all three checkpoint transformers.
    Banning the recompute copies the greedy pass takes let the states copies in, dearer
    than stacking alone; so each transformer's copies are also tried alone."""
    args = tuple(np.random.default_rng(3).normal(size=shape) for shape in GATED_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))
    costs = []
    for rounds in (1, Limits().rounds):  # stacking only; then the late recompute and states copies too
        encoding = encode(gradient)
        report = saturate(encoding, families=["checkpoint"], limits=Limits(rounds=rounds, seconds=300))
        snapshot = Snapshot.of(encoding.egraph)
        costs.append(predicted_cost(encoding, snapshot, extract(encoding, snapshot)).total)
    assert {STACK, RECOMPUTE, STATES} <= set(report.fired())
    assert costs[1] <= costs[0] * (1 + 1e-9)


def linear_recurrence(xs, W, h0):
    """h' = h @ W + x: the adjoint reads only h_{t-1}, which is the state itself."""
    h = egad.fori_loop(0, xs.shape[0], lambda t, h: h @ W + xs[t], h0)
    return enp.sum(h * h)


def test_a_state_no_smaller_than_the_residuals_is_not_checkpointed():
    args = tuple(np.random.default_rng(7).normal(size=shape) for shape in SCAN_SHAPES.values())
    gradient = egad.value_and_grad(egad.trace(linear_recurrence, *args), wrt=(0, 1, 2))
    checkpointed = Optimized(gradient, ["checkpoint"])
    assert STACK in checkpointed.report.fired() and STATES not in checkpointed.report.fired()
    assert_same_results(egad.interpret(checkpointed.program, *args), egad.interpret(gradient, *args))


# --- (b) semantics -------------------------------------------------------------------------------------

def rnn_sum_of_squares(U, W, xs, h0):
    return enp.sum(rnn(U, W, xs, h0) ** 2)


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in CELL_SHAPES.items()}))
def test_rnn_gradient_keeps_results(args):
    args = tuple(args[name] for name in CELL_SHAPES)
    program = optimized("stack-rnn-gradient", lambda: egad.value_and_grad(egad.trace(rnn_sum_of_squares, *args),
                                                                                     wrt=(0, 1, 3)),
                        ["checkpoint"])
    check_family(program, args, {STACK})


_BY_COST: dict = {}


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in GATED_SHAPES.items()}))
def test_gate_by_gate_lstm_gradient_keeps_results(args):
    """The rule-preferring extractor takes the latest copies (the checkpointed states);
    the cost-based one keeps stored and recomputed rows: both interpret as written."""
    args = tuple(args[name] for name in GATED_SHAPES)
    families = ["batching", "fusion", "checkpoint"]
    program = optimized("stack-gated-gradient", lambda: egad.value_and_grad(egad.trace(gated_cell, *args),
                                                                            wrt=tuple(range(11))), families)
    check_family(program, args, {STACK, RECOMPUTE, STATES})
    assert STATES in program.chosen_rules() and not TAPE_OPS & set(ops(program.program))
    if "gated" not in _BY_COST:  # one saturation for every example: the program's shape is the same
        _BY_COST["gated"] = cost_extracted(program.original, families)
    by_cost, _, _ = _BY_COST["gated"]
    forward = forward_loop(by_cost)
    assert len(forward.outputs) - forward.attrs["n_state"] > forward.attrs["n_state"]  # residuals' rows, not states
    assert not TAPE_OPS & set(ops(by_cost))
    assert_same_results(egad.interpret(by_cost, *args), egad.interpret(program.original, *args))


def backward_scan(xs, W, h0):
    """A scan run from the last step to the first: its adjoint loop runs forwards."""
    def step(h, x):
        h = enp.tanh(x @ W + h)
        return h, h * h

    h, ys = egad.scan(step, h0, xs, reverse=True)
    return enp.sum(ys) + enp.sum(h)


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in SCAN_SHAPES.items()}))
def test_a_backward_scans_gradient_keeps_results(args):
    args = tuple(args[name] for name in SCAN_SHAPES)
    program = optimized("stack-backward-scan", lambda: egad.value_and_grad(egad.trace(backward_scan, *args),
                                                                           wrt=(0, 1, 2)), ["checkpoint"])
    check_family(program, args, {STACK})


def from_one(xs, W, h0):
    """A loop from 1: its rows would be stacked at i - 1, so the rule leaves it."""
    h = egad.fori_loop(1, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W + h), h0)
    return enp.sum(h * h)


def until_small(xs, W, h0):
    """A while loop: its residuals are kept on tapes whose length is known only at run time."""
    def body(carry):
        t, h = carry
        return t + 1, enp.tanh(xs[t] @ W + h)

    _, h = egad.while_loop(lambda carry: carry[0] < xs.shape[0], body, (0, h0))
    return enp.sum(h * h)


@SETTINGS
@given(args=st.fixed_dictionaries({name: floats(*shape) for name, shape in SCAN_SHAPES.items()}))
def test_loops_the_rule_does_not_fit_are_left_as_they_are(args):
    args = tuple(args[name] for name in SCAN_SHAPES)
    for name, fn in (("stack-from-one", from_one), ("stack-while", until_small)):
        program = optimized(name, lambda fn=fn: egad.value_and_grad(egad.trace(fn, *args), wrt=(0, 1, 2)),
                            ["checkpoint"])
        assert STACK not in program.report.fired(), name
        assert "tape_push" in ops(program.program)
        assert_same_results(egad.interpret(program.program, *args), egad.interpret(program.original, *args), name)


def test_an_extraction_takes_each_loops_outputs_from_one_of_its_alternatives():
    """A reverse loop and its copies (batch-weight-gradient's, this family's) pop no tape
    the others pop once they read stacked rows, so nothing but the extractor keeps it
    from taking one output from each and running both: `_alternative_loops_taken`
    finds such a pair, and `extract` resolves it like a tape read twice."""
    args = tuple(np.random.default_rng(4).normal(size=shape) for shape in RNN_SHAPES.values())
    gradient = rnn_gradient(args)
    encoding = encode(gradient)
    saturate(encoding, families=["batching", "checkpoint"])
    snapshot = Snapshot.of(encoding.egraph)
    extraction = extract(encoding, snapshot)
    assert _alternative_loops_taken(snapshot, extraction) is None
    loops = {cid: node for cid, node in extraction.choice.items() if node.head == "For"}
    outputs = {cid: {snapshot.index.get(ENode("Get", (cid, k))) for k in range(len(node.args[4]))} - {None}
               for cid, node in loops.items()}
    alternatives = [(cid, other, node) for cid in loops for other, members in snapshot.nodes.items()
                    for node in members if node.head == "For" and other not in loops
                    and outputs[cid] & {snapshot.index.get(ENode("Get", (other, k))) for k in range(len(node.args[4]))}]
    assert alternatives, "no alternative loop in the e-graph"
    chosen, other, node = alternatives[0]
    both = Extraction(extraction.roots, {**extraction.choice, other: node})
    assert set(map(id, _alternative_loops_taken(snapshot, both))) == {id(loops[chosen]), id(node)}
    assert_same_results(egad.interpret(decode(encoding, snapshot, extraction), *args),
                        egad.interpret(gradient, *args))
