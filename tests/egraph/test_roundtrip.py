"""decode(encode(program)) is the same program: for the whole corpus and every
corpus gradient, it verifies, computes bit-identical results and is no larger;
loop-invariant work leaves its loop and nothing leaves a branch (DESIGN §5)."""
from __future__ import annotations

import pathlib
import re
import runpy
import subprocess
import sys

import numpy as np
import pytest
from egglog import rewrite, ruleset, vars_
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from egad.egraph import Snapshot, decode, encode, extract_inserted, round_trip
from egad.egraph.constants import ConstantTable, literal_node, literal_value
from egad.egraph.language import Term, literal, op
from egad.egraph.provenance import RuleSite
from egad.ir.program import count_bindings, walk_bindings
from egad.pytree import flatten
from tests.ad.gradcheck import scalar_loss, to_float64
from tests.ad.test_random_programs import WRT, arguments, build_program, program_descriptions, show_program
from tests.programs import all_programs

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = all_programs()
GRADIENT_PROGRAMS = [p for p in PROGRAMS if p.differentiable_argnums]


def _assert_same_results(got, want, context: str):
    got_leaves, got_tree = flatten(got)
    want_leaves, want_tree = flatten(want)
    assert got_tree == want_tree, context
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"{context} leaf {k}: {g.dtype} != {w.dtype}"
        np.testing.assert_array_equal(g, w, err_msg=f"{context} leaf {k}")  # bit-identical (NaN == NaN)


def _ops(region) -> list[str]:
    return [b.op for b in walk_bindings(region)]


def _check_round_trip(program, args, context: str):
    decoded = round_trip(program)
    egad.verify(decoded)
    assert decoded.signature == program.signature and decoded.out_tree == program.out_tree
    assert count_bindings(decoded.region) <= count_bindings(program.region), context
    _assert_same_results(egad.interpret(decoded, *args), egad.interpret(program, *args), context)
    return decoded


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_corpus_program_round_trips(program):
    args = program.make_args(np.random.default_rng(0))
    traced = egad.trace(program.fn, *args, static_argnums=program.static_argnums)
    _check_round_trip(traced, args, program.name)


@pytest.mark.parametrize("program", GRADIENT_PROGRAMS, ids=[p.name for p in GRADIENT_PROGRAMS])
def test_corpus_gradient_round_trips(program):
    args = to_float64(program.make_args(np.random.default_rng(1)))
    traced = egad.trace(scalar_loss(program.fn, 0), *args, static_argnums=program.static_argnums)
    gradient = egad.value_and_grad(traced, wrt=program.differentiable_argnums)
    decoded = _check_round_trip(gradient, args, program.name)
    # each allocation is its own stack: equal empty tapes are never merged into one
    assert _ops(decoded.region).count("tape_alloc") == _ops(gradient.region).count("tape_alloc")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3))
def test_random_programs_and_their_gradients_round_trip(description, args, loss_seed):
    note(show_program(description))
    f = build_program(description)
    _check_round_trip(egad.trace(f, *args), args, "random program")
    gradient = egad.value_and_grad(egad.trace(scalar_loss(f, loss_seed), *args), wrt=WRT)
    _check_round_trip(gradient, args, "its gradient")


def _loop(program):
    (loop,) = [b for b in program.region.bindings if b.op == "for"]
    return loop


def test_loop_invariant_work_moves_out_of_the_loop():
    def f(W, xs, h0):
        return egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W.T + h @ (W * 2.0)), h0)

    args = (np.arange(9.0).reshape(3, 3) / 10, np.ones((4, 2, 3)), np.zeros((2, 3)))
    program = egad.trace(f, *args)
    assert {"transpose", "mul"} <= set(_ops(_loop(program).regions[0]))
    decoded = _check_round_trip(program, args, "invariant")
    top = [b.op for b in decoded.region.bindings]
    assert "transpose" in top and "mul" in top
    body_ops = [b.op for b in _loop(decoded).regions[0].bindings]
    assert "transpose" not in body_ops and "mul" not in body_ops
    assert {"take", "matmul", "tanh"} <= set(body_ops)  # what depends on the counter or state stays


def test_gradient_loops_lose_their_invariant_work_too():
    def f(W, xs, h0):
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W.T + h * 2.0), h0) ** 2)

    args = (np.eye(3), np.ones((4, 2, 3)), np.zeros((2, 3)))
    gradient = egad.value_and_grad(egad.trace(f, *args), wrt=(0,))
    decoded = _check_round_trip(gradient, args, "gradient invariant")
    forward = next(b for b in decoded.region.bindings if b.op == "for" and not b.attrs["reverse"])
    assert "transpose" not in [b.op for b in forward.regions[0].bindings]
    assert count_bindings(decoded.region) < count_bindings(gradient.region)


def test_work_one_branch_does_stays_in_that_branch():
    def f(W, x, p):
        return egad.cond(p > 0, lambda x: x @ W.T, lambda x: x, x)

    args = (np.eye(2), np.ones((2, 2)), 1.0)
    decoded = _check_round_trip(egad.trace(f, *args), args, "branch")
    (branch,) = [b for b in decoded.region.bindings if b.op == "if"]
    assert "transpose" in _ops(branch.regions[0]) and "transpose" not in [b.op for b in decoded.region.bindings]


def test_work_both_branches_do_is_done_once_before_the_branch():
    def f(x, p):
        return egad.cond(p > 0, lambda x: enp.sin(x) + 1.0, lambda x: enp.sin(x) * 3.0, x)

    args = (np.ones(3), 1.0)
    program = egad.trace(f, *args)
    decoded = _check_round_trip(program, args, "both branches")
    assert _ops(program.region).count("sin") == 2 and _ops(decoded.region).count("sin") == 1
    assert "sin" in [b.op for b in decoded.region.bindings]


def test_nothing_is_speculated_out_of_a_switch():
    # branches 0 and 1 read x[i]; branch 2 does not, and is the one taken with i out of
    # range: hoisting the take before the switch would raise where the program does not
    def f(x, i, k):
        return egad.switch(k, [lambda x, i: x[i] + 1.0, lambda x, i: x[i] * 2.0, lambda x, i: x[0] * 0.0], x, i)

    args = (np.arange(3.0), 7, 2)
    decoded = _check_round_trip(egad.trace(f, *args), args, "switch")
    assert "take" not in [b.op for b in decoded.region.bindings]



def test_a_while_test_does_not_read_before_its_guard_what_the_body_reads_too():
    """`i < n and xs[i] < t` (a cond in the test) and a body reading xs[i]: the test and
    the body run apart, so the read stays inside the test's branch (it was computed at
    the top of both: the last test read xs[n]). Found by fuzzing."""
    def f(xs, t):
        def test(state):
            i, _ = state
            return egad.cond(i < xs.shape[0], lambda i: xs[i] < t, lambda i: False, i)

        return egad.while_loop(test, lambda state: (state[0] + 1, state[1] + xs[state[0]]), (0, 0.0))[1]

    xs = np.array([0.1, 0.2, 0.3])
    decoded = _check_round_trip(egad.trace(f, xs, 0.25), (xs, 0.25), "while test")
    (loop,) = [b for b in decoded.region.bindings if b.op == "while"]
    test, body = loop.regions
    assert "take" not in [b.op for b in test.bindings] and "take" in _ops(test) and "take" in _ops(body)
    _assert_same_results(egad.interpret(decoded, xs, 5.0), egad.interpret(egad.trace(f, xs, 0.25), xs, 5.0),
                         "while test past the end")


def test_a_read_that_may_fail_stays_in_a_loop_that_may_run_zero_times():
    """Hoisted, xs[k] would raise before a loop of zero trips, which never reads it."""
    def f(xs, k, n):
        return egad.fori_loop(0, n, lambda i, h: h * 0.5 + xs[k], 0.0)

    def g(xs, k):  # three trips for certain: hoisting is safe, and done
        return egad.fori_loop(0, 3, lambda i, h: h * 0.5 + xs[k], 0.0)

    xs = np.array([0.1, 0.2, 0.3])
    decoded = _check_round_trip(egad.trace(f, xs, 1, 2), (xs, 1, 2), "zero trips")
    assert "take" not in [b.op for b in decoded.region.bindings]
    assert egad.interpret(decoded, xs, 7, 0) == 0.0
    certain = _check_round_trip(egad.trace(g, xs, 1), (xs, 1), "three trips")
    assert "take" in [b.op for b in certain.region.bindings]

@pytest.mark.parametrize("name", ["cond", "switch", "inner loop", "while"])
def test_a_branch_or_loop_that_may_fail_stays_in_a_loop_that_may_run_zero_times(name):
    """A whole branch or inner loop reading xs[j] was hoisted out of a loop of zero
    trips, which never reads it (no rule needed: decoding's placement did it). Found by
    fuzzing."""
    xs, h = np.arange(6.0).reshape(3, 2), np.ones(2)

    def with_cond(xs, h, n, j):
        return enp.sum(egad.fori_loop(0, n, lambda t, a: a + egad.cond(j > 0, lambda: xs[j], lambda: xs[0]), h))

    def with_switch(xs, h, n, j):
        return enp.sum(egad.fori_loop(0, n, lambda t, a: a + egad.switch(j - 4, [lambda: xs[0], lambda: xs[j]]), h))

    def with_inner_loop(xs, h, n, j):
        inner = (lambda a: egad.fori_loop(0, 2, lambda k, b: b + xs[k + j], a))
        return enp.sum(egad.fori_loop(0, n, lambda t, a: a + inner(h), h))

    def in_while(xs, h, n, j):
        body = (lambda s: (s[0] + 1, s[1] + egad.cond(j > 0, lambda: xs[j], lambda: xs[0])))
        return enp.sum(egad.while_loop(lambda s: s[0] < n, body, (0, h))[1])

    fn = {"cond": with_cond, "switch": with_switch, "inner loop": with_inner_loop, "while": in_while}[name]
    decoded = _check_round_trip(egad.trace(fn, xs, h, 2, 1), (xs, h, 2, 1), name)
    assert egad.interpret(decoded, xs, h, 0, 5) == 2.0  # zero trips: xs[5] is never read


def test_a_segment_loop_is_hoisted_beside_its_adjoint_as_it_surely_runs():
    """A for loop over [lo, lo + c) runs c trips: what it reads may leave it (a
    checkpointed gradient's segment re-run stays beside its adjoint loop, not in it)."""
    def f(xs, k, s):
        return egad.fori_loop(0, 2, lambda i, h: egad.fori_loop(i * s, i * s + 2, lambda j, g: g * 0.5 + xs[k], h),
                              0.0)

    xs = np.array([0.1, 0.2, 0.3])
    decoded = _check_round_trip(egad.trace(f, xs, 1, 2), (xs, 1, 2), "segments")
    (outer,) = [b for b in decoded.region.bindings if b.op == "for"]
    (inner,) = [b for b in outer.regions[0].bindings if b.op == "for"]
    assert "take" in [b.op for b in decoded.region.bindings] and "take" not in _ops(inner.regions[0])


def test_constants_round_trip_bit_exactly():
    constants = [np.array(-0.0), np.array(np.nan), np.array(0.1, "float32"), np.full((2, 3), -0.0),
                 np.random.default_rng(0).normal(size=(3, 3)), np.array([1, -2, 3]), np.array(True)]

    def f(x):
        return [x * c if c.dtype.kind == "f" else x * c.astype("float64") for c in constants]

    program = egad.trace(f, np.ones(1))
    decoded = _check_round_trip(program, (np.ones(1),), "constants")

    def literals(region):
        return {(v.dtype.str, v.shape, v.tobytes()) for v in
                (b.attrs["value"] for b in walk_bindings(region) if b.op == "const")}

    assert literals(decoded.region) == literals(program.region)
    table = ConstantTable()
    assert literal_node(np.array(-0.0), table, tuple) != literal_node(np.array(0.0), table, tuple)
    payload = np.array(0x7FF8000000000123, "int64").view("float64")
    node = literal_node(payload, table, tuple)
    assert literal_value(node.head, node.args, table).tobytes() == payload.tobytes()


def test_every_inserted_node_records_that_it_came_from_the_input():
    def f(W, x):
        return enp.sum(egad.fori_loop(0, 3, lambda i, h: enp.tanh(h @ W), x))

    args = (np.eye(2), np.ones((1, 2)))
    program = egad.trace(f, *args)
    encoding = encode(program)
    snapshot = Snapshot.of(encoding.egraph)
    origins = encoding.provenance.resolve(snapshot)
    extraction = extract_inserted(snapshot, origins, encoding.roots)
    assert all(origins[node].site.name == "input" for node in extraction.choice.values())
    assert origins[next(iter(extraction.choice.values()))].site.file.endswith("encoding.py")
    decoded = decode(encoding, snapshot, extraction, origins)
    # the user's source lines and value names survive
    assert {b.loc for b in walk_bindings(decoded.region)} <= {b.loc for b in walk_bindings(program.region)}
    assert all(b.loc.line for b in walk_bindings(decoded.region))
    site = RuleSite.here("some-rule")
    assert site.file == __file__ and site.name == "some-rule"


def test_rule_builders_build_the_nodes_the_encoder_inserts():
    def f(W, x):
        return enp.sum((x @ W.T) * 2.0, axis=0)

    encoding = encode(egad.trace(f, np.eye(3), np.ones((2, 3))))
    W, x = Term.arg(0, 0), Term.arg(0, 1)
    product = op.mul(op.matmul(x, op.transpose(W, perm=(1, 0))), literal(2.0, "float64"))
    encoding.egraph.check(op.reduce_sum(product, axes=(0,), keepdims=False))
    assert not encoding.egraph.check_bool(op.transpose(W, perm=(0, 1)))


def test_decoding_after_a_rewrite_picks_the_inserted_survivor():
    def f(x):
        return enp.sin(x * 1.0) + x * 1.0

    args = (np.linspace(0, 1, 4),)
    program = egad.trace(f, *args)
    encoding = encode(program)
    (x,) = vars_("x", Term)
    encoding.egraph.run(ruleset(rewrite(op.mul(x, literal(1.0, "float64"))).to(x)))  # a test-local rule
    snapshot = Snapshot.of(encoding.egraph)
    origins = encoding.provenance.resolve(snapshot)
    decoded = decode(encoding, snapshot, extract_inserted(snapshot, origins, encoding.roots), origins)
    assert "mul" not in _ops(decoded.region)
    _assert_same_results(egad.interpret(decoded, *args), egad.interpret(program, *args), "rewrite")


def test_long_straight_line_programs_insert_flat():
    def f(x):
        for _ in range(1500):  # a 3000-binding chain: nested terms would hit the recursion limit
            x = x * 1.0001 + 0.5
        return x

    args = (np.ones(2),)
    _check_round_trip(egad.trace(f, *args), args, "chain")


def test_docs_example_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "egraph.md").read_text(), flags=re.S)
    assert blocks
    for k, block in enumerate(blocks):
        script = tmp_path / f"block_{k}.py"
        script.write_text(block)
        runpy.run_path(str(script), run_name="__main__")


def test_the_egraph_layer_imports_without_tvm():
    code = "import sys, egad.egraph; assert not [m for m in sys.modules if 'tvm' in m]"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
