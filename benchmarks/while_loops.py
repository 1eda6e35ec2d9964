"""The `while_loops` workload (issue 6): three loops whose trip count is data, each
differentiated through the loop, the same math written for egad, numpy, JAX and
PyTorch (float32, same seeds).

- `newton`: Kepler's equation E - e sin E = M solved by Newton's method for a batch
  of (B, n) unknowns, until the residual's root mean square is below `tol` (or
  `max_iters`).
  The eccentricities e = 0.9 sigmoid(z A) and mean anomalies M = z C come from a
  linear layer; the loss is mean((E - y)^2), differentiated w.r.t. A and C through
  the iterations (which converges to the implicit-function gradient).
- `euler`: a neural ODE dh/dt = tanh(h W + x U + b), h(0) = 0, integrated by explicit
  Euler until the state leaves a ball, mean(h^2) >= radius^2 (or `max_steps`); the
  loss is the regression error of the exit state's readout, mean((h V - y)^2).
- `rnn_lengths`: a tanh RNN language model over a batch of sequences of different
  lengths: the while loop runs until the longest sequence ends (its stop is data),
  and each sequence's state and loss are masked once it has ended. The loss is the
  next-token cross-entropy per valid token.

Nothing is pre-optimized (the ODE's input projection x U + b sits in the loop, as a
person writes the dynamics function); hoisting is left to egad's rules.

Module convention (shared by every workload of the suite): `CASES` (name -> config),
`arguments(case, seed)`, `WRT` (case -> positions differentiated), `loss(case)`
(egad-traceable), `reference_loss(case)` (numpy), `jax_loss(case)` (lax.while_loop:
JAX's reverse mode refuses it, and the suite records that refusal),
`jax_unrolled_loss(case)` (Python loops unrolled to the maximum trip count, the
state frozen by a mask once the stop condition holds: the same math, jittable),
`torch_loss(case)` (eager; a Python `while` on `.item()`). A case is a name in
CASES or a config dict with a "kind" (tests shrink the sizes that way).

    args = arguments("newton")
    program = egad.trace(loss("newton"), *args)
    value, grads = egad.interpret(egad.value_and_grad(program, wrt=WRT["newton"]), *args)
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

from .workload import case_config

NAME = "while_loops"

CASES = {
    "newton": {"kind": "newton", "batch": 64, "unknowns": 32, "inputs": 16, "tol": 1e-5, "max_iters": 32},
    "euler": {"kind": "euler", "batch": 32, "hidden": 64, "inputs": 16, "outputs": 8, "dt": 0.05,
              "radius": 1.0, "max_steps": 128},
    "rnn_lengths": {"kind": "rnn_lengths", "vocab": 64, "embed": 32, "hidden": 64, "batch": 32, "max_len": 48},
}

# The positions `arguments` returns that are differentiated (the parameters).
WRT = {"newton": (0, 1), "euler": (0, 1, 2, 3), "rnn_lengths": (0, 1, 2, 3, 4)}


def _config(case) -> dict:
    return case_config(NAME, CASES, case)


def wrt(case) -> tuple:
    """The differentiated argument positions of a case (a name or a config)."""
    return WRT[_config(case)["kind"]]


def arguments(case, seed: int = 0) -> tuple:
    """The float32 arrays (int64 tokens and lengths) the case's losses take."""
    config = _config(case)
    rng = np.random.default_rng(seed)

    def normal(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    kind = config["kind"]
    if kind == "newton":
        B, n, I = config["batch"], config["unknowns"], config["inputs"]
        # A, C, z, y: M = z C has unit scale, e = 0.9 sigmoid(z A) spans (0, 0.9)
        return normal((I, n), I ** -0.5), normal((I, n), 1.5 * I ** -0.5), normal((B, I)), normal((B, n))
    if kind == "euler":
        B, H, I, O = config["batch"], config["hidden"], config["inputs"], config["outputs"]
        # W, U, b, V, x, y
        return (normal((H, H), H ** -0.5), normal((I, H), I ** -0.5), normal((H,), 0.1), normal((H, O), H ** -0.5),
                normal((B, I)), normal((B, O)))
    V, D, H, B, T = config["vocab"], config["embed"], config["hidden"], config["batch"], config["max_len"]
    # E, W, U, b, Vout, tokens (T + 1, B), lengths (B,) in [1, T]
    tokens = rng.integers(0, V, size=(T + 1, B), dtype=np.int64)
    lengths = rng.integers(1, T + 1, size=(B,), dtype=np.int64)
    return (normal((V, D)), normal((H, H), H ** -0.5), normal((D, H), D ** -0.5), np.zeros(H, np.float32),
            normal((H, V), H ** -0.5), tokens, lengths)


# --- egad ------------------------------------------------------------------------------------


def loss(case):
    """The case's loss written with egad ops and `egad.while_loop`."""
    config = _config(case)
    return {"newton": _newton, "euler": _euler, "rnn_lengths": _rnn_lengths}[config["kind"]](config)


def _newton(config):
    tol, max_iters = config["tol"], config["max_iters"]

    def newton_loss(A, C, z, y):
        e = 0.9 * enn.sigmoid(z @ A)
        M = z @ C

        def keep_going(state):
            k, _, err = state
            return enp.logical_and(k < max_iters, err > tol ** 2)

        def step(state):
            k, E, _ = state
            E = E - (E - e * enp.sin(E) - M) / (1 - e * enp.cos(E))
            return k + 1, E, enp.mean(enp.square(E - e * enp.sin(E) - M))

        err0 = enp.mean(enp.square(e * enp.sin(M)))  # the mean squared residual at E = M
        _, E, _ = egad.while_loop(keep_going, step, (0, M, err0))
        return enp.mean(enp.square(E - y))

    return newton_loss


def _euler(config):
    dt, radius, max_steps = config["dt"], config["radius"], config["max_steps"]

    def euler_loss(W, U, b, V, x, y):
        def keep_going(state):
            k, h = state
            return enp.logical_and(k < max_steps, enp.mean(h * h) < radius * radius)

        def step(state):
            k, h = state
            return k + 1, h + dt * enp.tanh(h @ W + x @ U + b)

        h0 = enp.zeros((x.shape[0], W.shape[0]), W.dtype)
        _, h = egad.while_loop(keep_going, step, (0, h0))
        return enp.mean(enp.square(h @ V - y))

    return euler_loss


def _rnn_lengths(config):
    vocab = config["vocab"]

    def rnn_loss(E, W, U, b, V, tokens, lengths):
        longest = enp.max(lengths)

        def keep_going(state):
            return state[0] < longest

        def step(state):
            t, h, total = state
            h_next = enp.tanh(E[tokens[t]] @ U + h @ W + b)
            live = t < lengths  # (B,): this sequence has not ended
            logp = enn.log_softmax(h_next @ V)
            picked = enp.sum(enn.one_hot(tokens[t + 1], vocab, dtype=W.dtype) * logp, axis=-1)
            return t + 1, enp.where(live[:, None], h_next, h), total - enp.sum(enp.where(live, picked, 0.0))

        h0 = enp.zeros((tokens.shape[1], W.shape[0]), W.dtype)
        _, _, total = egad.while_loop(keep_going, step, (0, h0, enp.zeros((), W.dtype)))
        return total / enp.sum(lengths).astype(W.dtype)

    return rnn_loss


# --- plain numpy ------------------------------------------------------------------------------


def _np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np_log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def reference_loss(case):
    """The case's loss in plain numpy, with Python `while` loops."""
    config = _config(case)
    kind = config["kind"]
    if kind == "newton":
        def newton_loss(A, C, z, y):
            e, M = 0.9 * _np_sigmoid(z @ A), z @ C
            k, E, err = 0, M, np.mean(np.square(e * np.sin(M)))
            while k < config["max_iters"] and err > config["tol"] ** 2:
                E = E - (E - e * np.sin(E) - M) / (1 - e * np.cos(E))
                k, err = k + 1, np.mean(np.square(E - e * np.sin(E) - M))
            return np.mean(np.square(E - y))
        return newton_loss
    if kind == "euler":
        def euler_loss(W, U, b, V, x, y):
            k, h = 0, np.zeros((x.shape[0], W.shape[0]), W.dtype)
            while k < config["max_steps"] and np.mean(h * h) < config["radius"] ** 2:
                k, h = k + 1, h + config["dt"] * np.tanh(h @ W + x @ U + b)
            return np.mean(np.square(h @ V - y))
        return euler_loss

    def rnn_loss(E, W, U, b, V, tokens, lengths):
        t, h, total = 0, np.zeros((tokens.shape[1], W.shape[0]), W.dtype), 0.0
        batch = np.arange(tokens.shape[1])
        while t < np.max(lengths):
            h_next = np.tanh(E[tokens[t]] @ U + h @ W + b)
            live = t < lengths
            picked = _np_log_softmax(h_next @ V)[batch, tokens[t + 1]]
            h, total, t = np.where(live[:, None], h_next, h), total - np.sum(np.where(live, picked, 0.0)), t + 1
        return total / np.float32(np.sum(lengths))
    return rnn_loss


# --- JAX ----------------------------------------------------------------------------------------


def jax_loss(case):
    """The case's loss with `lax.while_loop` (JAX's reverse mode cannot differentiate
    it; the suite records JAX's error as the result)."""
    import jax.numpy as jnp
    from jax import lax, nn

    config = _config(case)
    kind = config["kind"]
    if kind == "newton":
        def newton_loss(A, C, z, y):
            A, C, z, y = map(jnp.asarray, (A, C, z, y))
            e, M = 0.9 * nn.sigmoid(z @ A), z @ C

            def keep_going(state):
                k, _, err = state
                return (k < config["max_iters"]) & (err > config["tol"] ** 2)

            def step(state):
                k, E, _ = state
                E = E - (E - e * jnp.sin(E) - M) / (1 - e * jnp.cos(E))
                return k + 1, E, jnp.mean(jnp.square(E - e * jnp.sin(E) - M))

            _, E, _ = lax.while_loop(keep_going, step, (0, M, jnp.mean(jnp.square(e * jnp.sin(M)))))
            return jnp.mean(jnp.square(E - y))
        return newton_loss
    if kind == "euler":
        def euler_loss(W, U, b, V, x, y):
            W, U, b, V, x, y = map(jnp.asarray, (W, U, b, V, x, y))
            def keep_going(state):
                k, h = state
                return (k < config["max_steps"]) & (jnp.mean(h * h) < config["radius"] ** 2)

            def step(state):
                k, h = state
                return k + 1, h + config["dt"] * jnp.tanh(h @ W + x @ U + b)

            _, h = lax.while_loop(keep_going, step, (0, jnp.zeros((x.shape[0], W.shape[0]), W.dtype)))
            return jnp.mean(jnp.square(h @ V - y))
        return euler_loss

    def rnn_loss(E, W, U, b, V, tokens, lengths):
        E, W, U, b, V = map(jnp.asarray, (E, W, U, b, V))
        tokens, lengths = jnp.asarray(tokens, jnp.int32), jnp.asarray(lengths, jnp.int32)

        def step(state):
            t, h, total = state
            h, total = _jax_rnn_step(config, E, W, U, b, V, tokens, lengths, t, h, total)
            return t + 1, h, total

        init = (0, jnp.zeros((tokens.shape[1], W.shape[0]), W.dtype), jnp.zeros((), W.dtype))
        _, _, total = lax.while_loop(lambda s: s[0] < jnp.max(lengths), step, init)
        return total / jnp.sum(lengths).astype(W.dtype)
    return rnn_loss


def _jax_rnn_step(config, E, W, U, b, V, tokens, lengths, t, h, total):
    import jax.numpy as jnp
    from jax import nn

    h_next = jnp.tanh(E[tokens[t]] @ U + h @ W + b)
    live = t < lengths
    picked = jnp.sum(nn.one_hot(tokens[t + 1], config["vocab"], dtype=W.dtype) * nn.log_softmax(h_next @ V), axis=-1)
    return jnp.where(live[:, None], h_next, h), total - jnp.sum(jnp.where(live, picked, 0.0))


def jax_unrolled_loss(case):
    """The case's loss with Python loops unrolled to the maximum trip count (max_iters,
    max_steps, the token count): once the stop condition holds, a mask freezes the
    state, so the value and gradient equal the while loop's."""
    import jax.numpy as jnp
    from jax import nn

    config = _config(case)
    kind = config["kind"]
    if kind == "newton":
        def newton_loss(A, C, z, y):
            A, C, z, y = map(jnp.asarray, (A, C, z, y))
            e, M = 0.9 * nn.sigmoid(z @ A), z @ C
            E, err = M, jnp.mean(jnp.square(e * jnp.sin(M)))
            for _ in range(config["max_iters"]):
                going = err > config["tol"] ** 2
                E_next = E - (E - e * jnp.sin(E) - M) / (1 - e * jnp.cos(E))
                E = jnp.where(going, E_next, E)
                err = jnp.where(going, jnp.mean(jnp.square(E - e * jnp.sin(E) - M)), err)
            return jnp.mean(jnp.square(E - y))
        return newton_loss
    if kind == "euler":
        def euler_loss(W, U, b, V, x, y):
            W, U, b, V, x, y = map(jnp.asarray, (W, U, b, V, x, y))
            h = jnp.zeros((x.shape[0], W.shape[0]), W.dtype)
            for _ in range(config["max_steps"]):
                going = jnp.mean(h * h) < config["radius"] ** 2
                h = jnp.where(going, h + config["dt"] * jnp.tanh(h @ W + x @ U + b), h)
            return jnp.mean(jnp.square(h @ V - y))
        return euler_loss

    def rnn_loss(E, W, U, b, V, tokens, lengths):
        E, W, U, b, V = map(jnp.asarray, (E, W, U, b, V))
        tokens, lengths = jnp.asarray(tokens, jnp.int32), jnp.asarray(lengths, jnp.int32)
        h, total = jnp.zeros((tokens.shape[1], W.shape[0]), W.dtype), jnp.zeros((), W.dtype)
        for t in range(tokens.shape[0] - 1):  # past the longest sequence every row is masked
            h, total = _jax_rnn_step(config, E, W, U, b, V, tokens, lengths, t, h, total)
        return total / jnp.sum(lengths).astype(W.dtype)
    return rnn_loss


# --- PyTorch ------------------------------------------------------------------------------------


def torch_loss(case):
    """The case's loss in eager PyTorch: Python `while` loops whose conditions read the
    data with `.item()` (torch.compile breaks the graph there)."""
    import torch

    config = _config(case)
    kind = config["kind"]
    if kind == "newton":
        def newton_loss(A, C, z, y):
            A, C, z, y = map(torch.as_tensor, (A, C, z, y))
            e, M = 0.9 * torch.sigmoid(z @ A), z @ C
            k, E, err = 0, M, torch.mean(torch.square(e * torch.sin(M)))
            while k < config["max_iters"] and err.item() > config["tol"] ** 2:
                E = E - (E - e * torch.sin(E) - M) / (1 - e * torch.cos(E))
                k, err = k + 1, torch.mean(torch.square(E - e * torch.sin(E) - M))
            return torch.mean(torch.square(E - y))
        return newton_loss
    if kind == "euler":
        def euler_loss(W, U, b, V, x, y):
            W, U, b, V, x, y = map(torch.as_tensor, (W, U, b, V, x, y))
            k, h = 0, torch.zeros((x.shape[0], W.shape[0]), dtype=W.dtype)
            while k < config["max_steps"] and torch.mean(h * h).item() < config["radius"] ** 2:
                k, h = k + 1, h + config["dt"] * torch.tanh(h @ W + x @ U + b)
            return torch.mean(torch.square(h @ V - y))
        return euler_loss

    def rnn_loss(E, W, U, b, V, tokens, lengths):
        E, W, U, b, V = map(torch.as_tensor, (E, W, U, b, V))
        tokens, lengths = torch.as_tensor(tokens, dtype=torch.int64), torch.as_tensor(lengths, dtype=torch.int64)
        t, h, total = 0, torch.zeros((tokens.shape[1], W.shape[0]), dtype=W.dtype), torch.zeros((), dtype=W.dtype)
        longest = int(torch.max(lengths).item())
        while t < longest:
            h_next = torch.tanh(E[tokens[t]] @ U + h @ W + b)
            live = t < lengths
            logp = torch.log_softmax(h_next @ V, dim=-1)
            picked = torch.gather(logp, 1, tokens[t + 1][:, None])[:, 0]
            h = torch.where(live[:, None], h_next, h)
            total = total - torch.sum(torch.where(live, picked, torch.zeros((), dtype=W.dtype)))
            t += 1
        return total / torch.sum(lengths).to(W.dtype)
    return rnn_loss
