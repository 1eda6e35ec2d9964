"""Every-k checkpointing (egad/ad/checkpoint.py): segmenting a loop keeps the primal's
results, the gradient of a segmented program equals the store-all gradient and
finite differences, its peak tape memory falls as planned, `plan` fits a budget,
and `egad.optimize(memory_budget=...)` builds it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.ad import checkpoint
from egad.errors import ArgumentError, EgadError
from egad.ir.program import walk_bindings

from benchmarks.memory import two_loops_loss

from .gradcheck import assert_gradients_match

T, B, H, I = 12, 2, 4, 3


def rnn_loss(W, U, xs, h0):
    def step(t, carry):
        h, total = carry
        h = enp.tanh(xs[t] @ U + h @ W)
        return h, total + enp.sum(h * h)

    h, total = egad.fori_loop(0, xs.shape[0], step, (h0, enp.zeros((), xs.dtype)))
    return total + enp.sum(h)


def scan_loss(W, U, xs, h0, reverse=False):
    def step(h, x):
        h = enp.tanh(x @ U + h @ W)
        return h, enp.sin(h)

    h, ys = egad.scan(step, h0, xs, reverse=reverse)
    return enp.sum(ys * ys) + enp.sum(h)


def nested_loss(W, U, xs, h0):
    def step(t, h):
        def layer(_, g):
            return enp.tanh(g @ W)
        return egad.fori_loop(0, 2, layer, enp.tanh(xs[t] @ U + h))

    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)


def arguments(seed=0, dtype=np.float64, steps=T):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((H, H)) * 0.5).astype(dtype), rng.standard_normal((I, H)).astype(dtype),
            rng.standard_normal((steps, B, I)).astype(dtype), (rng.standard_normal((B, H)) * 0.1).astype(dtype))


def _store_all(program, args):
    stats = egad.RunStats()
    value = egad.interpret(egad.value_and_grad(program, wrt=(0, 1, 3)), *args, stats=stats)
    return value, stats.peak_tape_bytes


@pytest.mark.parametrize("k", [1, 2, 5, 12])
def test_segmenting_keeps_the_primal_and_its_gradient(k):
    args = arguments()
    program = egad.trace(rnn_loss, *args)
    segmented = checkpoint.segment(program, 0, k)
    np.testing.assert_allclose(egad.interpret(segmented, *args), egad.interpret(program, *args), rtol=1e-12)
    (want_value, want_grads), _ = _store_all(program, args)
    got_value, got_grads = egad.interpret(egad.value_and_grad(segmented, wrt=(0, 1, 3)), *args)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_outputs_and_reverse_loops_segment_when_k_divides_the_trips(reverse):
    args = arguments(seed=1)
    program = egad.trace(lambda *a: scan_loss(*a, reverse=reverse), *args)
    segmented = checkpoint.segment(program, 0, 4)
    (want_value, want_grads), _ = _store_all(program, args)
    got_value, got_grads = egad.interpret(egad.value_and_grad(segmented, wrt=(0, 1, 3)), *args)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    with pytest.raises(EgadError, match="k must divide"):
        checkpoint.segment(program, 0, 5)


def test_a_loop_with_an_inner_loop_recomputes_both():
    args = arguments(seed=2)
    program = egad.trace(nested_loss, *args)
    (want_value, want_grads), _ = _store_all(program, args)
    got_value, got_grads = egad.interpret(egad.value_and_grad(checkpoint.segment(program, 0, 3), wrt=(0, 1, 3)),
                                          *args)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_checkpointed_gradients_match_finite_differences():
    args = arguments(seed=3)
    program = egad.trace(rnn_loss, *args)
    plan = checkpoint.plan(program, wrt=(0, 1), memory_budget=1)
    assert plan.policies[0].checkpointed
    grads = egad.interpret(egad.grad(plan.apply(program), wrt=(0, 1)), *args)
    assert_gradients_match(rnn_loss, args, wrt=(0, 1), grads=grads)


def test_peak_tape_memory_falls_to_what_the_plan_predicts():
    args = arguments(steps=64)
    program = egad.trace(rnn_loss, *args)
    _, store_all_peak = _store_all(program, args)
    plan = checkpoint.plan(program, wrt=(0, 1, 3), memory_budget=store_all_peak // 4)
    (policy,) = plan.policies
    assert policy.every is not None and 1 < policy.every < 64
    assert plan.store_all_bytes <= store_all_peak <= 1.2 * plan.store_all_bytes  # the model counts what AD tapes
    _, peak = _store_all(plan.apply(program), args)
    assert peak <= store_all_peak // 4, (peak, store_all_peak)
    assert peak <= 1.5 * plan.planned_bytes, (peak, plan.planned_bytes)


def test_a_budget_above_store_all_keeps_store_all_and_one_below_reach_says_so():
    args = arguments()
    program = egad.trace(rnn_loss, *args)
    roomy = checkpoint.plan(program, wrt=(0,), memory_budget=10**9)
    assert [p.every for p in roomy.policies] == [None] and roomy.planned_bytes == roomy.store_all_bytes
    tight = checkpoint.plan(program, wrt=(0,), memory_budget=1)
    assert tight.policies[0].checkpointed and "least-memory plan" in tight.note
    policy = tight.policies[0]
    store_all = dataclasses.replace(policy, cuts=())
    even = [dataclasses.replace(store_all, every=chain[0], nested=chain[1:]).bytes
            for chain in checkpoint._chains(T, False)]
    binomial = [p.bytes for p in checkpoint._binomial(store_all, budget=1)]
    assert policy.cuts and policy.bytes < min(even)  # uneven cuts reach less than any even chain
    assert policy.bytes == min(even + binomial)


def _loop_in_a_branch(W, U, xs, h0):
    return egad.cond(enp.sum(h0) > -1e9, lambda h: rnn_loss(W, U, xs, h), lambda h: enp.sum(h), h0)


def _inner_loop_of_growing_trips(W, U, xs, h0):
    def step(t, h):
        return egad.fori_loop(0, t + 1, lambda _, g: enp.tanh(g @ W), enp.tanh(xs[t] @ U + h))

    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)


@pytest.mark.parametrize("loss", [_loop_in_a_branch, _inner_loop_of_growing_trips], ids=["branch", "nested"])
def test_tapes_the_plan_only_estimates_are_measured_and_a_budget_they_pass_is_reported(loss):
    """A loop inside a top-level branch was not counted at all ("store-all needs 0 B,
    this plan 0 B" while 4 KiB were taped) and an inner loop of run-time trips was
    counted as one trip: the report said the budget was met. Found by fuzzing. Where
    the plan estimates, it measures the planned gradient on the example inputs."""
    args = arguments()
    optimized = egad.optimize(egad.trace(loss, *args), wrt=(0,), rules=(), memory_budget=200)
    optimized(*args)
    stats = egad.RunStats()
    egad.interpret(optimized.program, *args, stats=stats)
    (plan,) = optimized.checkpoint_plans
    assert plan.measured == stats.peak_tape_bytes > 200
    report = optimized.report()
    assert "measured on the example inputs" in report and "above the budget" in report


def test_a_loop_of_no_trips_tapes_nothing_and_meets_any_budget():
    """0 trips was counted as 1 (`trips or 1`): "store-all needs 128 B" and a budget of
    1 B "below what checkpointing reaches", for a loop that tapes nothing."""
    args = arguments(steps=0)
    plan = checkpoint.plan(egad.trace(rnn_loss, *args), wrt=(0,), memory_budget=1, example_args=args)
    assert plan.store_all_bytes == plan.planned_bytes == 0 and not plan.note and plan.measured is None


@pytest.mark.parametrize("chain", [(8, 4), (8, 2), (8, 4, 2), (8, 4, 2, 1), (16, 4, 1)])
@pytest.mark.parametrize("loss", ["rnn", "scan", "reverse scan"])
def test_multi_level_checkpoints_keep_the_gradient(chain, loss):
    fn = {"rnn": rnn_loss, "scan": scan_loss, "reverse scan": lambda *a: scan_loss(*a, reverse=True)}[loss]
    args = arguments(seed=5, steps=16)
    program = egad.trace(fn, *args)
    segmented = checkpoint.segment(program, 0, *chain)
    assert checkpoint.checkpointed_loops(segmented) == len(chain)  # each level's segment loop, marked
    (want_value, want_grads), _ = _store_all(program, args)
    got_value, got_grads = egad.interpret(egad.value_and_grad(segmented, wrt=(0, 1, 3)), *args)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_each_level_costs_a_forward_pass_and_saves_tape_memory(monkeypatch):
    from egad import interp

    tanh_runs = []
    run_op = interp._run_op

    def counting(binding, inputs):
        tanh_runs[-1] += binding.op == "tanh"
        return run_op(binding, inputs)

    monkeypatch.setattr(interp, "_run_op", counting)
    args = arguments(steps=64)
    program = egad.trace(rnn_loss, *args)
    peaks = []
    for chain in [(), (8,), (8, 2), (8, 4, 2, 1)]:
        tanh_runs.append(0)  # one tanh per forward trip; the adjoint reads its taped output
        _, peak = _store_all(checkpoint.segment(program, 0, *chain) if chain else program, args)
        peaks.append(peak)
    assert tanh_runs == [64, 2 * 64, 3 * 64, 5 * 64]
    assert peaks[0] > peaks[1] > peaks[2] > peaks[3], peaks


def test_a_budget_below_even_segments_cuts_binomial_ones_then_two_levels():
    args = arguments(steps=64)
    program = egad.trace(rnn_loss, *args)
    roomy = checkpoint.plan(program, wrt=(0, 1, 3), memory_budget=10**9)
    (store_all,) = roomy.policies
    even_one_level = min(dataclasses.replace(store_all, every=k).bytes for k in range(1, 64))
    (binomial_one_level, *_) = checkpoint._binomial(store_all, budget=1)  # the first: one level, least memory
    assert binomial_one_level.bytes < even_one_level
    (want_value, want_grads), _ = _store_all(program, args)
    for budget, levels, says in [(even_one_level - 1, 1, "binomial checkpoints"),
                                 (binomial_one_level.bytes - 1, 2, "2 extra forward passes")]:
        plan = checkpoint.plan(program, wrt=(0, 1, 3), memory_budget=budget)
        (policy,) = plan.policies
        assert policy.recomputations == levels and policy.bytes <= budget and not plan.note
        assert says in str(policy)
        _, peak = _store_all(plan.apply(program), args)
        assert peak <= 1.5 * plan.planned_bytes
        got_value, got_grads = egad.interpret(egad.value_and_grad(plan.apply(program), wrt=(0, 1, 3)), *args)
        for got, want in zip(got_grads, want_grads):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_a_deeper_level_must_divide_the_one_above():
    program = egad.trace(rnn_loss, *arguments())
    with pytest.raises(EgadError, match="within segments of 6"):
        checkpoint.segment(program, 0, 6, 4)
    with pytest.raises(EgadError, match="within segments of 6"):
        checkpoint.segment(program, 0, 6, 6)
    # 12 trips every 5: the last segment is short, so the segment loop's trips are counted at run time
    _assert_same_gradients(checkpoint.segment(program, 0, 5, 1), program, arguments())


def _assert_same_gradients(segmented, program, args):
    got, want = (egad.interpret(egad.value_and_grad(p, wrt=(0,)), *args) for p in (segmented, program))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-10, atol=1e-12)


def test_a_loop_over_a_run_time_range_is_segmented_for_the_trips_it_runs():
    """A `for` over a range known only at run time (an egad.Spec's "T", a traced n) was
    never checkpointed, whatever the budget, and counted as one trip. Found by fuzzing.
    Its segments of k trips are counted at run time; the plan picks k for the trips the
    example inputs run; per-trip outputs still need a static trip count."""
    def dynamic(W, n):
        return enp.sum(egad.fori_loop(0, n, lambda t, h: enp.tanh(h @ W), enp.ones((2, 2))))

    W = np.eye(2) * 0.9
    program = egad.trace(dynamic, W, np.int64(3))
    for n in (0, 1, 5, 12):
        _assert_same_gradients(checkpoint.segment(program, 0, 2), program, (W, np.int64(n)))
    plan = checkpoint.plan(program, wrt=(0,), memory_budget=1)  # no inputs: planned around, said in the report
    assert [p.every for p in plan.policies] == [None] and "known only at run time" in "\n".join(plan.lines())
    args = arguments()
    spec = egad.trace(rnn_loss, args[0], args[1], egad.Spec(("T", B, I), "float64"), args[3])
    plan = checkpoint.plan(spec, wrt=(0,), memory_budget=600, example_args=args)
    (policy,) = plan.policies
    assert policy.checkpointed and policy.trips == T and "12 trips on the example inputs" in "\n".join(plan.lines())
    for steps in (T, 2 * T + 1):
        longer = arguments(steps=steps)
        stats = egad.RunStats()
        egad.interpret(egad.value_and_grad(plan.apply(spec), wrt=(0,)), *longer, stats=stats)
        assert stats.peak_tape_bytes <= (plan.planned_bytes if steps == T else 3 * plan.planned_bytes)
        _assert_same_gradients(plan.apply(spec), spec, longer)
    with pytest.raises(EgadError, match="per-trip outputs needs a static trip count"):
        checkpoint.segment(egad.trace(scan_loss, args[0], args[1], egad.Spec(("T", B, I), "float64"), args[3]), 0, 2)
    with pytest.raises(EgadError, match="no top-level loop number 1"):
        checkpoint.segment(program, 1, 2)


# --- while loops: segments that count their trips -------------------------------------

def until_loss(W, x, limit):
    """A while loop with a data-dependent stop; W, x captured inside it, and a second
    state value that counts (a float, differentiable through nothing)."""
    def cond(state):
        h, n = state
        return enp.logical_and(enp.sum(h * h) < limit, n < 40.0)

    def body(state):
        h, n = state
        return enp.tanh(h @ W) * 1.3 + x, n + 1.0

    h, n = egad.while_loop(cond, body, (x, 0.0))
    return enp.sum(h ** 2) + enp.sum(h) * n


def until_arguments(limit=1e9):
    rng = np.random.default_rng(5)
    return rng.standard_normal((H, H)) * 0.4, np.full((B, H), 0.2) + rng.standard_normal((B, H)) * 0.05, limit


def _while_trips(program, args) -> int:
    stats = egad.RunStats()
    egad.interpret(program, *args, stats=stats)
    (loop,) = [b for b in program.region.bindings if b.op == "while"]
    return stats.while_trips[id(loop)][0]


@pytest.mark.parametrize("chain", [(1,), (3,), (7,), (40,), (100,), (8, 4), (8, 4, 2, 1)])
def test_segmented_while_loops_keep_the_primal_and_its_gradient(chain):
    args = until_arguments()
    program = egad.trace(until_loss, *args)
    assert _while_trips(program, args) == 40  # the counter stops it: 40 trips, not a multiple of 3 or 7
    segmented = checkpoint.segment(program, 0, *chain)
    assert checkpoint.checkpointed_loops(segmented) == len(chain)
    np.testing.assert_allclose(egad.interpret(segmented, *args), egad.interpret(program, *args), rtol=1e-13)
    (want, want_peak), (got, peak) = _store_all_of(program, args), _store_all_of(segmented, args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    if chain[0] < 40:
        assert peak < want_peak, (peak, want_peak)


def _store_all_of(program, args):
    stats = egad.RunStats()
    value = egad.interpret(egad.value_and_grad(program, wrt=(0, 1)), *args, stats=stats)
    return value, stats.peak_tape_bytes


def test_a_segmented_while_loop_follows_a_stop_that_depends_on_the_data():
    program = egad.trace(until_loss, *until_arguments(limit=6.0))
    segmented = checkpoint.segment(program, 0, 3)
    for limit in (0.0, 1.0, 3.0, 6.0, 30.0):  # 0 trips (cond false at once) up to the 40-trip counter
        args = until_arguments(limit)
        want, got = _store_all_of(program, args)[0], _store_all_of(segmented, args)[0]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
        for g, w in zip(got[1], want[1]):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    assert len({_while_trips(program, until_arguments(limit)) for limit in (0.0, 1.0, 6.0, 30.0)}) > 2


def test_a_checkpointed_while_loops_gradient_matches_finite_differences():
    args = until_arguments(limit=12.0)
    program = egad.trace(until_loss, *args)
    plan = checkpoint.plan(program, wrt=(0, 1), memory_budget=1, example_args=args)
    (policy,) = plan.policies
    assert policy.kind == "while" and policy.trips == _while_trips(program, args) and policy.every is not None
    grads = egad.interpret(egad.grad(plan.apply(program), wrt=(0, 1)), *args)
    assert_gradients_match(until_loss, args, wrt=(0, 1), grads=grads)


def test_a_while_loop_is_planned_for_its_trips_on_the_example_inputs():
    args = until_arguments()
    program = egad.trace(until_loss, *args)
    (store_all,) = checkpoint.plan(program, wrt=(0, 1), memory_budget=10**9, example_args=args).policies
    assert store_all.every is None and store_all.trips == 40
    _, store_all_peak = _store_all_of(program, args)
    plan = checkpoint.plan(program, wrt=(0, 1), memory_budget=store_all_peak // 4, example_args=args)
    (policy,) = plan.policies
    assert policy.every is not None and 1 < policy.every < 40
    _, peak = _store_all_of(plan.apply(program), args)
    assert peak <= store_all_peak // 4 and peak <= 1.5 * plan.planned_bytes, (peak, store_all_peak, plan.planned_bytes)
    text = "\n".join(plan.lines())
    assert "while loop at" in text and "40 trips on the example inputs" in text and "doubling" in text
    blind = checkpoint.plan(program, wrt=(0, 1), memory_budget=1)  # no example inputs: nothing to count trips on
    assert blind.policies[0].every is None and "example inputs to count its trips on" in "\n".join(blind.lines())


def _optimized_within_budget(loss, args, memory_budget=256):
    """`egad.optimize(memory_budget=)` of `loss` (rules=()), called once and checked
    against the interpreted store-all gradient."""
    program = egad.trace(loss, *args)
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=(0, 1)), *args)
    optimized = egad.optimize(program, wrt=(0, 1), memory_budget=memory_budget, rules=())
    value, grads = optimized(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    return optimized


def test_optimize_with_a_memory_budget_checkpoints_a_while_loop():
    optimized = _optimized_within_budget(until_loss, tuple(np.asarray(a, np.float32) for a in until_arguments(12.0)))
    assert checkpoint.checkpointed_loops(optimized.program) >= 1
    assert "while loop at" in optimized.report() and "checkpoints" in optimized.report()


def test_optimize_with_a_memory_budget_builds_the_checkpointed_gradient():
    args = arguments(dtype=np.float32, steps=16)
    program = egad.trace(rnn_loss, *args)
    report = _optimized_within_budget(rnn_loss, args).report()
    assert "checkpointing: memory budget 256 B" in report and "checkpoints" in report
    # below one level's reach: two levels of cuts, compiled as nested loops
    assert "2 extra forward passes" in report or "3 extra forward passes" in report
    for wrong in (-1, 0, True, 1000.0, "1MB"):  # True was taken as 1 byte
        with pytest.raises(ArgumentError, match="memory_budget.*positive whole number of bytes"):
            egad.optimize(program, memory_budget=wrong)


# --- random programs: every eligible loop, every k ------------------------------------------

from hypothesis import HealthCheck, assume, given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from .gradcheck import scalar_loss  # noqa: E402
from .test_random_programs import arguments as random_arguments  # noqa: E402
from .test_random_programs import build_program, program_descriptions, show_program  # noqa: E402


def _segmentable(program):
    """(loop index, trips, has per-trip outputs) of each top-level loop `segment` takes."""
    return [(n, b.attrs["trip_dim"], len(b.outputs) > b.attrs["n_state"])
            for n, b in enumerate(checkpoint.top_level_loops(program)) if isinstance(b.attrs.get("trip_dim"), int)
            and b.attrs["trip_dim"] >= 2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(description=program_descriptions(), args=random_arguments(), loss_seed=st.integers(0, 3), data=st.data())
def test_random_programs_checkpointed_anywhere_keep_their_gradients(description, args, loss_seed, data):
    program = egad.trace(scalar_loss(build_program(description), loss_seed), *args)
    loops = _segmentable(program)
    assume(loops)
    value, grads = egad.interpret(egad.value_and_grad(program, wrt=(0, 1, 2)), *args)
    assume(np.isfinite(value))
    n, trips, has_ys = data.draw(st.sampled_from(loops))
    k = data.draw(st.sampled_from([k for k in range(1, trips + 1) if not has_ys or trips % k == 0]))
    note(f"{show_program(description)}\nloop {n} ({trips} trips) every {k}")
    segmented = checkpoint.segment(program, n, k)
    got_value, got_grads = egad.interpret(egad.value_and_grad(segmented, wrt=(0, 1, 2)), *args)
    np.testing.assert_allclose(got_value, value, rtol=1e-12, atol=1e-12)
    for got, want in zip(egad.pytree.flatten(got_grads)[0], egad.pytree.flatten(grads)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_an_optimization_that_stacks_past_the_budget_falls_back_to_the_checkpointed_program():
    """batch-weight-gradient stacks each step's operands for one contraction after
    the loop: memory the tape budget did not plan for. Under a tight budget the
    optimizer's result is refused and the checkpointed program is built."""
    rng = np.random.default_rng(4)
    n, batch, inputs, steps = 96, 32, 64, 32  # big enough that the cost model batches the weight gradient
    args = ((rng.standard_normal((n, n)) / n).astype(np.float32), (rng.standard_normal((inputs, n)) / 8).astype(
        np.float32), rng.standard_normal((steps, batch, inputs)).astype(np.float32), np.zeros((batch, n), np.float32))
    program = egad.trace(rnn_loss, *args)
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=(0, 1)), *args)
    roomy = egad.optimize(program, wrt=(0, 1), memory_budget=10**9, check=False)  # check=False: no timing guard
    roomy(*args)
    assert checkpoint.stacked_bytes(roomy.program) > 0, "batch-weight-gradient no longer fires here"
    tight = egad.optimize(program, wrt=(0, 1), memory_budget=64 * 1024, check=False)
    value, grads = tight(*args)
    (optimization,) = tight.optimizations
    assert "more than the original (values batched or stacked" in optimization.fallback
    assert checkpoint.stacked_bytes(tight.program) == 0
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):  # float32, summed in another order over 32 steps
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_an_optimization_over_the_budget_is_extracted_again_with_bytes_held_priced():
    """Under a budget of half the store-all tapes the plan checkpoints the loop; the
    fastest extraction then batches and stacks past the budget. Rather than fall back
    to the checkpointed program, the optimizer extracts again pricing held bytes
    (CostModel.held_byte_seconds, the least price that fits) and builds that
    extraction."""
    rng = np.random.default_rng(4)
    n, batch, inputs, steps = 96, 32, 64, 32
    args = ((rng.standard_normal((n, n)) / n).astype(np.float32), (rng.standard_normal((inputs, n)) / 8).astype(
        np.float32), rng.standard_normal((steps, batch, inputs)).astype(np.float32), np.zeros((batch, n), np.float32))
    program = egad.trace(rnn_loss, *args)
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=(0, 1)), *args)
    budget = checkpoint.taped_bytes(egad.value_and_grad(program, wrt=(0, 1))) // 2 + 1
    optimized = egad.optimize(program, wrt=(0, 1), memory_budget=budget, check=False)
    value, grads = optimized(*args)
    (optimization,) = optimized.optimizations
    assert optimization.fallback is None, optimization.fallback
    assert "extracted again with bytes held priced at" in optimization.memory
    assert "memory: the fastest extraction holds" in optimized.report()
    (plan,) = optimized.checkpoint_plans
    original = optimization.original
    extra = checkpoint.kept_bytes(optimized.program) - checkpoint.kept_bytes(original)
    assert plan.planned_bytes + extra <= budget
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_the_egraph_checkpoints_the_store_all_gradient_itself_when_that_is_predicted_faster():
    """Under a third of the store-all tapes, the plan's program, optimized, holds more than
    the budget allows (batching) and falls back. The e-graph, given the store-all
    gradient and the budget, weighs its own every-k alternative (rules/checkpoint.py's
    `checkpoint-every-k-trips`) with batching and builds that: within the budget,
    predicted faster than the plan's program, gradients unchanged."""
    from egad.rules.checkpoint import EVERY_K

    rng = np.random.default_rng(4)
    n, batch, inputs, steps = 96, 32, 64, 32
    args = ((rng.standard_normal((n, n)) / n).astype(np.float32), (rng.standard_normal((inputs, n)) / 8).astype(
        np.float32), rng.standard_normal((steps, batch, inputs)).astype(np.float32), np.zeros((batch, n), np.float32))
    program = egad.trace(rnn_loss, *args)
    store_all = egad.value_and_grad(program, wrt=(0, 1))
    want_value, want_grads = egad.interpret(store_all, *args)
    budget = checkpoint.taped_bytes(store_all) // 3 + 1
    optimized = egad.optimize(program, wrt=(0, 1), memory_budget=budget, check=False)
    value, grads = optimized(*args)
    (optimization,) = optimized.optimizations
    assert "the e-graph's own checkpointing of the store-all gradient" in optimization.memory
    assert optimization.memory.endswith("it is built"), optimization.memory
    assert optimization.chosen[EVERY_K] > 0 and optimization.fallback is None
    assert checkpoint.kept_bytes(optimized.program) <= checkpoint.held_bytes(store_all) + budget
    assert checkpoint.taped_bytes(optimized.program) == 0  # the segments' residuals are stacked rows
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_residuals_stacked_instead_of_taped_are_not_counted_as_extra_memory():
    """rules/checkpoint.py's stack-taped-residuals turns each tape into stacked rows of
    the same size: a memory budget's check (egad/api.py, `_within_budget`) adds the
    tapes (`taped_bytes`) to what a program holds, so the rows are not counted twice."""
    from egad.egraph import Snapshot, decode, encode
    from egad.egraph.schedule import saturate
    from egad.extract import extract

    args = arguments()
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(0, 1))
    encoding = encode(gradient)
    saturate(encoding, families=["checkpoint"])
    snapshot = Snapshot.of(encoding.egraph)
    stacked = decode(encoding, snapshot, extract(encoding, snapshot))
    assert "tape_push" not in [b.op for b in walk_bindings(stacked.region)] and checkpoint.taped_bytes(stacked) == 0
    pushed = [b for loop in gradient.region.bindings if loop.op == "for" for b in loop.regions[0].bindings
              if b.op == "tape_push"]
    taped = checkpoint.taped_bytes(gradient)
    assert taped == T * sum(b.inputs[1].type.size() * 8 for b in pushed) > 0  # float64 rows
    held_more = checkpoint.held_bytes(stacked) - checkpoint.held_bytes(gradient)
    assert held_more >= taped  # the rows, and what else the extraction holds at the top level
    assert held_more - taped < taped / 4  # counted with the tapes, the rows are not extra


# --- several loops: the plan is a knapsack over (time, bytes) ------------------------------
# two_loops_loss (benchmarks/memory.py): loop A, four matmul steps a trip on a narrow state; loop B,
# one elementwise step a trip on a wider one. A tapes more bytes a trip, B is far cheaper to recompute.

def two_loops_arguments():
    rng = np.random.default_rng(2)
    return rng.standard_normal((16, 16)) * 0.3, rng.standard_normal((4, 16)), rng.standard_normal((4, 24))


def test_with_several_loops_the_plan_recomputes_where_it_costs_least():
    args = two_loops_arguments()
    program = egad.trace(two_loops_loss, *args)
    heavy, light = checkpoint.plan(program, wrt=(0, 1, 2), memory_budget=10**9).policies
    assert heavy.residual_bytes > light.residual_bytes  # A is the larger: shrinking it first would be natural
    light_one_level = min(dataclasses.replace(light, every=k).bytes for k in range(1, light.trips))
    budget = heavy.bytes + light_one_level  # enough with B checkpointed once, or A instead
    plan = checkpoint.plan(program, wrt=(0, 1, 2), memory_budget=budget)
    chosen_heavy, chosen_light = plan.policies
    assert not chosen_heavy.checkpointed and chosen_light.checkpointed and chosen_light.recomputations == 1
    assert plan.planned_bytes <= budget and not plan.note
    # the other way to fit, A checkpointed once, re-runs four matmul steps a trip instead of one sine
    heavy_instead = [o for o in checkpoint._options(heavy, checkpoint.top_level_loops(program)[0], budget, "cpu")
                     if o.policy.recomputations == 1 and o.policy.bytes + light.bytes <= budget]
    light_option = [o for o in checkpoint._options(light, checkpoint.top_level_loops(program)[1], budget, "cpu")
                    if o.policy == chosen_light]
    assert heavy_instead and light_option and light_option[0].key[0] < min(o.key[0] for o in heavy_instead)
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=(0, 1, 2)), *args)
    got_value, got_grads = egad.interpret(egad.value_and_grad(plan.apply(program), wrt=(0, 1, 2)), *args)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_a_plan_says_when_a_loops_trips_are_known_only_at_run_time():
    """Its head counted such a loop as one trip and said nothing of it ("store-all needs 64 B")."""
    def loss(W, xs):
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W + h), enp.zeros((2, 4))) ** 2)

    W = np.eye(4)
    program = egad.trace(loss, W, egad.Spec(("T", 2, 4), "float64"))
    head = checkpoint.plan(program, (0,), memory_budget=100).lines()[0]
    assert "known only at run time counted as one trip" in head
