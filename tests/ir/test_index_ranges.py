"""egad/ir/index_ranges.py: integer ranges proved without running, and the plan per
index op. Soundness is checked against the interpreter: every value it computes lies
in the interval proved for it, on every corpus program and gradient."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.interp
import egad.nn as enn
import egad.numpy as enp
from egad.ir.index_ranges import Interval, IndexPlan, hoisted_checks, index_plan, index_sites, integer_ranges
from tests.ad.gradcheck import scalar_loss, to_float64
from tests.programs import all_programs


def _plans(program) -> list[IndexPlan]:
    ranges = integer_ranges(program)
    return [index_plan(binding, ranges) for binding in index_sites(program)]


def _traced(fn, *args):
    return egad.trace(fn, *args)


TABLE = np.arange(20.0).reshape(5, 4)


@pytest.mark.parametrize("fn, plan", [
    (lambda x: egad.fori_loop(0, 5, lambda i, acc: acc + x[i], enp.zeros(4)), IndexPlan.IN_RANGE),
    (lambda x: egad.fori_loop(0, 6, lambda i, acc: acc + x[i], enp.zeros(4)), IndexPlan.CHECK),
    (lambda x: egad.fori_loop(0, 5, lambda i, acc: acc + x[4 - i], enp.zeros(4)), IndexPlan.IN_RANGE),
    (lambda x: egad.fori_loop(0, 4, lambda i, acc: acc + x[i + 1], enp.zeros(4)), IndexPlan.IN_RANGE),
    (lambda x: egad.fori_loop(0, 5, lambda i, acc: acc + x[i + 1], enp.zeros(4)), IndexPlan.CHECK),
    (lambda x: egad.fori_loop(0, 5, lambda i, acc: acc + x[-1 - i], enp.zeros(4)), IndexPlan.WRAPS),
    (lambda x: egad.fori_loop(0, 9, lambda i, acc: acc + x[i % 5], enp.zeros(4)), IndexPlan.IN_RANGE),
    (lambda x: egad.fori_loop(0, 9, lambda i, acc: acc + x[i // 2], enp.zeros(4)), IndexPlan.IN_RANGE),
    (lambda x: egad.fori_loop(0, 11, lambda i, acc: acc + x[i // 2], enp.zeros(4)), IndexPlan.CHECK),
    (lambda x: x[enp.argmax(x[:, 0])], IndexPlan.IN_RANGE),
    (lambda x: x[enp.argmax(x[0])], IndexPlan.IN_RANGE),  # 4 positions, 5 rows
    (lambda x: x[enp.argmax(x[0]) * 2], IndexPlan.CHECK),  # up to 6
    (lambda x: x[enp.minimum(enp.argmax(x[0]) * 2, 4)], IndexPlan.IN_RANGE),
    (lambda x: x[(x[0, 0] > 1).astype("int64") + 3], IndexPlan.IN_RANGE),
    (lambda x: egad.scan(lambda c, row: (c + row, c), enp.zeros(4), x)[1], IndexPlan.IN_RANGE),  # its rows
])
def test_plan_of_an_index(fn, plan):
    program = _traced(fn, TABLE)
    plans = _plans(program)
    assert plans, "the program reads rows at a traced index"
    assert plans[-1] == (plan or IndexPlan.IN_RANGE)  # the last read is the one under test


def test_program_inputs_and_loop_state_are_checked():
    by_input = _traced(lambda x, i: x[i], TABLE, 0)
    assert _plans(by_input) == [IndexPlan.CHECK]
    by_bound = _traced(lambda x, n: egad.fori_loop(0, n, lambda i, acc: acc + x[i], enp.zeros(4)), TABLE, 5)
    assert _plans(by_bound) == [IndexPlan.CHECK]  # the traced bound could exceed 5

    def walk(x):  # a counter carried by hand in a while loop: state, not proved
        return egad.while_loop(lambda s: s[0] < 5, lambda s: (s[0] + 1, s[1] + x[s[0]]), (0, enp.zeros(4)))[1]
    assert _plans(_traced(walk, TABLE)) == [IndexPlan.CHECK]


def test_constants_and_branches():
    assert _plans(_traced(lambda x: x[np.array([0, 4, 2])], TABLE)) == [IndexPlan.IN_RANGE]
    assert _plans(_traced(lambda x: x[np.array([0, -5])], TABLE)) == [IndexPlan.WRAPS]
    assert _plans(_traced(lambda x: x[np.array([0, 5])], TABLE)) == [IndexPlan.CHECK]
    either = _traced(lambda x: x[egad.cond(x[0, 0] > 0, lambda: 1, lambda: 4)], TABLE)
    assert _plans(either)[-1] == IndexPlan.IN_RANGE
    wider = _traced(lambda x: x[egad.cond(x[0, 0] > 0, lambda: 1, lambda: 5)], TABLE)
    assert _plans(wider)[-1] == IndexPlan.CHECK


def test_top_k_indices_range_over_the_last_axis():
    program = _traced(lambda x: x[enn.top_k(x[0], 2)[1]], TABLE)  # 4 positions into 5 rows
    assert _plans(program)[-1] == IndexPlan.IN_RANGE


def test_a_loop_that_never_runs_proves_anything():
    program = _traced(lambda x: egad.fori_loop(3, 3, lambda i, acc: acc + x[i + 10], enp.zeros(4)), TABLE)
    assert _plans(program) == [IndexPlan.IN_RANGE]


def test_arithmetic_that_could_wrap_around_proves_nothing():
    assert Interval(0, 3).within(0, 3) and not Interval(0, 4).within(0, 3) and Interval(1, 0).within(5, 5)
    big = np.int32(2**30)
    # [2**30, 2**30 + 3] * 4 leaves int32: the product wraps around (% 5 of anything is in [0, 4])
    program = _traced(lambda x: x[((enp.argmax(x[0]).astype("int32") + big) * np.int32(4)) % np.int32(5)], TABLE)
    ranges = integer_ranges(program)
    product = next(b for b in program.region.bindings if b.op == "mul")
    assert product.outputs[0].uid not in ranges
    assert _plans(program)[-1] == IndexPlan.IN_RANGE
    program = _traced(lambda x: x[(enp.argmax(x[0]).astype("int32") + big) * np.int32(4)], TABLE)
    assert _plans(program)[-1] == IndexPlan.CHECK


def embed_scan(E, tokens):
    return egad.scan(lambda h, tok: (h + E[tok], enp.sum(h)), enp.zeros((2, 3)), tokens)[1]


def _hoisted(program) -> list:
    return [(check.size, check.site.op) for checks in hoisted_checks(program, integer_ranges(program)).values()
            for check in checks]


def test_a_loop_over_every_row_of_a_token_table_checks_it_once_before():
    E, tokens = np.ones((7, 3)), np.zeros((4, 2), np.int64)
    assert _hoisted(_traced(embed_scan, E, tokens)) == [(7, "take")]
    fewer = _traced(lambda E, t: egad.fori_loop(0, 3, lambda i, h: h + E[t[i]], enp.zeros((2, 3))), E, tokens)
    assert _hoisted(fewer) == []  # row 3 is never read: checking it could raise where the loop does not
    traced_bound = _traced(lambda E, t, n: egad.fori_loop(0, n, lambda i, h: h + E[t[i]], enp.zeros((2, 3))),
                           E, tokens, 4)
    assert _hoisted(traced_bound) == []

    def branchy(E, t):  # the lookup runs on some trips only
        return egad.fori_loop(0, 4, lambda i, h: egad.cond(i > 1, lambda: h + E[t[i]], lambda: h), enp.zeros((2, 3)))
    assert _hoisted(_traced(branchy, E, tokens)) == []


# --- soundness against the interpreter -------------------------------------------------------------

def _corpus_cases():
    cases = []
    for program in all_programs():
        args = program.make_args(np.random.default_rng(0))
        traced = egad.trace(program.fn, *args, static_argnums=program.static_argnums)
        cases.append((program.name, traced, args))
        if program.differentiable_argnums:
            args = to_float64(args)
            loss = egad.trace(scalar_loss(program.fn, 0), *args, static_argnums=program.static_argnums)
            cases.append((program.name + "/grad", egad.value_and_grad(loss, wrt=program.differentiable_argnums), args))
    return cases


CASES = _corpus_cases()


@pytest.mark.parametrize("name, program, args", CASES, ids=[c[0] for c in CASES])
def test_every_value_the_interpreter_computes_lies_in_its_interval(name, program, args, monkeypatch):
    ranges = integer_ranges(program)
    seen: dict[int, list] = {}
    run_region, run_op = egad.interp.run_region, egad.interp._run_op

    def record(variables, values):
        for var, value in zip(variables, values):
            if var.uid in ranges and isinstance(value, np.ndarray) and value.size:
                seen.setdefault(var.uid, []).append((int(value.min()), int(value.max())))

    def recording_region(region, values, run):
        record(region.params, values)
        return run_region(region, values, run)

    def recording_op(binding, inputs):
        outputs = run_op(binding, inputs)
        record(binding.outputs, outputs)
        return outputs

    monkeypatch.setattr(egad.interp, "run_region", recording_region)
    monkeypatch.setattr(egad.interp, "_run_op", recording_op)
    egad.interpret(program, *args)
    for uid, extremes in seen.items():
        lo, hi = min(e[0] for e in extremes), max(e[1] for e in extremes)
        assert ranges[uid].lo <= lo and hi <= ranges[uid].hi, \
            f"{name}: value {uid} took [{lo}, {hi}], outside the proved {ranges[uid]}"
