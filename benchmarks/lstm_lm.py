"""The `lstm_lm` workload: an LSTM written the way a person writes it, gate by gate,
over a sequence, with a loss over all steps (issue 6: B=32, I=128, H=256, T in
{16, 64, 256, 1024}, float32).

Nothing in it is pre-optimized: each gate has its own input and recurrent matmul
(eight small matmuls per step), the input projections sit inside the loop, and the
loss reads every step's h. Fusing the gates, batching the input projections out of
the loop and turning the per-step weight-gradient accumulations into one contraction
are left to egad's rewrite rules (benchmarks/optimizer.py measures what they gain).

    args = arguments(T=64); program = egad.trace(loss, *args)
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

B, I, H = 32, 128, 256
PARAMS = ("Wi", "Wf", "Wg", "Wo", "Ui", "Uf", "Ug", "Uo", "b")
WRT = tuple(range(len(PARAMS)))  # gradients with respect to every weight and the biases


def loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    """mean over steps of sum(h_t ** 2) / B for an LSTM run over xs: (T, B, I)."""

    def step(t, carry):
        h, c, total = carry
        x = xs[t]
        i = enn.sigmoid(x @ Wi + h @ Ui + b[0])
        f = enn.sigmoid(x @ Wf + h @ Uf + b[1])
        g = enp.tanh(x @ Wg + h @ Ug + b[2])
        o = enn.sigmoid(x @ Wo + h @ Uo + b[3])
        c = f * c + i * g
        h = o * enp.tanh(c)
        return h, c, total + enp.sum(h * h)

    _, _, total = egad.fori_loop(0, xs.shape[0], step, (h0, c0, enp.zeros((), xs.dtype)))
    return total / (xs.shape[0] * xs.shape[1])


def reference_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    """`loss` in plain numpy."""
    def sigmoid(z):
        return 1 / (1 + np.exp(-z))

    h, c, total = h0, c0, 0.0
    for x in xs:
        i = sigmoid(x @ Wi + h @ Ui + b[0])
        f = sigmoid(x @ Wf + h @ Uf + b[1])
        g = np.tanh(x @ Wg + h @ Ug + b[2])
        o = sigmoid(x @ Wo + h @ Uo + b[3])
        c = f * c + i * g
        h = o * np.tanh(c)
        total += np.sum(h * h)
    return total / (xs.shape[0] * xs.shape[1])


def arguments(T: int = 64, seed: int = 0, batch: int = B, inputs: int = I, hidden: int = H,
              dtype=np.float32) -> tuple:
    """(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0) for a length-T sequence."""
    rng = np.random.default_rng(seed)

    def normal(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    return (*(normal((inputs, hidden), inputs ** -0.5) for _ in range(4)),
            *(normal((hidden, hidden), hidden ** -0.5) for _ in range(4)),
            normal((4, hidden), 0.1), normal((T, batch, inputs), 1.0),
            np.zeros((batch, hidden), dtype), np.zeros((batch, hidden), dtype))


def program(T: int = 64, **sizes) -> egad.Program:
    return egad.trace(loss, *arguments(T, **sizes))
