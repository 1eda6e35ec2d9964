"""GNMT-lite (benchmarks/gnmt_lite.py) in JAX and PyTorch, for the side-by-side suite:
the same topology, the same math step by step, written once against a small table
of array operations (`ops`) that each framework fills in.

The only thing that differs between the peers is how a time loop runs (`ops.scan`):
`jax.lax.scan` for JAX's structured form, a Python loop for JAX-unrolled (which
`jax.jit` traces into one straight-line graph) and for PyTorch (eager, or what
`torch.compile` traces).

    ops = jax_ops(structured=True)
    value = loss(ops, params, src, tgt)     # params: the dict of gnmt_lite.init_params
"""
from __future__ import annotations

import functools
import types


def python_scan(stack, step, carry, xs, reverse=False):
    """`lax.scan`'s contract with a Python loop: `carry, y = step(carry, x)` over the
    leading axis of xs; the ys (a value or a tuple of them) stacked in the order of xs."""
    length = xs.shape[0]
    ys = [None] * length
    for t in (reversed(range(length)) if reverse else range(length)):
        carry, ys[t] = step(carry, xs[t])
    if isinstance(ys[0], tuple):
        return carry, tuple(stack([y[k] for y in ys]) for k in range(len(ys[0])))
    return carry, stack(ys)


def jax_ops(structured: bool) -> types.SimpleNamespace:
    """The array operations in JAX; time loops are `lax.scan` when `structured`,
    Python loops otherwise."""
    import jax
    import jax.numpy as jnp

    def scan(step, carry, xs, reverse=False):
        return jax.lax.scan(step, carry, xs, reverse=reverse)

    return types.SimpleNamespace(
        sigmoid=jax.nn.sigmoid, tanh=jnp.tanh, sqrt=jnp.sqrt, mean=jnp.mean,
        sum=lambda x, axis=None: jnp.sum(x, axis=axis),
        concat=lambda xs, axis: jnp.concatenate(xs, axis=axis),
        zeros=lambda shape, like: jnp.zeros(shape, like.dtype),
        softmax=lambda x, axis: jax.nn.softmax(x, axis=axis),
        log_softmax=lambda x, axis: jax.nn.log_softmax(x, axis=axis),
        pick=lambda x, index: jnp.take_along_axis(x, index[..., None], axis=-1)[..., 0],
        scan=scan if structured else functools.partial(python_scan, jnp.stack))


def torch_ops() -> types.SimpleNamespace:
    """The array operations in PyTorch; time loops are Python loops."""
    import torch

    return types.SimpleNamespace(
        sigmoid=torch.sigmoid, tanh=torch.tanh, sqrt=torch.sqrt, mean=torch.mean,
        sum=lambda x, axis=None: torch.sum(x) if axis is None else torch.sum(x, dim=axis),
        concat=lambda xs, axis: torch.cat(xs, dim=axis),
        zeros=lambda shape, like: torch.zeros(shape, dtype=like.dtype),
        softmax=lambda x, axis: torch.softmax(x, dim=axis),
        log_softmax=lambda x, axis: torch.log_softmax(x, dim=axis),
        pick=lambda x, index: torch.gather(x, -1, index[..., None])[..., 0],
        scan=functools.partial(python_scan, torch.stack))


def _cell(ops, params, prefix, x, h, c):
    """benchmarks/lstm.py's cell: one fused gate matmul split by static slices."""
    hidden = h.shape[1]
    z = x @ params[f"{prefix}.Wx"] + h @ params[f"{prefix}.Wh"] + params[f"{prefix}.b"]
    i = ops.sigmoid(z[:, :hidden])
    f = ops.sigmoid(z[:, hidden:2 * hidden])
    g = ops.tanh(z[:, 2 * hidden:3 * hidden])
    o = ops.sigmoid(z[:, 3 * hidden:])
    c = f * c + i * g
    return o * ops.tanh(c), c


def _lstm_layer(ops, params, prefix, xs, reverse=False):
    zeros = ops.zeros((xs.shape[1], params[f"{prefix}.Wh"].shape[0]), xs)

    def step(hc, x):
        h, c = _cell(ops, params, prefix, x, *hc)
        return (h, c), h

    _, hs = ops.scan(step, (zeros, zeros), xs, reverse=reverse)
    return hs


def _attention_layer(ops, params, xs, encoded):
    W2, bias = params["attention.W2"], params["attention.b"]
    keys = encoded @ params["attention.W1"]  # loop-invariant, projected once
    v = params["attention.v"]
    v_normed = params["attention.g"] * v / ops.sqrt(ops.sum(v * v))
    zeros = ops.zeros((xs.shape[1], params["decoder.0.Wh"].shape[0]), xs)

    def step(hc, x):
        h, c = _cell(ops, params, "decoder.0", x, *hc)
        weights = ops.softmax(ops.tanh(keys + (h @ W2 + bias)) @ v_normed, axis=0)  # (S, B)
        context = ops.sum(weights[:, :, None] * encoded, axis=0)  # (B, H)
        return (h, c), (h, context)

    _, (hs, contexts) = ops.scan(step, (zeros, zeros), xs)
    return hs, contexts


def logits(ops, params, src, tgt, encoder_layers: int, decoder_layers: int):
    """Teacher-forced logits, time-major (T, B, vocab): gnmt_lite.logits."""
    xs = params["src_embed"][src.T]
    both = [_lstm_layer(ops, params, "encoder.0.forward", xs),
            _lstm_layer(ops, params, "encoder.0.backward", xs, reverse=True)]
    xs = _lstm_layer(ops, params, "encoder.1", ops.concat(both, axis=-1))
    for layer in range(2, encoder_layers):
        xs = _lstm_layer(ops, params, f"encoder.{layer}", xs) + xs
    encoded = xs

    target = tgt.T
    bos = target[:1] * 0  # a row of BOS = 0 tokens, of the tokens' own type in every framework
    xs = params["tgt_embed"][ops.concat([bos, target[:-1]], axis=0)]
    xs, contexts = _attention_layer(ops, params, xs, encoded)
    for layer in range(1, decoder_layers):
        out = _lstm_layer(ops, params, f"decoder.{layer}", ops.concat([xs, contexts], axis=-1))
        xs = out + xs if layer >= 2 else out
    return xs @ params["out_W"] + params["out_b"]


def loss(ops, params, src, tgt, encoder_layers: int, decoder_layers: int):
    """Mean softmax cross-entropy of the teacher-forced predictions: gnmt_lite.loss."""
    logp = ops.log_softmax(logits(ops, params, src, tgt, encoder_layers, decoder_layers), axis=-1)
    return -ops.mean(ops.pick(logp, tgt.T))
