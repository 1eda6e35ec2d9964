"""egad/extract.py: the cost-based extractor (DESIGN §6).

(a) On an unrewritten e-graph it extracts the program that was inserted, for every
corpus program and gradient. (b) With alternatives unioned in by test-local rewrites
it picks the cheaper one and the decoded program computes the same values. (c) The
critical-path model and the flat one choose differently on a latency-bound loop.
(d) It never picks, for a use outside a loop, a node that reads that loop's Args.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from egglog import rewrite, ruleset, union, vars_

import egad
import egad.numpy as enp
from egad.cost_model import TARGETS, Work, loop_time, recurrence_per_trip, target_constants
from egad.egraph import Snapshot, decode, encode, extract_inserted
from egad.egraph.extraction import Extraction
from egad.pytree import flatten
from egad.egraph.language import Term, literal, op
from egad.errors import EgadError
from egad.extract import CostModel, extract, predicted_cost, trip_count_guesses
from egad.ir import ops
from egad.ir.types import TapeType, TensorType
from tests.ad.gradcheck import scalar_loss, to_float64
from tests.egraph.test_roundtrip import GRADIENT_PROGRAMS, PROGRAMS, _assert_same_results


def _extract(program, rules=None, model=None, unions=()):
    """Encode, apply test-local rules and unions, extract by cost, decode."""
    encoding = encode(program)
    if rules is not None:
        encoding.egraph.run(rules)
    for a, b in unions:
        encoding.egraph.register(union(a).with_(b))
    snapshot = Snapshot.of(encoding.egraph)
    extraction = extract(encoding, snapshot, model)
    return encoding, snapshot, extraction, decode(encoding, snapshot, extraction)


def _loop_body_ops(program) -> list[str]:
    (loop,) = [b for b in program.region.bindings if b.op == "for"]
    return [b.op for b in loop.regions[0].bindings]


# --- (a) no rewrites: the inserted program comes back ----------------------------------

def _check_unrewritten(program, args, context):
    encoding = encode(program)
    snapshot = Snapshot.of(encoding.egraph)
    extraction = extract(encoding, snapshot)
    trivial = extract_inserted(snapshot, encoding.provenance.resolve(snapshot), encoding.roots)
    assert extraction.choice == trivial.choice, context  # one node per class: nothing to choose
    decoded = decode(encoding, snapshot, extraction)
    _assert_same_results(egad.interpret(decoded, *args), egad.interpret(program, *args), context)
    assert predicted_cost(encoding, snapshot, extraction).seconds > 0


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_unrewritten_corpus_program_extracts_itself(program):
    args = program.make_args(np.random.default_rng(0))
    _check_unrewritten(egad.trace(program.fn, *args, static_argnums=program.static_argnums), args, program.name)


@pytest.mark.parametrize("program", GRADIENT_PROGRAMS, ids=[p.name for p in GRADIENT_PROGRAMS])
def test_unrewritten_corpus_gradient_extracts_itself(program):
    args = to_float64(program.make_args(np.random.default_rng(1)))
    traced = egad.trace(scalar_loss(program.fn, 0), *args, static_argnums=program.static_argnums)
    _check_unrewritten(egad.value_and_grad(traced, wrt=program.differentiable_argnums), args, program.name)


# --- (b) the cheaper alternative wins ---------------------------------------------------

def test_picks_the_cheaper_of_two_equal_terms():
    def f(x):
        return enp.sin(x + x)

    args = (np.linspace(-1, 1, 1000),)
    program = egad.trace(f, *args)
    (a,) = vars_("a", Term)
    # x + x reads x twice; x * 2 reads it once: fewer bytes moved
    doubling = ruleset(rewrite(op.add(a, a)).to(op.mul(a, literal(2.0, "float64"))))
    *_, decoded = _extract(program, doubling)
    ops_ = [b.op for b in decoded.region.bindings]
    assert "mul" in ops_ and "add" not in ops_
    _assert_same_results(egad.interpret(decoded, *args), egad.interpret(program, *args), "x * 2")


def test_batches_an_input_projection_out_of_the_loop():
    def rnn(xs, U, W, h0):
        return egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0)

    rng = np.random.default_rng(0)
    args = (rng.normal(size=(16, 4, 8)), rng.normal(size=(8, 8)) / 4, rng.normal(size=(8, 8)) / 4, np.zeros((4, 8)))
    program = egad.trace(rnn, *args)
    X, U, i = vars_("X U i", Term)
    batching = ruleset(rewrite(op.matmul(op.take(X, i, axis=0), U)).to(op.take(op.matmul(X, U), i, axis=0)))
    encoding, snapshot, extraction, decoded = _extract(program, batching)
    top = [b.op for b in decoded.region.bindings]
    assert top.count("matmul") == 1 and _loop_body_ops(decoded).count("matmul") == 1  # only h @ W stays
    np.testing.assert_allclose(egad.interpret(decoded, *args), egad.interpret(program, *args), rtol=1e-12)
    inserted = extract_inserted(snapshot, encoding.provenance.resolve(snapshot), encoding.roots)
    assert predicted_cost(encoding, snapshot, extraction).total < predicted_cost(encoding, snapshot, inserted).total


# --- (c) the critical path changes the choice --------------------------------------------

def _column_scaled_recurrence():
    """h' = (h @ W) * s_t, with the alternative h' = h @ (W * s_t) unioned in: the
    scaling moves off the recurrence onto W (more work: n^2 instead of n), leaving
    one op on the loop-carried chain instead of two."""
    def f(W, S, h0):
        return egad.fori_loop(0, S.shape[0], lambda t, h: (h @ W) * S[t], h0)

    n, trips = 256, 64
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(n, n)).astype("float32") / 16, rng.normal(size=(trips, 1, n)).astype("float32"),
            rng.normal(size=(1, n)).astype("float32"))
    h, W, s = Term.arg(1, 1), Term.arg(0, 0), op.take(Term.arg(0, 1), Term.arg(1, 0), axis=0)
    return egad.trace(f, *args), args, [(op.mul(op.matmul(h, W), s), op.matmul(h, op.mul(W, s)))]


def test_critical_path_and_flat_models_choose_differently_on_a_latency_bound_loop():
    program, args, unions = _column_scaled_recurrence()
    weighted = CostModel.for_target("cuda")
    flat = CostModel.for_target("cuda", critical_path=False)
    encoding, snapshot, by_weighted, weighted_program = _extract(program, model=weighted, unions=unions)
    by_flat = extract(encoding, snapshot, flat)
    flat_program = decode(encoding, snapshot, by_flat)
    # the weighted model scales W and keeps the matmul alone on the chain
    assert _loop_body_ops(weighted_program) == ["take", "mul", "matmul"]
    assert _loop_body_ops(flat_program) == ["matmul", "take", "mul"]
    # each model prices its own choice below the other's (cost_model's worked example)
    assert predicted_cost(encoding, snapshot, by_weighted, weighted).seconds == pytest.approx(64 * 19e-6, rel=0.01)
    assert predicted_cost(encoding, snapshot, by_flat, weighted).seconds == pytest.approx(64 * 22e-6, rel=0.01)
    assert predicted_cost(encoding, snapshot, by_flat, flat).total < predicted_cost(
        encoding, snapshot, by_weighted, flat).total
    expected = egad.interpret(program, *args)
    for decoded in (weighted_program, flat_program):  # f32 rounding, reassociated over 64 trips
        np.testing.assert_allclose(egad.interpret(decoded, *args), expected, atol=1e-4 * np.abs(expected).max())
    # on the CPU the extra n^2 work is not hidden behind a short latency: both keep the original
    assert _loop_body_ops(decode(encoding, snapshot, extract(encoding, snapshot, CostModel.for_target("llvm")))) \
        == ["matmul", "take", "mul"]
    # which one is faster on a GPU is for benchmarks/ to measure (issue 5, item 6)


# --- (d) scope ---------------------------------------------------------------------------

def test_an_alternative_reading_a_loop_arg_is_never_used_outside_the_loop():
    def f(x, c0):
        c = c0 + 1.0
        h, _ = egad.fori_loop(0, 4, lambda t, s: (s[0] * s[1], s[1]), (x, c))
        return h + c * 2.0

    args = (np.full(3, 1.5), np.full(3, 0.5))
    program = egad.trace(f, *args)
    # the state c passes through the loop unchanged, so inside the loop Arg(1, 2) equals
    # c0 + 1 (sound): one class, whose Arg node is free inside the loop and out of scope outside
    c, carried = op.add(Term.arg(0, 1), literal(1.0, "float64")), Term.arg(1, 2)
    encoding, snapshot, extraction, decoded = _extract(program, unions=[(carried, c)])
    merged = snapshot.class_of(encoding.bound[1])
    assert {n.head for n in snapshot.nodes[merged]} == {"Arg", "Op2"}
    assert extraction.choice[merged].head == "Op2"  # used by the loop's init and after the loop
    _assert_same_results(egad.interpret(decoded, *args), egad.interpret(program, *args), "scope")
    # the cheaper Arg node, picked everywhere, would be out of scope: decoding refuses it
    arg_node = next(n for n in snapshot.nodes[merged] if n.head == "Arg")
    with pytest.raises(EgadError, match="out of scope"):
        decode(encoding, snapshot, Extraction(extraction.roots, {**extraction.choice, merged: arg_node}))


def test_inside_the_loop_only_the_arg_node_is_the_cheaper_choice():
    def f(x, c0):
        c = c0 + 1.0  # only the loop reads it: the class is used inside the loop alone
        h, _ = egad.fori_loop(0, 4, lambda t, s: (s[0] * s[1], s[1]), (x, c))
        return h

    args = (np.full(3, 1.5), np.full(3, 0.5))
    program = egad.trace(f, *args)
    c, carried = op.add(Term.arg(0, 1), literal(1.0, "float64")), Term.arg(1, 2)
    encoding, snapshot, extraction, decoded = _extract(program, unions=[(carried, c)])
    # the loop's init is outside the loop, so even here the class keeps its outer node
    assert extraction.choice[snapshot.class_of(encoding.bound[1])].head == "Op2"
    _assert_same_results(egad.interpret(decoded, *args), egad.interpret(program, *args), "scope inside")


# --- the cost model's parts ----------------------------------------------------------------

def test_trip_guesses_come_from_bounds_spec_symbols_and_overrides():
    def f(xs, h):
        return egad.fori_loop(0, xs.shape[0], lambda t, h: h * xs[t], h)

    def g(x):
        return egad.while_loop(lambda v: v < 100.0, lambda v: v * 2.0, x)

    static = encode(egad.trace(f, np.ones((5, 3)), np.ones(3)))
    symbolic = encode(egad.trace(f, egad.Spec(("T", 3), "float64"), egad.Spec((3,), "float64")))
    unbounded = encode(egad.trace(g, 1.0))
    assert trip_count_guesses(static, Snapshot.of(static.egraph)) == {1: 5}
    assert trip_count_guesses(symbolic, Snapshot.of(symbolic.egraph)) == {1: 64}
    assert trip_count_guesses(symbolic, Snapshot.of(symbolic.egraph), CostModel(trip_guesses={"T": 1000})) == {1: 1000}
    assert trip_count_guesses(unbounded, Snapshot.of(unbounded.egraph), CostModel(default_guess=7)) == {1: 7}
    assert trip_count_guesses(unbounded, Snapshot.of(unbounded.egraph), CostModel(trip_guesses={1: 3})) == {1: 3}


def test_checkpoint_segments_tell_the_cost_model_their_trips():
    """A segment loop's bounds are computed (every-k: start + k capped at the end;
    binomial: read from a table), so its `trip_guess` attr says how many trips it runs
    on average, in the gradient's forward copy and adjoint loops too; not the default."""
    from egad.ad import checkpoint

    def rnn(W, xs, h):
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(h @ W + xs[t]), h))

    args = (np.eye(3) * 0.5, np.ones((12, 3)) * 0.1, np.ones((2, 3)))
    program = egad.trace(rnn, *args)
    model = CostModel(default_guess=1000)  # a guess no segment runs
    every_5 = egad.value_and_grad(checkpoint.segment(program, 0, 5), wrt=(0,))  # 12 % 5: no static trip_dim
    encoded = encode(every_5)
    guesses = trip_count_guesses(encoded, Snapshot.of(encoded.egraph), model)
    # the loop over 3 segments (its forward copy, its adjoint) and the segment loop (copied, re-run, adjoint)
    assert sorted(guesses.values()) == [3, 3, 5, 5, 5], guesses
    cut = egad.value_and_grad(checkpoint.segment_at(program, 0, ((0, 6, 12), (0, 4, 6, 9, 12))), wrt=(0,))
    encoded = encode(cut)
    guesses = trip_count_guesses(encoded, Snapshot.of(encoded.egraph), model)
    # 2 segments, each holding 2 sub-segments of 3 trips on average: the loop over segments (forward,
    # adjoint), over sub-segments (copied, re-run, adjoint), over trips (in both copies, re-run, adjoint)
    assert sorted(guesses.values()) == [2] * 5 + [3] * 4, guesses
    np.testing.assert_allclose(egad.interpret(cut, *args)[1][0],
                               egad.interpret(egad.value_and_grad(program, wrt=(0,)), *args)[1][0], rtol=1e-12)


def test_gradient_loops_take_the_symbol_of_their_forward_loop():
    def f(W, xs, h):
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W + h), h))

    specs = (egad.Spec((3, 3), "float64"), egad.Spec(("T", 2, 3), "float64"), egad.Spec((2, 3), "float64"))
    gradient = egad.value_and_grad(egad.trace(f, *specs), wrt=(0,))
    encoding = encode(gradient)
    snapshot = Snapshot.of(encoding.egraph)
    model = CostModel(trip_guesses={"T": 1000})
    assert set(trip_count_guesses(encoding, snapshot, model).values()) == {1000}
    cost = predicted_cost(encoding, snapshot, extract(encoding, snapshot, model), model)
    assert cost.tape_bytes == 1000 * 2 * 3 * 8  # tanh's output, f64[2,3] a trip (xs[t] is read again)


def test_recurrence_is_the_maximum_mean_cycle_of_the_state_graph():
    assert recurrence_per_trip({}, 2) == 0.0
    assert recurrence_per_trip({(0, 0): 2.0, (0, 1): 9.0, (1, 1): 1.0}, 2) == 2.0  # 0 -> 1 is no cycle
    assert recurrence_per_trip({(0, 1): 3.0, (1, 0): 5.0}, 2) == 4.0  # a swap: 8 s every 2 trips
    assert recurrence_per_trip({(0, 1): 3.0}, 2) == 0.0  # nothing recurs: trips can overlap
    assert loop_time(64, recurrence=6e-6, work=0.1e-6, kernels=3) == (64 * 6e-6, 256)
    assert loop_time(64, recurrence=6e-6, work=0.1e-6, kernels=3, critical_path=False) == (64 * 0.1e-6, 256)


def test_every_op_but_control_is_priced():
    assert all(op_.cost is not None for op_ in ops.OPS.values() if op_.family != "control")
    f32 = TensorType((32, 256), "float32")
    matmul = ops.OPS["matmul"].cost([f32, TensorType((256, 64), "float32")], [TensorType((32, 64), "float32")], {})
    assert matmul == Work(2 * 32 * 64 * 256, 4 * (32 * 256 + 256 * 64 + 32 * 64), rows=32)
    assert ops.OPS["reshape"].cost([f32], [TensorType((256, 32), "float32")], {"shape": (256, 32)}).bytes == 0
    assert target_constants("llvm -mcpu=skylake") is TARGETS["cpu"] and target_constants("cuda") is TARGETS["gpu"]
    with pytest.raises(ValueError):
        target_constants("tpu")


def test_a_matmul_of_few_rows_runs_at_a_lower_rate_on_the_cpu():
    """An RNN step's 32-row matmul runs below the rate of the same flops on 2048 rows
    (benchmarks/calibrate.py measures both): batching it out of its loop pays."""
    cpu, gpu = TARGETS["cpu"], TARGETS["gpu"]
    step, batched, other = Work(1e9, 0.0, rows=32), Work(1e9, 0.0, rows=2048), Work(1e9, 0.0)
    assert step.seconds(cpu) > 1.15 * batched.seconds(cpu)
    assert batched.seconds(cpu) == pytest.approx(other.seconds(cpu), rel=0.02)  # rows=None: the peak rate
    assert step.seconds(gpu) == other.seconds(gpu)  # not modelled on the GPU


def test_a_tape_push_costs_its_host_time_beyond_its_bytes_on_the_cpu():
    """egad's runtime copies a pushed value into a host slab in Python: about 16 us a
    32x256 float32 value against ~6 us for a loop's stacked row (benchmarks/calibrate.py).
    A pop hands out a view of its row and is priced as its bytes."""
    row = TensorType((32, 256), "float32")
    tape = TapeType(row)
    push = ops.OPS["tape_push"].cost([tape, row], [tape], {})
    pop = ops.OPS["tape_pop"].cost([tape], [row, tape], {})
    copy = Work(0.0, 2 * 32 * 256 * 4)
    cpu = TARGETS["cpu"]
    assert push.tape_pushes == 1 and pop.tape_pushes == 0
    assert push.seconds(cpu) == pytest.approx(copy.seconds(cpu) + cpu.tape_push_seconds)
    assert pop.seconds(cpu) == pytest.approx(copy.seconds(cpu))
    assert cpu.tape_push_seconds > 2 * cpu.dispatch_seconds


def test_each_run_of_a_loop_pays_for_its_stacked_outputs():
    """A loop's stacked outputs (a scan's ys) cost their buffer's set-up per run of the
    loop, beyond their rows: an inner scan of two outputs run by 5 outer trips pays it
    10 times (what makes stacking rows in a short inner loop a loss)."""
    def nested(x, xs):
        def outer(i, h):
            h, (a, b) = egad.scan(lambda c, row: (c + row, (c * 2.0, c * 3.0)), h, xs)
            return h + enp.sum(a) + enp.sum(b)
        return egad.fori_loop(0, 5, outer, x)

    encoding, snapshot, extraction, _ = _extract(egad.trace(nested, np.ones(3), np.ones((4, 3))))
    cpu = TARGETS["cpu"]
    assert cpu.stacked_output_seconds > cpu.dispatch_seconds
    free = CostModel(dataclasses.replace(cpu, stacked_output_seconds=0.0))
    priced, unpriced = (predicted_cost(encoding, snapshot, extraction, model).seconds for model in (CostModel(), free))
    assert priced - unpriced == pytest.approx(5 * 2 * cpu.stacked_output_seconds)


def test_a_loop_in_a_branch_costs_its_share():
    def f(x, p):
        return egad.cond(p > 0, lambda x: egad.fori_loop(0, 100, lambda i, v: enp.sin(v), x), lambda x: x, x)

    args = (np.ones(1000), 1.0)
    program = egad.trace(f, *args)
    encoding = encode(program)
    snapshot = Snapshot.of(encoding.egraph)
    extraction = extract(encoding, snapshot)
    branchy = predicted_cost(encoding, snapshot, extraction).seconds
    unconditional = encode(egad.trace(lambda x: egad.fori_loop(0, 100, lambda i, v: enp.sin(v), x), args[0]))
    snapshot_u = Snapshot.of(unconditional.egraph)
    loop = predicted_cost(unconditional, snapshot_u, extract(unconditional, snapshot_u)).seconds
    assert branchy == pytest.approx(loop / 2, rel=0.05)  # each branch taken half the time
    _assert_same_results(egad.interpret(decode(encoding, snapshot, extraction), *args),
                         egad.interpret(program, *args), "branch")



def test_four_gate_matmuls_sharing_an_operand_are_extracted_as_one(monkeypatch):
    """Greedy extraction charges the fused matmul in full to each gate's class, so
    its slices never win class by class; `extract` tries the four classes together."""
    from egad import extract as extract_module
    from egad.optimizer import optimize_program
    from tests.egraph.test_rules import GATED_SHAPES, gated_cell

    rng = np.random.default_rng(0)
    args = tuple(rng.standard_normal(shape) for shape in GATED_SHAPES.values())
    program = egad.trace(gated_cell, *args)
    fused = optimize_program(program, ["fusion"], check_args=args)
    assert fused.fallback is None and fused.chosen["fuse-shared-operand-matmuls"] >= 2
    from egad.ir.program import walk_bindings

    matmuls = [b for b in walk_bindings(fused.program.region) if b.op == "matmul"]
    assert len(matmuls) == 2  # x @ [Wi Wf Wg Wo] and h @ [Ui Uf Ug Uo], where eight were written
    _assert_same_results(egad.interpret(fused.program, *args), egad.interpret(program, *args), "gated cell")
    assert fused.predicted_after.seconds < fused.predicted_before.seconds

    from egad import optimizer

    monkeypatch.setattr(extract_module, "MAX_SHARING_TRIES", 0)
    monkeypatch.setattr(optimizer, "_CACHE", {})
    greedy = optimize_program(egad.trace(gated_cell, *args), ["fusion"])
    assert greedy.chosen["fuse-shared-operand-matmuls"] == 0


def test_the_shared_fused_input_projection_is_batched_out_of_the_loop():
    """The slices of one fused, batched `xs @ [Wi Wf Wg Wo]` serve four gates only when
    the four classes are made to read them together: banning the gates' chosen nodes
    alone left each gate to pick its own in-loop matmul, and the trial was rejected."""
    from egad.ir.program import walk_bindings
    from egad.optimizer import optimize_program
    from tests.egraph.test_rules import gated_cell

    T, B, I, H = 16, 32, 128, 256
    rng = np.random.default_rng(0)
    shapes = [(T, B, I), *[(I, H)] * 4, *[(H, H)] * 4, (B, H), (B, H)]
    args = tuple((rng.standard_normal(shape) * 0.05).astype("float32") for shape in shapes)
    program = egad.trace(gated_cell, *args)
    optimized = optimize_program(program, ["batching", "fusion"])
    assert optimized.fallback is None
    top = [b for b in optimized.program.region.bindings if b.op == "matmul"]
    (loop,) = [b for b in optimized.program.region.bindings if b.op == "for"]
    in_loop = [b for b in walk_bindings(loop.regions[0]) if b.op == "matmul"]
    assert [b.outputs[0].type.shape for b in top] == [(T, B, 4 * H)]  # one batched matmul for all four gates
    assert [b.outputs[0].type.shape for b in in_loop] == [(B, 4 * H)]  # h @ [Ui Uf Ug Uo]
    # float32 products of fused weights round differently from the four separate ones (BLAS blocks them otherwise)
    np.testing.assert_allclose(egad.interpret(optimized.program, *args), egad.interpret(program, *args), rtol=1e-5)


def test_the_weight_gradients_of_fused_gates_are_one_contraction_per_weight(monkeypatch):
    """After the reverse loop, the weight gradients of four gates are four contractions
    of `xs` and four of the stacked h, each with one gate's dz. The loop stacks the four
    dz concatenated (`stack-concatenated-rows`) and one contraction per operand serves
    all four gates (`fuse-einsums-of-slices`): charged in full to each gate's class, it
    wins only when `extract` tries the four classes together."""
    from egad import extract as extract_module
    from egad import optimizer
    from egad.optimizer import optimize_program
    from tests.egraph.test_rules import gated_cell

    T, B, I, H = 16, 8, 16, 32
    rng = np.random.default_rng(0)
    shapes = [(T, B, I), *[(I, H)] * 4, *[(H, H)] * 4, (B, H), (B, H)]
    args = tuple((rng.standard_normal(shape) * 0.2).astype("float32") for shape in shapes)
    gradient = egad.value_and_grad(egad.trace(gated_cell, *args), wrt=tuple(range(11)))

    def weight_contractions(program) -> list:
        return sorted(b.outputs[0].type.shape for b in program.region.bindings
                      if b.op == "einsum" and b.attrs["spec"] == "tki,tkj->ij")

    families = ["batching", "fusion", "checkpoint"]  # checkpoint: the reverse loop's tape-free copy
    optimized = optimize_program(gradient, families, check_args=args)
    assert optimized.fallback is None
    assert weight_contractions(gradient) == []  # AD accumulates them in the reverse loop
    assert weight_contractions(optimized.program) == [(I, 4 * H), (H, 4 * H)]
    reverse = next(b for b in optimized.program.region.bindings if b.op == "for" and b.attrs["reverse"])
    stacked = [v.type.shape for v in reverse.outputs[reverse.attrs["n_state"]:]]
    assert (T, B, 4 * H) in stacked and (T, B, H) not in stacked  # the four dz in one row a step
    got, want = (flatten(egad.interpret(p, *args))[0] for p in (optimized.program, gradient))
    for got_leaf, want_leaf in zip(got, want):
        np.testing.assert_allclose(got_leaf, want_leaf, rtol=1e-4, atol=1e-5)

    monkeypatch.setattr(extract_module, "MAX_SHARING_TRIES", 0)  # class by class only
    monkeypatch.setattr(optimizer, "_CACHE", {})
    greedy = optimize_program(gradient, families)
    assert len(weight_contractions(greedy.program)) == 8
