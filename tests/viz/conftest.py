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
