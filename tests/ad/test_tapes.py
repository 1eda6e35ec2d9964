"""Tapes: byte accounting, exact ragged taping, and a gradient program whose size
does not depend on trip counts (issue 3, items 3 and 5)."""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp
from egad.ir import walk_bindings
from egad.ir.types import TapeType


def _ragged(w, lengths, h0):
    """Per outer step t, an inner while loop runs lengths[t] times (data-dependent)."""
    def outer(t, h):
        def inner(state):
            k, h = state
            return k + 1, enp.tanh(h * w)

        return egad.while_loop(lambda s: s[0] < lengths[t], inner, (0, h))[1]

    return enp.sum(egad.fori_loop(0, lengths.shape[0], outer, h0) ** 2)


def _elem_bytes(tape_type: TapeType) -> int:
    return int(np.prod(tape_type.elem.shape, dtype=np.int64)) * np.dtype(tape_type.elem.dtype).itemsize


def _inner_bytes_per_trip(grad_program) -> int:
    """Bytes pushed per iteration of the innermost forward while loop, read off the IR."""
    forward_whiles = [b for b in walk_bindings(grad_program.region) if b.op == "while"]
    assert len(forward_whiles) == 1
    body = forward_whiles[0].regions[1]
    return sum(_elem_bytes(b.outputs[0].type) for b in body.bindings if b.op == "tape_push")


def _peak(program, *args) -> int:
    stats = egad.RunStats()
    egad.interpret(program, *args, stats=stats)
    return stats.peak_tape_bytes


def test_ragged_nested_while_tapes_exactly_the_trips_taken():
    w, h0 = np.float64(0.9), np.linspace(-1, 1, 8)
    lengths = np.array([1, 2, 3], np.int64)
    grad = egad.grad(egad.trace(_ragged, w, lengths, h0), wrt=(0, 2))
    per_trip = _inner_bytes_per_trip(grad)
    assert per_trip >= h0.nbytes  # at least tanh's output is a residual
    # Same number of outer steps and of inner trips in all: same bytes, however ragged
    # (no padding of inner loops to the longest one).
    assert _peak(grad, w, np.array([1, 2, 3]), h0) == _peak(grad, w, np.array([6, 0, 0]), h0) \
        == _peak(grad, w, np.array([2, 2, 2]), h0)
    # Each extra inner trip costs exactly the residuals of one inner iteration.
    base = _peak(grad, w, np.array([1, 1, 1]), h0)
    for lengths in ([4, 1, 1], [2, 5, 0], [7, 7, 7]):
        extra = sum(lengths) - 3
        assert _peak(grad, w, np.array(lengths), h0) == base + extra * per_trip


def test_tapes_are_empty_after_the_adjoint_runs():
    w, h0 = np.float64(0.9), np.linspace(-1, 1, 8)
    lengths = np.array([3, 0, 2], np.int64)
    grad = egad.grad(egad.trace(_ragged, w, lengths, h0))
    stats = egad.RunStats()
    egad.interpret(grad, w, lengths, h0, stats=stats)
    assert stats.peak_tape_bytes > 0 and stats.tape_bytes == 0


def _rnn(W, U, xs, h0):
    return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0) ** 2)


def test_gradient_program_size_does_not_depend_on_trip_count():
    rng = np.random.default_rng(0)
    W, U, h0 = rng.standard_normal((4, 4)), rng.standard_normal((3, 4)), np.zeros((2, 4))
    sizes = []
    for T in (5, 500):
        xs = rng.standard_normal((T, 2, 3))
        grad = egad.grad(egad.trace(_rnn, W, U, xs, h0), wrt=(0, 1))
        sizes.append(sum(1 for _ in walk_bindings(grad.region)))
    assert sizes[0] == sizes[1]


def test_rnn_tape_bytes_grow_linearly_with_length():
    rng = np.random.default_rng(0)
    W, U, h0 = rng.standard_normal((4, 4)), rng.standard_normal((3, 4)), np.zeros((2, 4))
    grad = egad.grad(egad.trace(_rnn, W, U, egad.Spec(("T", 2, 3), "float64"), h0), wrt=(0, 1))
    peaks = {T: _peak(grad, W, U, rng.standard_normal((T, 2, 3)), h0) for T in (0, 10, 20)}
    assert peaks[0] == 0 and peaks[20] == 2 * peaks[10] > 0


def _grow(x):
    return enp.sum(egad.while_loop(lambda v: enp.sum(v) < 50.0, lambda v: enp.sin(v) * 0.1 + v * 1.5, x))


def bounded_growth(x, max_iters: int = 3):
    """A while loop its condition stops after 7 trips from x = [0.3, 0.7], with
    `max_iters` set on the traced program (the frontend does not expose it): the
    program, and the loop binding."""
    import dataclasses

    traced = egad.trace(_grow, x)
    (loop,) = [b for b in traced.region.bindings if b.op == "while"]
    bounded = dataclasses.replace(loop, attrs={**loop.attrs, "max_iters": max_iters})
    region = dataclasses.replace(traced.region, bindings=[bounded if b is loop else b
                                                          for b in traced.region.bindings])
    return egad.verify(dataclasses.replace(traced, region=region)), bounded


def test_a_while_loops_max_iters_bounds_its_forward_copy_too():
    """`max_iters` (docs/ir.md) stops a while loop early; the gradient program's
    forward copy keeps it, so the value and the gradient are those of the loop that
    stopped, checked against central differences of the primal."""
    from .gradcheck import central_difference

    x = np.array([0.3, 0.7])
    program, loop = bounded_growth(x)
    stats = egad.RunStats()
    value = egad.interpret(program, x, stats=stats)
    assert stats.while_trips[id(loop)] == [3]  # stopped by max_iters, not by its condition
    assert egad.interpret(egad.trace(_grow, x), x) > 50.0  # which stops it after more trips
    got_value, (grad,) = egad.interpret(egad.value_and_grad(program, wrt=(0,)), x)
    np.testing.assert_allclose(got_value, value, rtol=1e-14)
    np.testing.assert_allclose(grad, central_difference(lambda v: egad.interpret(program, v), (x,), 0), rtol=1e-6)
