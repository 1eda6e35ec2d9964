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
