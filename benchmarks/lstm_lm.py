"""The `lstm_lm` workload: an LSTM written the way a person writes it, gate by gate,
over a sequence, with a loss over all steps (issue 6: B=32, I=128, H=256, T in
{16, 64, 256, 1024}, float32).

Nothing in it is pre-optimized: each gate has its own input and recurrent matmul
(eight small matmuls per step), the input projections sit inside the loop, and the
loss reads every step's h. Fusing the gates, batching the input projections out of
the loop and turning the per-step weight-gradient accumulations into one contraction
are left to egad's rewrite rules (benchmarks/optimizer.py measures what they gain).

The same step (`_step`) is run by every system of `benchmarks/suite.py` (the
interface in benchmarks/workload.py): egad's `fori_loop`, numpy, JAX `lax.scan`,
JAX and PyTorch Python loops.

    args = arguments(T=64); program = egad.trace(loss, *args)
    args = arguments("T64"); jax_step = jax.jit(jax.value_and_grad(jax_loss("T64"), argnums=WRT))
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

from .workload import case_or_call, check_case

NAME = "lstm_lm"
B, I, H = 32, 128, 256
CASES = {f"T{T}": {"T": T, "batch": B, "inputs": I, "hidden": H} for T in (16, 64, 256, 1024)}
PARAMS = ("Wi", "Wf", "Wg", "Wo", "Ui", "Uf", "Ug", "Uo", "b")
WRT = tuple(range(len(PARAMS)))  # gradients with respect to every weight and the biases


def wrt(case: str) -> tuple[int, ...]:
    """Every case differentiates every weight and the biases."""
    check_case(NAME, CASES, case)
    return WRT


def _step(sigmoid, tanh, weights, x, h, c):
    """One LSTM step, gate by gate, in whichever array library `sigmoid` and `tanh`
    (and the arrays' own `@`, `*`, `+`) come from: (h, c) -> (h', c')."""
    Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b = weights
    i = sigmoid(x @ Wi + h @ Ui + b[0])
    f = sigmoid(x @ Wf + h @ Uf + b[1])
    g = tanh(x @ Wg + h @ Ug + b[2])
    o = sigmoid(x @ Wo + h @ Uo + b[3])
    c = f * c + i * g
    return o * tanh(c), c


def _loss_of_case(case: str):
    check_case(NAME, CASES, case)
    return _egad_loss


def _reference_of_case(case: str):
    check_case(NAME, CASES, case)
    return _numpy_loss


def _egad_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    weights = (Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b)

    def step(t, carry):
        h, c, total = carry
        h, c = _step(enn.sigmoid, enp.tanh, weights, xs[t], h, c)
        return h, c, total + enp.sum(h * h)

    _, _, total = egad.fori_loop(0, xs.shape[0], step, (h0, c0, enp.zeros((), xs.dtype)))
    return total / (xs.shape[0] * xs.shape[1])


@case_or_call(_loss_of_case)
def loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    """mean over steps of sum(h_t ** 2) / B for an LSTM run over xs: (T, B, I).
    `loss(case)` is this function (the suite's interface)."""
    return _egad_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0)


def _numpy_sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _numpy_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    weights = (Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b)
    h, c, total = h0, c0, 0.0
    for x in xs:
        h, c = _step(_numpy_sigmoid, np.tanh, weights, x, h, c)
        total += np.sum(h * h)
    return total / (xs.shape[0] * xs.shape[1])


@case_or_call(_reference_of_case)
def reference_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
    """`loss` in plain numpy (`reference_loss(case)` is this function)."""
    return _numpy_loss(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0)


def jax_loss(case: str):
    """`loss` in JAX with the time loop a `lax.scan`."""
    check_case(NAME, CASES, case)
    import jax
    import jax.numpy as jnp

    def scanned(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
        weights = (Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b)

        def step(carry, x):
            h, c, total = carry
            h, c = _step(jax.nn.sigmoid, jnp.tanh, weights, x, h, c)
            return (h, c, total + jnp.sum(h * h)), None

        (_, _, total), _ = jax.lax.scan(step, (h0, c0, jnp.zeros((), xs.dtype)), xs)
        return total / (xs.shape[0] * xs.shape[1])

    return scanned


def jax_unrolled_loss(case: str):
    """`loss` in JAX with the time loop a Python loop (unrolled when traced by jit)."""
    check_case(NAME, CASES, case)
    import jax
    import jax.numpy as jnp

    def unrolled(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
        weights = (Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b)
        h, c, total = h0, c0, 0.0
        for t in range(xs.shape[0]):
            h, c = _step(jax.nn.sigmoid, jnp.tanh, weights, xs[t], h, c)
            total = total + jnp.sum(h * h)
        return total / (xs.shape[0] * xs.shape[1])

    return unrolled


def torch_loss(case: str):
    """`loss` in eager PyTorch, the time loop a Python loop."""
    check_case(NAME, CASES, case)
    import torch

    def eager(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0):
        weights = (Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b)
        h, c, total = h0, c0, 0.0
        for t in range(xs.shape[0]):
            h, c = _step(torch.sigmoid, torch.tanh, weights, xs[t], h, c)
            total = total + torch.sum(h * h)
        return total / (xs.shape[0] * xs.shape[1])

    return eager


def arguments(T: int | str = 64, seed: int = 0, batch: int = B, inputs: int = I, hidden: int = H,
              dtype=np.float32) -> tuple:
    """(Wi, Wf, Wg, Wo, Ui, Uf, Ug, Uo, b, xs, h0, c0) for a length-T sequence; T is a
    length or a case name ("T64", with that case's sizes)."""
    if isinstance(T, str):
        config = CASES[check_case(NAME, CASES, T)]
        T, batch, inputs, hidden = config["T"], config["batch"], config["inputs"], config["hidden"]
    rng = np.random.default_rng(seed)

    def normal(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    return (*(normal((inputs, hidden), inputs ** -0.5) for _ in range(4)),
            *(normal((hidden, hidden), hidden ** -0.5) for _ in range(4)),
            normal((4, hidden), 0.1), normal((T, batch, inputs), 1.0),
            np.zeros((batch, hidden), dtype), np.zeros((batch, hidden), dtype))


def program(T: int = 64, **sizes) -> egad.Program:
    return egad.trace(loss, *arguments(T, **sizes))
