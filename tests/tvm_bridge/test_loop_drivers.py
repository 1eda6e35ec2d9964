"""The loop drivers (tvm_bridge/runtime.py `egad.for_loop`, `egad.while_loop`) never
hand the VM back one of its own buffers: a value every trip passes through unchanged,
or an invariant carried out as state, is the argument the VM passed in, whose memory
it reuses once the call has consumed it. Compiled code then read whatever the next
kernels wrote there (found by fuzzing `egad.function`: a `break` flag's loop carried
its accumulator through)."""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache

X = np.array([0.1, -0.2, 0.3])


def check_against_interpreter(fn, args, calls):
    program = egad.trace(fn, *args)
    compiled = build(program, cache=BuildCache(None))
    for call in calls:
        np.testing.assert_allclose(compiled(*call), egad.interpret(program, *call), rtol=1e-12)


def for_passing_a_value_through(x, n):
    total = enp.sum(x) * 2.0

    def body(i, carry):
        total, h = carry
        return total, enp.tanh(h + total)  # total passes through every trip

    total, h = egad.fori_loop(0, n, body, (total, x))
    later = enp.sum(x * 3.0) + 1.0 + enp.sum(enp.tanh(x)) * 0.5  # kernels that may take total's memory
    return total + later + enp.sum(h)


def test_a_for_loop_hands_back_a_value_its_trips_passed_through_as_its_own():
    check_against_interpreter(for_passing_a_value_through, (X, np.int64(3)),
                              [(X, np.int64(n)) for n in (0, 1, 3)])


def while_carrying_an_invariant_out(x, limit):
    scale = enp.sum(x) + 2.0

    def body(state):
        k, h, carried = state
        return k + 1, enp.tanh(h * scale), scale  # the invariant, as state

    k, h, carried = egad.while_loop(lambda state: state[0] < limit, body, (0, x, enp.zeros(())))
    later = enp.sum(x * 3.0) + 1.0 + enp.sum(enp.tanh(x)) * 0.5
    return carried + later + enp.sum(h) + k


def test_a_while_loop_hands_back_an_invariant_it_carried_out_as_its_own():
    check_against_interpreter(while_carrying_an_invariant_out, (X, np.int64(3)),
                              [(X, np.int64(n)) for n in (0, 1, 3)])


def scan_of_symbolic_rows(xs, h0):
    h, ys = egad.scan(lambda h, x: (h * 0.5 + x, h * x), h0, xs)
    return enp.sum(h) + enp.sum(ys) + enp.sum(egad.fori_loop(1, xs.shape[0], lambda t, g: g + xs[t][1:], h0[1:]))


def test_a_loop_of_no_trip_stacks_rows_of_symbolic_size():
    """Its empty stacked outputs took their row shapes from names ("B"): a raw TypeError,
    forward and in every gradient (AD stacks residuals). The sizes are read off the
    loop's inputs, a slice's `B-1` too. Found by fuzzing."""
    program = egad.trace(scan_of_symbolic_rows, egad.Spec(("T", "B"), "float64"), egad.Spec(("B",), "float64"))
    value = build(program, cache=BuildCache(None))
    gradient = egad.value_and_grad(program, wrt=(0, 1))
    value_and_grad = build(gradient, cache=BuildCache(None))
    for T in (0, 1, 3):
        xs, h0 = np.arange(T * 4.0).reshape(T, 4), np.ones(4)
        np.testing.assert_allclose(value(xs, h0), egad.interpret(program, xs, h0), rtol=1e-12)
        got, want = value_and_grad(xs, h0), egad.interpret(gradient, xs, h0)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        for g, w in zip(got[1], want[1]):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_a_branch_or_loop_that_carries_nothing_out_builds_and_runs():
    """`if x[0] > 0.5: pass` (or egad.cond of empty tuples) is an `if` with no outputs:
    lowered as a Relax If of empty tuples, the VM read a garbage register and raised at
    the first call. Found by fuzzing."""
    def empty_branches(x):
        egad.cond(x[0] > 0.5, lambda: (), lambda: ())
        egad.fori_loop(0, 3, lambda i, state: state, ())
        return x[1] * 2.0

    x = np.array([0.1, 0.2, 0.3])
    program = egad.trace(empty_branches, x)
    assert [b.op for b in program.region.bindings if not b.outputs] == ["if", "for"]
    assert build(program, cache=BuildCache(None))(x) == egad.interpret(program, x) == 0.4
