"""The LSTM that benchmarks/memory.py and benchmarks/compile_time.py measure: a loss
over T steps of one cell (a fused gate matmul split by static slices), written two
ways — as an `egad.fori_loop` over `xs[t]` and unrolled by a Python `for` loop, so
the traced IR holds T copies of the cell.

Sizes are B=32, I=64, H=128 float32: the issue's I=128, H=256 took ~100 s a
gradient call at T=1024 on 2 cores with TVM's stock, unscheduled CPU build (DESIGN §7).
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

B, I, H = 32, 64, 128
WRT = (0, 1, 2)  # gradients with respect to Wx, Wh, b


def cell(Wx, Wh, b, x, h, c):
    """One LSTM step: (h, c) -> (h', c'), for any hidden size (read off h)."""
    hidden = h.shape[1]
    z = x @ Wx + h @ Wh + b
    i = enn.sigmoid(z[:, :hidden])
    f = enn.sigmoid(z[:, hidden : 2 * hidden])
    g = enp.tanh(z[:, 2 * hidden : 3 * hidden])
    o = enn.sigmoid(z[:, 3 * hidden :])
    c = f * c + i * g
    return o * enp.tanh(c), c


def loop_loss(Wx, Wh, b, xs, h0, c0):
    """sum(h_T ** 2) with the steps in one `egad.fori_loop`."""
    h, _ = egad.fori_loop(0, xs.shape[0], lambda t, hc: cell(Wx, Wh, b, xs[t], *hc), (h0, c0))
    return enp.sum(h * h)


def unrolled_loss(Wx, Wh, b, xs, h0, c0):
    """sum(h_T ** 2) with the steps unrolled at trace time (needs a static T)."""
    h, c = h0, c0
    for t in range(xs.shape[0]):
        h, c = cell(Wx, Wh, b, xs[t], h, c)
    return enp.sum(h * h)


def arguments(T: int, seed: int = 0) -> tuple:
    """(Wx, Wh, b, xs, h0, c0) for a length-T sequence, float32."""
    rng = np.random.default_rng(seed)

    def normal(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return (normal((I, 4 * H), I ** -0.5), normal((H, 4 * H), H ** -0.5), normal((4 * H,), 0.1),
            normal((T, B, I), 1.0), np.zeros((B, H), np.float32), np.zeros((B, H), np.float32))


def symbolic_length_xs() -> egad.Spec:
    """The spec of xs for a program traced once for every sequence length T."""
    return egad.Spec(("T", B, I), "float32")
