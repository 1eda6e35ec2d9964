"""Shared by the visualiser's tests: one small optimized gradient with a loop."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp


def rnn_loss(W, U, xs, h0):
    def step(t, h):
        return enp.tanh(xs[t] @ U + h @ W)
    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)


def rnn_args(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((16, 16)) * 0.2, rng.standard_normal((8, 16)) * 0.3,
            rng.standard_normal((12, 4, 8)), np.zeros((4, 16)))


@pytest.fixture(scope="session")
def rnn_optimization():
    """The default rules on a tanh RNN's gradient: batch-input-projection and
    batch-weight-gradient fire, and both the loop and its adjoint are extracted."""
    from egad.optimizer import optimize_program

    args = rnn_args()
    gradient = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(0, 1))
    optimization = optimize_program(gradient, egad.rules.default(), check_args=args)
    assert optimization.fallback is None and optimization.graph is not None
    return optimization


def branchy_loss(W, xs, h0):
    def step(t, h):
        z = xs[t] @ W + h
        return egad.cond(enp.sum(z) > 0, lambda z: enp.tanh(z), lambda z: z * 0.5, z)
    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)


@pytest.fixture(scope="session")
def branchy_optimization():
    """A loop whose body branches: if-frames inside loop frames."""
    from egad.optimizer import optimize_program

    rng = np.random.default_rng(0)
    args = (rng.standard_normal((8, 8)) * 0.3, rng.standard_normal((5, 4, 8)), np.zeros((4, 8)))
    gradient = egad.value_and_grad(egad.trace(branchy_loss, *args), wrt=(0,))
    optimization = optimize_program(gradient, egad.rules.default(), check_args=args)
    assert optimization.fallback is None
    return optimization


def many_loops(W, xs, h0):
    """66 loops in a row, each ten tanh layers deep: over 5,000 e-nodes in 67 regions."""
    h = h0
    for k in range(66):
        def step(t, h, k=k):
            for j in range(10):
                h = enp.tanh(h @ W + xs[t] * (0.5 + 0.01 * (k + j))) * 0.9 + h * 0.1
            return h
        h = egad.fori_loop(0, xs.shape[0], step, h)
    return enp.sum(h * h)


@pytest.fixture(scope="session")
def large_optimization():
    """`many_loops` encoded as it is written (no rules: saturation would only add to it),
    recorded as the optimizer records what it extracts."""
    from egad.egraph import Snapshot, encode, extract_inserted
    from egad.egraph.record import EGraphRecord
    from egad.extract import CostModel, predicted_cost
    from egad.optimizer import Optimization

    rng = np.random.default_rng(0)
    program = egad.trace(many_loops, rng.standard_normal((8, 8)) * 0.2, rng.standard_normal((6, 4, 8)),
                         np.zeros((4, 8)))
    encoding = encode(program)
    snapshot = Snapshot.of(encoding.egraph)
    origins = encoding.provenance.resolve(snapshot)
    as_written = extract_inserted(snapshot, origins, encoding.roots)
    model = CostModel()
    cost = predicted_cost(encoding, snapshot, as_written, model)
    return Optimization(program, program, (), predicted_before=cost, predicted_after=cost,
                        graph=EGraphRecord.of(encoding, snapshot, origins, as_written, as_written, model))
