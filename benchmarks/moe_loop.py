"""The `moe_loop` workload (issue 6): a recurrent model whose every step routes each
token to its own top-1 expert among 4 (as Switch-Transformer MoE layers do, not one
expert per batch), inside a 32-step loop, with the loss over all steps.

One step, for a batch of B tokens (time-major xs: (T, B, I)):

    u       = tanh(x_t Wx + h Wh)                        (B, D)
    probs   = softmax(u Wr)                              (B, E) router
    choice  = one_hot(argmax(u Wr))                      (B, E) each token's expert
    gate    = sum(choice * probs)                        (B,)   its router probability
    routed  = the chosen expert's tanh(u We[e] + be[e])  (B, D)
    h       = u + gate * routed                          residual
    loss   += mean((h Wo - y_t)^2) + 0.01 * E * sum_e(mean(choice)_e * mean(probs)_e)

(the last term is Switch Transformer's load-balancing loss). The gradient reaches
the router through `gate`; argmax and one_hot are piecewise constant.

Two cases, two ways of computing `routed` that real MoE layers use:
- `dense`: every expert on every token, one einsum (B, E, D), then the one-hot picks
  each token's row (E times the flops, no gather; the TPU/GShard formulation);
- `gather`: each token's expert weights gathered, We[choice] (B, D, D), and one
  batched matrix-vector product (1x flops, B*D*D bytes moved per step).

Module convention: see benchmarks/while_loops.py (CASES, arguments, WRT, loss,
reference_loss, jax_loss with lax.fori_loop, jax_unrolled_loss, torch_loss).

    args = arguments("dense")
    program = egad.trace(loss("dense"), *args)
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

from .workload import case_config

NAME = "moe_loop"

_SIZES = {"steps": 32, "batch": 32, "inputs": 32, "hidden": 64, "experts": 4, "outputs": 16, "balance": 0.01}
CASES = {"dense": {"kind": "dense", **_SIZES}, "gather": {"kind": "gather", **_SIZES}}

PARAMS = ("Wx", "Wh", "Wr", "We", "be", "Wo")
# arguments: the parameters, then xs (T, B, I) and ys (T, B, O)
WRT = {case: tuple(range(len(PARAMS))) for case in CASES}


def _config(case) -> dict:
    return case_config(NAME, CASES, case)


def wrt(case) -> tuple:
    """The differentiated argument positions (every parameter)."""
    return WRT[_config(case)["kind"]]


def arguments(case, seed: int = 0) -> tuple:
    """(Wx, Wh, Wr, We, be, Wo, xs, ys), float32."""
    config = _config(case)
    T, B, I, D, E, O = (config[k] for k in ("steps", "batch", "inputs", "hidden", "experts", "outputs"))
    rng = np.random.default_rng(seed)

    def normal(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # the router at a larger scale, so that its argmaxes are clear-cut and all 4 experts get tokens
    return (normal((I, D), I ** -0.5), normal((D, D), D ** -0.5), normal((D, E), 2 * D ** -0.5),
            normal((E, D, D), D ** -0.5), normal((E, D), 0.1), normal((D, O), D ** -0.5),
            normal((T, B, I)), normal((T, B, O)))


# --- egad -----------------------------------------------------------------------------------


def loss(case):
    """The case's loss written with egad ops and `egad.fori_loop`."""
    config = _config(case)
    experts, balance, gather = config["experts"], config["balance"], config["kind"] == "gather"

    def moe_loss(Wx, Wh, Wr, We, be, Wo, xs, ys):
        def step(t, carry):
            h, total = carry
            u = enp.tanh(xs[t] @ Wx + h @ Wh)
            logits = u @ Wr
            probs = enn.softmax(logits)
            expert = enp.argmax(logits, axis=-1)
            choice = enn.one_hot(expert, experts, dtype=u.dtype)
            gate = enp.sum(choice * probs, axis=-1)
            if gather:
                routed = enp.tanh(enp.einsum("bd,bdf->bf", u, enp.take(We, expert, axis=0))
                                  + enp.take(be, expert, axis=0))
            else:
                every = enp.tanh(enp.einsum("bd,edf->bef", u, We) + be)  # (B, E, D)
                routed = enp.sum(choice[:, :, None] * every, axis=1)
            h = u + gate[:, None] * routed
            task = enp.mean(enp.square(h @ Wo - ys[t]))
            spread = experts * enp.sum(enp.mean(choice, axis=0) * enp.mean(probs, axis=0))
            return h, total + task + balance * spread

        h0 = enp.zeros((xs.shape[1], Wh.shape[0]), Wh.dtype)
        _, total = egad.fori_loop(0, xs.shape[0], step, (h0, enp.zeros((), Wh.dtype)))
        return total / xs.shape[0]

    return moe_loss


# --- plain numpy -----------------------------------------------------------------------------


def reference_loss(case):
    """The case's loss in plain numpy (routing by integer indexing)."""
    config = _config(case)
    experts, balance = config["experts"], config["balance"]

    def moe_loss(Wx, Wh, Wr, We, be, Wo, xs, ys):
        h, total = np.zeros((xs.shape[1], Wh.shape[0]), Wh.dtype), np.float32(0)
        for x, y in zip(xs, ys):
            u = np.tanh(x @ Wx + h @ Wh)
            logits = u @ Wr
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            expert = np.argmax(logits, axis=-1)
            gate = probs[np.arange(len(expert)), expert]
            routed = np.tanh(np.einsum("bd,bdf->bf", u, We[expert]) + be[expert])
            h = u + gate[:, None] * routed
            fraction = np.bincount(expert, minlength=experts).astype(np.float32) / len(expert)
            total = total + np.mean(np.square(h @ Wo - y)) + balance * experts * np.sum(fraction * probs.mean(0))
        return total / np.float32(xs.shape[0])

    return moe_loss


# --- JAX --------------------------------------------------------------------------------------


def _jax_step(config, params, x, y, h, total):
    import jax.numpy as jnp
    from jax import nn

    Wx, Wh, Wr, We, be, Wo = params
    experts = config["experts"]
    u = jnp.tanh(x @ Wx + h @ Wh)
    logits = u @ Wr
    probs = nn.softmax(logits)
    expert = jnp.argmax(logits, axis=-1)
    choice = nn.one_hot(expert, experts, dtype=u.dtype)
    gate = jnp.sum(choice * probs, axis=-1)
    if config["kind"] == "gather":
        routed = jnp.tanh(jnp.einsum("bd,bdf->bf", u, We[expert]) + be[expert])
    else:
        routed = jnp.sum(choice[:, :, None] * jnp.tanh(jnp.einsum("bd,edf->bef", u, We) + be), axis=1)
    h = u + gate[:, None] * routed
    spread = experts * jnp.sum(jnp.mean(choice, axis=0) * jnp.mean(probs, axis=0))
    return h, total + jnp.mean(jnp.square(h @ Wo - y)) + config["balance"] * spread


def jax_loss(case):
    """The case's loss with `lax.fori_loop` over the steps (static bounds: a scan)."""
    import jax.numpy as jnp
    from jax import lax

    config = _config(case)

    def moe_loss(Wx, Wh, Wr, We, be, Wo, xs, ys):
        Wx, Wh, Wr, We, be, Wo, xs, ys = map(jnp.asarray, (Wx, Wh, Wr, We, be, Wo, xs, ys))
        params = (Wx, Wh, Wr, We, be, Wo)

        def step(t, carry):
            return _jax_step(config, params, xs[t], ys[t], *carry)

        init = (jnp.zeros((xs.shape[1], Wh.shape[0]), Wh.dtype), jnp.zeros((), Wh.dtype))
        _, total = lax.fori_loop(0, xs.shape[0], step, init)
        return total / xs.shape[0]

    return moe_loss


def jax_unrolled_loss(case):
    """The case's loss with the step loop unrolled in Python."""
    import jax.numpy as jnp

    config = _config(case)

    def moe_loss(Wx, Wh, Wr, We, be, Wo, xs, ys):
        Wx, Wh, Wr, We, be, Wo, xs, ys = map(jnp.asarray, (Wx, Wh, Wr, We, be, Wo, xs, ys))
        params = (Wx, Wh, Wr, We, be, Wo)
        h, total = jnp.zeros((xs.shape[1], Wh.shape[0]), Wh.dtype), jnp.zeros((), Wh.dtype)
        for t in range(xs.shape[0]):
            h, total = _jax_step(config, params, xs[t], ys[t], h, total)
        return total / xs.shape[0]

    return moe_loss


# --- PyTorch ------------------------------------------------------------------------------------


def torch_loss(case):
    """The case's loss in eager PyTorch (one Python loop iteration per step)."""
    import torch

    config = _config(case)
    experts, balance, gather = config["experts"], config["balance"], config["kind"] == "gather"

    def moe_loss(Wx, Wh, Wr, We, be, Wo, xs, ys):
        Wx, Wh, Wr, We, be, Wo, xs, ys = map(torch.as_tensor, (Wx, Wh, Wr, We, be, Wo, xs, ys))
        h, total = torch.zeros((xs.shape[1], Wh.shape[0]), dtype=Wh.dtype), torch.zeros((), dtype=Wh.dtype)
        for t in range(xs.shape[0]):
            u = torch.tanh(xs[t] @ Wx + h @ Wh)
            logits = u @ Wr
            probs = torch.softmax(logits, dim=-1)
            expert = torch.argmax(logits, dim=-1)
            choice = torch.nn.functional.one_hot(expert, experts).to(u.dtype)
            gate = torch.sum(choice * probs, dim=-1)
            if gather:
                routed = torch.tanh(torch.einsum("bd,bdf->bf", u, We[expert]) + be[expert])
            else:
                routed = torch.sum(choice[:, :, None] * torch.tanh(torch.einsum("bd,edf->bef", u, We) + be), dim=1)
            h = u + gate[:, None] * routed
            spread = experts * torch.sum(torch.mean(choice, dim=0) * torch.mean(probs, dim=0))
            total = total + torch.mean(torch.square(h @ Wo - ys[t])) + balance * spread
        return total / xs.shape[0]

    return moe_loss
