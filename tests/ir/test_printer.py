"""The printer: every op, region and source line visible in readable text."""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp


def test_printer_shows_ops_types_regions_and_lines():
    def loss(W, xs, h0):
        def step(t, h):
            return egad.cond(t % 2 == 0, lambda h: enp.tanh(xs[t] + h @ W), lambda h: h, h)

        return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0))

    program = egad.trace(loss, np.eye(3, dtype=np.float32), egad.Spec(("T", 3), "float32"), np.zeros(3, np.float32))
    text = str(program)
    assert text.startswith("program loss(%W: f32[3,3], %xs: f32[T,3], %h0: f32[3])")
    for fragment in ["for [", "body(", "if %", "then(", "else(", "tanh(", "@", "reduce_sum", "yield", "return",
                     "%xs.shape[0]", "test_printer.py:"]:
        assert fragment in text, fragment
    assert repr(program).startswith("<egad.Program loss(")
