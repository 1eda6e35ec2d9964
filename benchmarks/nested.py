"""The `nested` workload (issue 6): a layer loop inside a time loop, with a branch
on data inside the layer loop — a deep-transition RNN whose layers clip their
pre-activations by norm only when it exceeds a threshold.

    for t in range(T):                       # time loop (egad.fori_loop)
        z = h + x_t Wx
        for l in range(L):                   # layer loop (egad.fori_loop over Ws)
            a = z Ws[l] + bs[l]
            if mean(a^2) > clip^2:           # egad.cond on a data predicate
                z = z + tanh(a * clip / sqrt(mean(a^2)))
            else:
                z = z + tanh(a)
        h = tanh(z)
        loss += mean((h Wo - y_t)^2)
    loss /= T

With the default sizes the clipping branch is taken in about 60% of the (t, l)
pairs, so neither branch is dead. The loop bounds come from the arrays' shapes
(T from xs, L from Ws), the branch predicate from the data.

Module convention: see benchmarks/while_loops.py (CASES, arguments, WRT, loss,
reference_loss, jax_loss with lax.fori_loop + lax.cond, jax_unrolled_loss with
Python loops around the same lax.cond, torch_loss with a Python `if` on `.item()`).

    args = arguments("deep_transition")
    program = egad.trace(loss("deep_transition"), *args)
"""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp

from .workload import case_config

NAME = "nested"

CASES = {"deep_transition": {"kind": "deep_transition", "steps": 16, "layers": 4, "batch": 16, "inputs": 32,
                             "hidden": 64, "outputs": 8, "clip": 1.5}}

PARAMS = ("Wx", "Ws", "bs", "Wo")
# arguments: the parameters, then xs (T, B, I) and ys (T, B, O)
WRT = {"deep_transition": tuple(range(len(PARAMS)))}


def _config(case) -> dict:
    return case_config(NAME, CASES, case)


def wrt(case) -> tuple:
    """The differentiated argument positions (every parameter)."""
    return WRT[_config(case)["kind"]]


def arguments(case, seed: int = 0) -> tuple:
    """(Wx, Ws, bs, Wo, xs, ys), float32."""
    config = _config(case)
    T, L, B, I, H, O = (config[k] for k in ("steps", "layers", "batch", "inputs", "hidden", "outputs"))
    rng = np.random.default_rng(seed)

    def normal(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return (normal((I, H), I ** -0.5), normal((L, H, H), H ** -0.5), normal((L, H), 0.1), normal((H, O), H ** -0.5),
            normal((T, B, I)), normal((T, B, O)))


# --- egad -------------------------------------------------------------------------------------


def loss(case):
    """The case's loss with egad.fori_loop (time), egad.fori_loop (layers), egad.cond."""
    clip = _config(case)["clip"]

    def nested_loss(Wx, Ws, bs, Wo, xs, ys):
        def clipped(z, a, ms):
            return z + enp.tanh(a * (clip / enp.sqrt(ms)))

        def plain(z, a, ms):
            return z + enp.tanh(a)

        def layer(l, z):
            a = z @ Ws[l] + bs[l]
            ms = enp.mean(a * a)
            return egad.cond(ms > clip * clip, clipped, plain, z, a, ms)

        def step(t, carry):
            h, total = carry
            h = enp.tanh(egad.fori_loop(0, Ws.shape[0], layer, h + xs[t] @ Wx))
            return h, total + enp.mean(enp.square(h @ Wo - ys[t]))

        h0 = enp.zeros((xs.shape[1], Wx.shape[1]), Wx.dtype)
        _, total = egad.fori_loop(0, xs.shape[0], step, (h0, enp.zeros((), Wx.dtype)))
        return total / xs.shape[0]

    return nested_loss


# --- plain numpy -------------------------------------------------------------------------------


def reference_loss(case):
    """The case's loss in plain numpy, with Python loops and `if`."""
    clip = _config(case)["clip"]

    def nested_loss(Wx, Ws, bs, Wo, xs, ys):
        h, total = np.zeros((xs.shape[1], Wx.shape[1]), Wx.dtype), np.float32(0)
        for x, y in zip(xs, ys):
            z = h + x @ Wx
            for W, b in zip(Ws, bs):
                a = z @ W + b
                ms = np.mean(a * a)
                z = z + np.tanh(a * (clip / np.sqrt(ms)) if ms > clip * clip else a)
            h = np.tanh(z)
            total = total + np.mean(np.square(h @ Wo - y))
        return total / np.float32(xs.shape[0])

    return nested_loss


def branch_counts(case, *args) -> tuple[int, int]:
    """(clipped, plain): how often each branch runs for these arguments (numpy)."""
    clip = _config(case)["clip"]
    Wx, Ws, bs, _, xs, _ = args
    h, counts = np.zeros((xs.shape[1], Wx.shape[1]), Wx.dtype), [0, 0]
    for x in xs:
        z = h + x @ Wx
        for W, b in zip(Ws, bs):
            a = z @ W + b
            ms = np.mean(a * a)
            counts[0 if ms > clip * clip else 1] += 1
            z = z + np.tanh(a * (clip / np.sqrt(ms)) if ms > clip * clip else a)
        h = np.tanh(z)
    return counts[0], counts[1]


# --- JAX ---------------------------------------------------------------------------------------


def _jax_layer(clip, Ws, bs, l, z):
    import jax.numpy as jnp
    from jax import lax

    a = z @ Ws[l] + bs[l]
    ms = jnp.mean(a * a)
    return lax.cond(ms > clip * clip, lambda z, a, ms: z + jnp.tanh(a * (clip / jnp.sqrt(ms))),
                    lambda z, a, ms: z + jnp.tanh(a), z, a, ms)


def jax_loss(case):
    """The case's loss with `lax.fori_loop` (time), `lax.fori_loop` (layers), `lax.cond`."""
    import jax.numpy as jnp
    from jax import lax

    clip = _config(case)["clip"]

    def nested_loss(Wx, Ws, bs, Wo, xs, ys):
        Wx, Ws, bs, Wo, xs, ys = map(jnp.asarray, (Wx, Ws, bs, Wo, xs, ys))
        def step(t, carry):
            h, total = carry
            z = lax.fori_loop(0, Ws.shape[0], lambda l, z: _jax_layer(clip, Ws, bs, l, z), h + xs[t] @ Wx)
            h = jnp.tanh(z)
            return h, total + jnp.mean(jnp.square(h @ Wo - ys[t]))

        init = (jnp.zeros((xs.shape[1], Wx.shape[1]), Wx.dtype), jnp.zeros((), Wx.dtype))
        _, total = lax.fori_loop(0, xs.shape[0], step, init)
        return total / xs.shape[0]

    return nested_loss


def jax_unrolled_loss(case):
    """The case's loss with both loops unrolled in Python; the branch stays a
    `lax.cond` (a Python `if` on a traced value cannot be jitted)."""
    import jax.numpy as jnp

    clip = _config(case)["clip"]

    def nested_loss(Wx, Ws, bs, Wo, xs, ys):
        Wx, Ws, bs, Wo, xs, ys = map(jnp.asarray, (Wx, Ws, bs, Wo, xs, ys))
        h, total = jnp.zeros((xs.shape[1], Wx.shape[1]), Wx.dtype), jnp.zeros((), Wx.dtype)
        for t in range(xs.shape[0]):
            z = h + xs[t] @ Wx
            for l in range(Ws.shape[0]):
                z = _jax_layer(clip, Ws, bs, l, z)
            h = jnp.tanh(z)
            total = total + jnp.mean(jnp.square(h @ Wo - ys[t]))
        return total / xs.shape[0]

    return nested_loss


# --- PyTorch ----------------------------------------------------------------------------------------


def torch_loss(case):
    """The case's loss in eager PyTorch: Python loops and a Python `if` on `.item()`
    (torch.compile breaks the graph at every branch)."""
    import torch

    clip = _config(case)["clip"]

    def nested_loss(Wx, Ws, bs, Wo, xs, ys):
        Wx, Ws, bs, Wo, xs, ys = map(torch.as_tensor, (Wx, Ws, bs, Wo, xs, ys))
        h, total = torch.zeros((xs.shape[1], Wx.shape[1]), dtype=Wx.dtype), torch.zeros((), dtype=Wx.dtype)
        for t in range(xs.shape[0]):
            z = h + xs[t] @ Wx
            for l in range(Ws.shape[0]):
                a = z @ Ws[l] + bs[l]
                ms = torch.mean(a * a)
                z = z + torch.tanh(a * (clip / torch.sqrt(ms)) if ms.item() > clip * clip else a)
            h = torch.tanh(z)
            total = total + torch.mean(torch.square(h @ Wo - ys[t]))
        return total / xs.shape[0]

    return nested_loss
