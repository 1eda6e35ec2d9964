"""Corpus: small models — RNN, LSTM, GRU, token-level LM, attention decoder, MoE routing.

Each program is a traced `*_fn`, a plain-numpy `*_ref` with ordinary Python
control flow, and a `*_args` factory.
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

from . import CorpusProgram

F32_RTOL = 1e-5


def _normal(rng, shape, scale=1.0, dtype=np.float64):
    return (scale * rng.standard_normal(shape)).astype(dtype)


def _uniform(rng, low, high, shape=()):
    value = rng.uniform(low, high, shape)
    return np.asarray(value, np.float64) if shape else np.float64(value)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _log_softmax(x, axis=-1):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax(x, axis=-1):
    return np.exp(_log_softmax(x, axis))


def _logsumexp(x, axis):
    peak = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(peak, axis) + np.log(np.sum(np.exp(x - peak), axis=axis))


# --- tanh RNN (the DESIGN.md example) -----------------------------------------------------


def rnn_tanh_fn(W, U, xs, h0):
    """Elman RNN h = tanh(xs[t] @ U + h @ W) over time with fori_loop; squared-norm loss."""

    def step(t, h):
        return enp.tanh(xs[t] @ U + h @ W)

    h = egad.fori_loop(0, xs.shape[0], step, h0)
    return enp.sum(h * h)


def rnn_tanh_ref(W, U, xs, h0):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ U + h @ W)
    return np.sum(h * h)


def rnn_tanh_args(rng):
    return (
        _normal(rng, (4, 4), 0.5, np.float32),
        _normal(rng, (3, 4), 0.5, np.float32),
        _normal(rng, (7, 2, 3), 1.0, np.float32),
        _normal(rng, (2, 4), 0.5, np.float32),
    )


# --- tanh RNN with its weights packed in one matrix ------------------------------------------


def packed_rnn_fn(P, xs, h0):
    """The tanh RNN with both weights in one parameter, read as column slices: P = [U | unused | W].
    Its gradient adds each slice's product into some columns of a zero (H, 3H) matrix."""
    H = h0.shape[1]

    def step(t, h):
        return enp.tanh(xs[t] @ P[:, :H] + h @ P[:, 2 * H:])

    h = egad.fori_loop(0, xs.shape[0], step, h0)
    return enp.sum(h * h)


def packed_rnn_ref(P, xs, h0):
    H = h0.shape[1]
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ P[:, :H] + h @ P[:, 2 * H:])
    return np.sum(h * h)


def packed_rnn_args(rng):
    return (
        _normal(rng, (5, 15), 0.4, np.float32),
        _normal(rng, (4, 3, 5), 1.0, np.float32),
        _normal(rng, (3, 5), 0.5, np.float32),
    )


# --- LSTM over time with scan ---------------------------------------------------------------


def lstm_fn(xs, Wx, Wh, b, h0, c0):
    """LSTM cell in scan: one fused gate matmul split by static slices; hidden states as ys."""
    H = h0.shape[-1]

    def cell(carry, x):
        h, c = carry
        z = x @ Wx + h @ Wh + b
        i = enn.sigmoid(z[:, :H])
        f = enn.sigmoid(z[:, H : 2 * H])
        g = enp.tanh(z[:, 2 * H : 3 * H])
        o = enn.sigmoid(z[:, 3 * H :])
        c = f * c + i * g
        h = o * enp.tanh(c)
        return (h, c), h

    (h, c), hs = egad.scan(cell, (h0, c0), xs)
    return (h, c), enp.mean(hs * hs)


def lstm_ref(xs, Wx, Wh, b, h0, c0):
    H = h0.shape[-1]
    h, c, hs = h0, c0, []
    for x in xs:
        z = x @ Wx + h @ Wh + b
        i, f = _sigmoid(z[:, :H]), _sigmoid(z[:, H : 2 * H])
        g, o = np.tanh(z[:, 2 * H : 3 * H]), _sigmoid(z[:, 3 * H :])
        c = f * c + i * g
        h = o * np.tanh(c)
        hs.append(h)
    hs = np.stack(hs)
    return (h, c), np.mean(hs * hs)


def lstm_args(rng):
    B, I, H, T = 2, 3, 4, 6
    return (
        _normal(rng, (T, B, I)),
        _normal(rng, (I, 4 * H), 0.5),
        _normal(rng, (H, 4 * H), 0.5),
        _normal(rng, (4 * H,), 0.1),
        _normal(rng, (B, H), 0.5),
        _normal(rng, (B, H), 0.5),
    )


# --- GRU with einsum, pytree params, float32 -------------------------------------------------


def gru_f32_fn(xs, params, h0):
    """float32 GRU in scan over a dict of stacked weights; einsum, broadcast_to, transpose, reshape."""
    B, H = h0.shape
    T = xs.shape[0]
    W, U, b = params["W"], params["U"], params["b"]

    def cell(h, x):
        z = enn.sigmoid(
            enp.einsum("bi,ih->bh", x, W[0]) + enp.einsum("bk,kh->bh", h, U[0]) + enp.broadcast_to(b[0], (B, H))
        )
        r = enn.sigmoid(x @ W[1] + h @ U[1] + b[1])
        n = enp.tanh(x @ W[2] + (r * h) @ U[2] + b[2])
        h = (1.0 - z) * n + z * h
        return h, h

    h, hs = egad.scan(cell, h0, xs)
    per_batch = enp.reshape(enp.transpose(hs, (1, 0, 2)), (B, T * H))
    summary = enp.stack([enp.mean(per_batch, axis=1), enn.logsumexp(per_batch, axis=1)], axis=1)
    return h, summary


def gru_f32_ref(xs, params, h0):
    B, H = h0.shape
    T = xs.shape[0]
    W, U, b = params["W"], params["U"], params["b"]
    h, hs = h0, []
    for x in xs:
        z = _sigmoid(np.einsum("bi,ih->bh", x, W[0]) + np.einsum("bk,kh->bh", h, U[0]) + np.broadcast_to(b[0], (B, H)))
        r = _sigmoid(x @ W[1] + h @ U[1] + b[1])
        n = np.tanh(x @ W[2] + (r * h) @ U[2] + b[2])
        h = (1.0 - z) * n + z * h
        hs.append(h)
    per_batch = np.reshape(np.transpose(np.stack(hs), (1, 0, 2)), (B, T * H))
    summary = np.stack([np.mean(per_batch, axis=1), _logsumexp(per_batch, axis=1)], axis=1)
    return h, summary


def gru_f32_args(rng):
    B, I, H, T = 3, 2, 4, 5
    params = {
        "W": _normal(rng, (3, I, H), 0.5, np.float32),
        "U": _normal(rng, (3, H, H), 0.5, np.float32),
        "b": _normal(rng, (3, H), 0.1, np.float32),
    }
    return _normal(rng, (T, B, I), 1.0, np.float32), params, _normal(rng, (B, H), 0.5, np.float32)


# --- token-level language model: embedding gathers inside the loop -------------------------------


def embedding_lm_fn(tokens, E, W, Wo):
    """RNN LM: E[tokens[t]] gathers in fori_loop, next-token NLL via log_softmax and one_hot."""
    V = E.shape[0]
    T = tokens.shape[0]

    def step(t, state):
        h, nll = state
        h = enp.tanh(E[tokens[t]] + h @ W)
        logp = enn.log_softmax(h @ Wo)
        target = enn.one_hot(tokens[t + 1], V)
        return h, nll - enp.sum(target * logp)

    h, nll = egad.fori_loop(0, T - 1, step, (enp.zeros((E.shape[1],)), enp.zeros(())))
    return nll / (T - 1), h


def embedding_lm_ref(tokens, E, W, Wo):
    T = tokens.shape[0]
    h, nll = np.zeros((E.shape[1],)), np.zeros(())
    for t in range(T - 1):
        h = np.tanh(E[tokens[t]] + h @ W)
        nll = nll - _log_softmax(h @ Wo)[tokens[t + 1]]
    return nll / (T - 1), h


def embedding_lm_args(rng):
    V, D, T = 7, 4, 9
    return (
        rng.integers(0, V, size=T).astype(np.int64),
        _normal(rng, (V, D)),
        _normal(rng, (D, D), 0.5),
        _normal(rng, (D, V)),
    )


# --- greedy attention decoder -----------------------------------------------------------------


def attention_decoder_fn(enc, E, Wq, Wc, Wo, h0, start):
    """Greedy decoder in scan(None, length=6): attention over enc, softmax, context, argmax feedback."""
    S, H = enc.shape
    positions = enp.arange(S)

    def step(carry, _):
        h, token, t, logp = carry
        x = E[token]
        q = h @ Wq
        scores = enp.squeeze(enp.expand_dims(q, 0) @ enc.T, 0) / np.sqrt(H) - 0.1 * enp.abs(positions - t)
        attn = enn.softmax(scores)
        context = attn @ enc
        h = enp.tanh(enp.concatenate([x, context]) @ Wc)
        logits = h @ Wo
        token = enp.argmax(logits)
        logp = logp + enp.max(enn.log_softmax(logits))
        return (h, token, t + 1, logp), (token, attn)

    (h, _, _, logp), (tokens, attns) = egad.scan(step, (h0, start, 0, enp.zeros(())), None, length=6)
    return logp, tokens, attns, h


def attention_decoder_ref(enc, E, Wq, Wc, Wo, h0, start):
    S, H = enc.shape
    positions = np.arange(S)
    h, token, logp = h0, start, np.zeros(())
    tokens, attns = [], []
    for t in range(6):
        x = E[token]
        q = h @ Wq
        scores = (enc @ q) / np.sqrt(H) - 0.1 * np.abs(positions - t)
        attn = _softmax(scores)
        context = attn @ enc
        h = np.tanh(np.concatenate([x, context]) @ Wc)
        logits = h @ Wo
        token = np.argmax(logits)
        logp = logp + np.max(_log_softmax(logits))
        tokens.append(token)
        attns.append(attn)
    return logp, np.stack(tokens), np.stack(attns), h


def attention_decoder_args(rng):
    S, H, V = 5, 4, 6
    return (
        _normal(rng, (S, H)),
        _normal(rng, (V, H)),
        _normal(rng, (H, H)),
        _normal(rng, (2 * H, H), 0.5),
        _normal(rng, (H, V), 2.0),
        _normal(rng, (H,), 0.5),
        np.int64(rng.integers(0, V)),
    )


# --- RNN run by while_loop until a norm threshold -----------------------------------------------


def while_rnn_fn(xs, W, U, h0, thresh):
    """RNN in while_loop until ||h|| >= thresh or 25 steps; inputs cycle via xs[k % T]."""

    def cond(state):
        h, k = state
        return enp.logical_and(enp.sqrt(enp.sum(h * h)) < thresh, k < 25)

    def body(state):
        h, k = state
        return enp.tanh(xs[k % xs.shape[0]] @ U + h @ W), k + 1

    return egad.while_loop(cond, body, (h0, 0))


def while_rnn_ref(xs, W, U, h0, thresh):
    h, k = h0, 0
    while np.sqrt(np.sum(h * h)) < thresh and k < 25:
        h, k = np.tanh(xs[k % xs.shape[0]] @ U + h @ W), k + 1
    return h, k


def while_rnn_args(rng):
    return (
        _normal(rng, (5, 3)),
        _normal(rng, (4, 4), 0.8),
        _normal(rng, (3, 4), 0.8),
        _normal(rng, (4,), 0.1),
        _uniform(rng, 1.4, 1.9),
    )


# --- stacked RNN with a static number of layers ----------------------------------------------------


def stacked_rnn_fn(xs, Ws, Us, num_layers):
    """num_layers is static (Python for over layers); each layer is a scan feeding the next its ys."""
    seq = xs
    for layer in range(num_layers):
        W, U = Ws[layer], Us[layer]

        def step(h, x):
            h = enp.tanh(x @ U + h @ W)
            return h, h

        _, seq = egad.scan(step, enp.zeros((W.shape[0],)), seq)
    return enp.sum(enn.relu(seq[-1])), seq


def stacked_rnn_ref(xs, Ws, Us, num_layers):
    seq = xs
    for layer in range(num_layers):
        h, outputs = np.zeros((Ws.shape[1],)), []
        for x in seq:
            h = np.tanh(x @ Us[layer] + h @ Ws[layer])
            outputs.append(h)
        seq = np.stack(outputs)
    return np.sum(np.maximum(seq[-1], 0.0)), seq


def stacked_rnn_args(rng):
    D = 4
    return (
        _normal(rng, (6, D)),
        _normal(rng, (3, D, D), 0.5),
        _normal(rng, (3, D, D), 0.5),
        int(rng.integers(1, 4)),
    )


# --- mixture-of-experts routing with top_k inside scan -----------------------------------------


def moe_topk_fn(xs, Wr, We):
    """Per token: top_k(2) experts, softmax gates over their logits, einsum expert maps, one_hot load."""
    num_experts = Wr.shape[1]

    def step(load, x):
        logits = x @ Wr
        _, idx = enn.top_k(egad.stop_gradient(logits), 2)
        gates = enn.softmax(enp.stack([logits[idx[0]], logits[idx[1]]]))
        expert_out = enp.stack(
            [enp.einsum("i,ij->j", x, We[idx[0]]), enp.einsum("i,ij->j", x, enp.take(We, idx[1], axis=0))]
        )
        y = enp.einsum("k,kj->j", gates, expert_out)
        return load + enp.sum(enn.one_hot(idx, num_experts), axis=0), y

    load, ys = egad.scan(step, enp.zeros((num_experts,)), xs)
    return ys, load


def moe_topk_ref(xs, Wr, We):
    num_experts = Wr.shape[1]
    load, ys = np.zeros((num_experts,)), []
    for x in xs:
        logits = x @ Wr
        idx = np.argsort(-logits)[:2]
        gates = _softmax(logits[idx])
        expert_out = np.stack([x @ We[idx[0]], x @ We[idx[1]]])
        ys.append(gates @ expert_out)
        load = load + np.sum(np.eye(num_experts)[idx], axis=0)
    return np.stack(ys), load


def moe_topk_args(rng):
    return _normal(rng, (6, 4)), _normal(rng, (4, 5)), _normal(rng, (5, 4, 3), 0.5)



# --- per-gate weight gradients: contractions of column blocks of one stacked gradient -----


def gate_blocks_fn(xs, dzs):
    """Each gate's weight gradient from the rows of all steps: one contraction per
    column block of the stacked gate gradients (what batching leaves after an LSTM's
    reverse loop); `fuse-einsums-of-slices` makes them one contraction, sliced."""
    H = dzs.shape[2] // 4
    return tuple(enp.einsum("tbi,tbj->ij", xs, dzs[:, :, k * H:(k + 1) * H]) for k in range(4))


def gate_blocks_ref(xs, dzs):
    H = dzs.shape[2] // 4
    return tuple(np.einsum("tbi,tbj->ij", xs, dzs[:, :, k * H:(k + 1) * H]) for k in range(4))


def gate_blocks_args(rng):
    return _normal(rng, (5, 2, 3)), _normal(rng, (5, 2, 16))

PROGRAMS = [
    CorpusProgram("rnn_tanh", rnn_tanh_fn, rnn_tanh_ref, rnn_tanh_args,
                  differentiable_argnums=(0, 1, 2, 3), rtol=F32_RTOL, tags=("rnn", "fori", "float32", "matmul")),
    CorpusProgram("packed_rnn", packed_rnn_fn, packed_rnn_ref, packed_rnn_args,
                  differentiable_argnums=(0, 1, 2), rtol=F32_RTOL,
                  tags=("rnn", "fori", "float32", "matmul", "static-slice", "packed-weights")),
    CorpusProgram("lstm", lstm_fn, lstm_ref, lstm_args,
                  differentiable_argnums=(0, 1, 2, 3, 4, 5),
                  tags=("lstm", "scan", "ys", "static-slice", "sigmoid", "pytree-state", "mean")),
    CorpusProgram("gru_f32", gru_f32_fn, gru_f32_ref, gru_f32_args,
                  differentiable_argnums=(0, 1, 2), rtol=F32_RTOL,
                  tags=("gru", "scan", "float32", "einsum", "broadcast_to", "transpose", "reshape", "stack",
                        "logsumexp", "pytree-arg")),
    CorpusProgram("embedding_lm", embedding_lm_fn, embedding_lm_ref, embedding_lm_args,
                  differentiable_argnums=(1, 2, 3),
                  tags=("token-gather", "rnn", "fori", "log_softmax", "one_hot")),
    CorpusProgram("attention_decoder", attention_decoder_fn, attention_decoder_ref, attention_decoder_args,
                  differentiable_argnums=(0, 1, 2, 3, 4, 5),
                  tags=("attention", "decoder", "token-gather", "argmax", "softmax", "concatenate", "scan",
                        "no-xs", "arange", "expand_dims", "squeeze", "int-counter", "int-ys")),
    CorpusProgram("while_rnn", while_rnn_fn, while_rnn_ref, while_rnn_args,
                  differentiable_argnums=(0, 1, 2, 3),
                  tags=("while-rnn", "while", "data-dependent-trips", "rnn", "floordiv-mod", "int-counter")),
    CorpusProgram("stacked_rnn", stacked_rnn_fn, stacked_rnn_ref, stacked_rnn_args, static_argnums=(3,),
                  differentiable_argnums=(0, 1, 2), tags=("static-argnums", "scan", "ys", "rnn", "relu")),
    CorpusProgram("gate_blocks", gate_blocks_fn, gate_blocks_ref, gate_blocks_args,
                  differentiable_argnums=(0, 1), tags=("einsum", "static-slice", "pytree-output")),
    CorpusProgram("moe_topk", moe_topk_fn, moe_topk_ref, moe_topk_args,
                  differentiable_argnums=(0, 1, 2),
                  tags=("moe", "top_k", "one_hot", "einsum", "stack", "take", "softmax", "stop-gradient", "scan")),
]
