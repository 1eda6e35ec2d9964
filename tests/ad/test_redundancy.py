"""Gradient redundancy elimination (issue 3, item 4), proven by counting the
adjoint's bindings and tapes on programs built to expose each case."""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp
from egad.ir import walk_bindings

from .gradcheck import assert_gradients_match

RNG = np.random.default_rng(0)
W, U = RNG.standard_normal((4, 4)), RNG.standard_normal((3, 4))
XS, H0 = RNG.standard_normal((6, 2, 3)), np.zeros((2, 4))


def _ops(program) -> list[str]:
    return [b.op for b in walk_bindings(program.region)]


def _adjoint_loop(program):
    """The reversed (adjoint) `for` of a program with one forward loop."""
    (loop,) = [b for b in program.region.bindings if b.op == "for" and b.attrs["reverse"]]
    return loop


def _rnn(W, U, xs, h0):
    return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0) ** 2)


def test_only_requested_arguments_get_adjoints():
    program = egad.trace(_rnn, W, U, XS, H0)
    both = _adjoint_loop(egad.grad(program, wrt=(0, 1)))
    only_w = _adjoint_loop(egad.grad(program, wrt=0))
    # state: dh, dW, the tapes of tanh's output and h; with dU also its accumulator
    assert (only_w.attrs["n_state"], both.attrs["n_state"]) == (4, 5)
    # only dU's formula xs[t]^T @ dz reads xs[t]: the adjoint body re-reads that row
    assert _ops(egad.grad(program, wrt=0)).count("take") < _ops(egad.grad(program, wrt=(0, 1))).count("take")


def test_a_row_of_an_invariant_at_the_counter_is_read_again_not_taped():
    program = egad.trace(_rnn, W, U, XS, H0)
    gradient = egad.grad(program, wrt=(0, 1))
    pushed = [b.inputs[1] for b in walk_bindings(gradient.region) if b.op == "tape_push"]
    producers = {v.uid: b for b in walk_bindings(gradient.region) for v in b.outputs}
    # tanh's output and h (a loop parameter)
    assert len(pushed) == 2 and all(v.uid not in producers or producers[v.uid].op != "take" for v in pushed)
    adjoint_body = _adjoint_loop(gradient).regions[-1]
    (row,) = [b for b in adjoint_body.bindings if b.op == "take"]
    assert row.inputs[0] in adjoint_body.params and row.inputs[1] is adjoint_body.params[0]  # xs at i
    got = egad.interpret(gradient, W, U, XS, H0)
    eps, k = 1e-6, (1, 2)
    bumped = U.copy()
    bumped[k] += eps
    lowered = U.copy()
    lowered[k] -= eps
    numeric = (egad.interpret(program, W, bumped, XS, H0) - egad.interpret(program, W, lowered, XS, H0)) / (2 * eps)
    np.testing.assert_allclose(got[1][k], numeric, rtol=1e-6)


def test_no_adjoint_for_values_that_do_not_reach_the_loss():
    def f(x, W):
        loss = enp.sum(enp.tanh(x @ W))
        unrelated = enp.sum(enp.exp(x) @ W)  # returned as aux: computed, never differentiated
        return loss, unrelated

    grad = egad.grad(egad.trace(f, H0[:, :4] + 0.5, W), wrt=(0, 1), has_aux=True)
    assert _ops(grad).count("exp") == 1  # the forward exp for aux, and no adjoint of it
    assert _ops(grad).count("tanh") == 1


def test_residuals_the_adjoint_does_not_read_are_not_taped():
    def accumulate(xs, h0):  # add's VJP reads no primal value
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: h + xs[t], h0))

    assert "tape_push" not in _ops(egad.grad(egad.trace(accumulate, XS, H0[:, :3]), wrt=(0, 1)))

    def squash(h0):  # tanh's VJP reads only its output: exactly one tape
        return enp.sum(egad.fori_loop(0, 5, lambda t, h: enp.tanh(h), h0))

    assert _ops(egad.grad(egad.trace(squash, H0 + 0.3))).count("tape_push") == 1


def test_symbolic_zeros_propagate():
    def f(x, y):
        return enp.sum(x * 2.0) + enp.sum(egad.stop_gradient(y) * enp.sin(y))

    grad = egad.grad(egad.trace(f, W, U), wrt=0)
    # d/dx needs nothing from the y term: no sin, cos or product with y survives
    assert not {"sin", "cos"} & set(_ops(grad))
    np.testing.assert_allclose(egad.interpret(grad, W, U), np.full_like(W, 2.0))
    # differentiating w.r.t. y alone: only the sin term, stop_gradient contributes zero
    dy = egad.interpret(egad.grad(egad.trace(f, W, U), wrt=1), W, U)
    np.testing.assert_allclose(dy, U * np.cos(U))


def test_loop_invariant_gather_is_one_scatter_add_after_the_loop():
    def embed(E, tokens):
        return enp.sum(egad.fori_loop(0, tokens.shape[0], lambda t, h: enp.tanh(h + E[tokens[t]]), enp.zeros(4)))

    E, tokens = RNG.standard_normal((10, 4)), np.array([3, 1, 3, 7], np.int64)
    grad = egad.grad(egad.trace(embed, E, tokens))
    top_level = [b.op for b in grad.region.bindings]
    assert top_level.count("index_add") == 1  # after the adjoint loop
    adjoint_body = _adjoint_loop(grad).regions[0]
    assert not any(b.op in ("index_add", "update") for b in walk_bindings(adjoint_body))


def test_rows_at_a_constant_index_of_a_small_invariant_accumulate_densely_in_the_loop():
    """b[0] of a 2-row bias, read every trip: stacking its gradient row per trip would
    hold T copies, growing with the loop; a dense accumulator holds one bias."""
    def biased(b, xs):
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(h * xs[t] + b[0] - b[1]),
                                      enp.zeros(4)) ** 2)

    b, xs = RNG.standard_normal((2, 4)), RNG.standard_normal((50, 4))
    grad = egad.grad(egad.trace(biased, b, xs))
    adjoint = _adjoint_loop(grad)
    assert len(adjoint.outputs) == adjoint.attrs["n_state"]  # no per-trip rows stacked
    assert_gradients_match(biased, (b, xs), wrt=(0,), grads=egad.interpret(grad, b, xs))


def test_an_op_without_a_gradient_is_refused_with_its_line():
    def f(x):
        return enp.einsum("ii->", x)  # a trace: its VJP would need a diagonal scatter

    import pytest

    with pytest.raises(egad.UnsupportedError) as info:
        egad.grad(egad.trace(f, W))
    assert "einsum" in str(info.value) and "test_redundancy.py" in str(info.value)


def test_literals_are_recreated_not_taped():
    def scale(h0):  # the adjoint of h * 3.0 reads the literal 3.0, never worth a tape
        return enp.sum(egad.fori_loop(0, 4, lambda t, h: h * 3.0, h0))

    assert "tape_push" not in _ops(egad.grad(egad.trace(scale, H0 + 1.0)))
