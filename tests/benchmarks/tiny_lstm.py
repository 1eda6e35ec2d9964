"""A tiny workload for the suite's own tests: benchmarks/lstm_lm.py at toy sizes
(T=3, B=2, I=3, H=4); a case whose PyTorch loss has a real bug (the forget gate
reads the input gate's bias), so that the suite's gradient check has something
wrong to reject; and a case whose arguments take ten minutes to make, so that the
suite's cap has something to stop.

    python -m benchmarks.suite tests.benchmarks.tiny_lstm:T3 --systems egad torch-eager --no-readme
"""
from __future__ import annotations

import time

from benchmarks import lstm_lm

NAME = "tiny_lstm"
SIZES = {"T": 3, "batch": 2, "inputs": 3, "hidden": 4}
CASES = {"T3": SIZES, "T3_wrong_torch": SIZES, "T3_hangs": SIZES}


def arguments(case, seed=0):
    if case == "T3_hangs":
        time.sleep(600)
    sizes = dict(CASES[case])
    return lstm_lm.arguments(sizes.pop("T"), seed, **sizes)


def wrt(case):
    return lstm_lm.WRT


def loss(case):
    return lstm_lm.loss("T16")  # the lstm_lm loss reads its sizes off the arguments


def reference_loss(case):
    return lstm_lm.reference_loss("T16")


def jax_loss(case):
    return lstm_lm.jax_loss("T16")


def jax_unrolled_loss(case):
    return lstm_lm.jax_unrolled_loss("T16")


def torch_loss(case):
    if case == "T3_wrong_torch":
        return _wrong_torch_loss
    return lstm_lm.torch_loss("T16")


def _wrong_torch_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    import torch

    h, c, total = h0, c0, 0.0
    for x in xs:
        i = torch.sigmoid(x @ Wi + h @ Ui + b[0])
        f = torch.sigmoid(x @ Wf + h @ Uf + b[0])  # the bug: b[0], not b[1]
        g = torch.tanh(x @ Wg + h @ Ug + b[2])
        o = torch.sigmoid(x @ Wo + h @ Uo + b[3])
        c = f * c + i * g
        h = o * torch.tanh(c)
        total = total + torch.sum(h * h)
    return total / (xs.shape[0] * xs.shape[1])
