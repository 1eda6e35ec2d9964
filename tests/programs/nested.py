"""Corpus: nesting — loops in loops in loops, ragged inner trip counts, loops/branches mixed.

Each program is a traced `*_fn`, a plain-numpy `*_ref` with ordinary Python
control flow, and a `*_args` factory.
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

from . import CorpusProgram


def _normal(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float64)


def _uniform(rng, low, high, shape=()):
    value = rng.uniform(low, high, shape)
    return np.asarray(value, np.float64) if shape else np.float64(value)


def _clamp(index, num_branches):
    return min(max(int(index), 0), num_branches - 1)


# --- three static fori_loops ------------------------------------------------------------


def fori3_static_fn(A, x):
    """fori in fori in fori; the innermost body reads A[i][j][k] and both outer counters."""

    def outer(i, s):
        def middle(j, s):
            def inner(k, s):
                return enp.tanh(s * 0.9 + A[i][j][k] * x[k] + 0.01 * (i - j))

            return egad.fori_loop(0, A.shape[2], inner, s)

        return egad.fori_loop(0, A.shape[1], middle, s)

    return egad.fori_loop(0, A.shape[0], outer, enp.zeros_like(x[0]))


def fori3_static_ref(A, x):
    s = np.zeros_like(x[0])
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            for k in range(A.shape[2]):
                s = np.tanh(s * 0.9 + A[i][j][k] * x[k] + 0.01 * (i - j))
    return s


def fori3_static_args(rng):
    return _normal(rng, (3, 3, 4)), _normal(rng, (4,))


# --- three fori_loops with traced, ragged bounds ---------------------------------------------


def nest3_ragged_fn(n, lengths, xs, w):
    """Traced bounds at every level: n, then lengths[i] (data), then j + 1 (outer counter)."""

    def outer(i, state):
        def middle(j, state):
            def inner(k, state):
                s, steps = state
                return s * w + xs[(i + j + k) % xs.shape[0]], steps + 1

            return egad.fori_loop(0, j + 1, inner, state)

        return egad.fori_loop(0, lengths[i], middle, state)

    s, steps = egad.fori_loop(0, n, outer, (enp.zeros_like(w), 0))
    return enp.tanh(s), steps


def nest3_ragged_ref(n, lengths, xs, w):
    s, steps = np.zeros_like(w), 0
    for i in range(int(n)):
        for j in range(int(lengths[i])):
            for k in range(j + 1):
                s, steps = s * w + xs[(i + j + k) % xs.shape[0]], steps + 1
    return np.tanh(s), steps


def nest3_ragged_args(rng):
    lengths = rng.integers(0, 4, size=4).astype(np.int64)
    return np.int64(rng.integers(1, 5)), lengths, _normal(rng, (5, 3)), _uniform(rng, 0.3, 0.9, (3,))


# --- inner fori_loop over a per-sequence length inside scan -----------------------------------


def ragged_scan_fn(seqs, lengths, W, U):
    """scan over a batch of padded sequences; inner RNN runs fori_loop(0, lengths[b]) (some zero)."""

    def per_sequence(total, inp):
        seq, length = inp

        def step(t, h):
            return enp.tanh(seq[t] @ U + h @ W)

        h = egad.fori_loop(0, length, step, enp.zeros((W.shape[0],)))
        return total + length, h

    return egad.scan(per_sequence, lengths[0] * 0, (seqs, lengths))


def ragged_scan_ref(seqs, lengths, W, U):
    total, finals = lengths[0] * 0, []
    for seq, length in zip(seqs, lengths):
        h = np.zeros((W.shape[0],))
        for t in range(int(length)):
            h = np.tanh(seq[t] @ U + h @ W)
        total = total + length
        finals.append(h)
    return total, np.stack(finals)


def ragged_scan_args(rng):
    lengths = rng.integers(0, 7, size=4).astype(np.int64)
    lengths[1] = 0  # always one empty sequence
    return _normal(rng, (4, 6, 3)), lengths, _normal(rng, (4, 4), scale=0.5), _normal(rng, (3, 4))


# --- inner while_loop whose trip count depends on the outer state -----------------------------------


def while_in_fori_fn(xs, growth):
    """Each outer step grows v, then an inner while_loop halves it until sum(v) <= 1."""

    def outer(t, state):
        v, total = state
        v = v * growth + enp.abs(xs[t])

        def too_big(inner_state):
            u, k = inner_state
            return enp.logical_and(enp.sum(u) > 1.0, k < 10)

        v, k = egad.while_loop(too_big, lambda st: (st[0] * 0.5, st[1] + 1), (v, 0))
        return v, total + k

    return egad.fori_loop(0, xs.shape[0], outer, (enp.zeros_like(xs[0]), 0))


def while_in_fori_ref(xs, growth):
    v, total = np.zeros_like(xs[0]), 0
    for t in range(xs.shape[0]):
        v = v * growth + np.abs(xs[t])
        k = 0
        while np.sum(v) > 1.0 and k < 10:
            v, k = v * 0.5, k + 1
        total = total + k
    return v, total


def while_in_fori_args(rng):
    return _normal(rng, (8, 3)), _uniform(rng, 0.8, 1.6)


# --- loop / branch / loop ------------------------------------------------------------------


def loop_cond_loop_fn(X, lengths, W):
    """fori -> cond on lengths[t] % 2 -> (ragged fori | while capped by lengths[t] + 2)."""

    def outer(t, h):
        x = X[t]

        def even(h):
            return egad.fori_loop(0, lengths[t], lambda k, h: enp.tanh(h @ W + x * 0.5), h)

        def odd(h):
            def large(state):
                return enp.logical_and(enp.max(enp.abs(state[0])) > 0.3, state[1] < lengths[t] + 2)

            h, _ = egad.while_loop(large, lambda state: (state[0] * 0.6 + 0.05 * x, state[1] + 1), (h, 0))
            return h

        return egad.cond(lengths[t] % 2 == 0, even, odd, h)

    return egad.fori_loop(0, X.shape[0], outer, enp.ones_like(X[0]))


def loop_cond_loop_ref(X, lengths, W):
    h = np.ones_like(X[0])
    for t in range(X.shape[0]):
        x = X[t]
        if lengths[t] % 2 == 0:
            for _ in range(int(lengths[t])):
                h = np.tanh(h @ W + x * 0.5)
        else:
            k = 0
            while np.max(np.abs(h)) > 0.3 and k < lengths[t] + 2:
                h, k = h * 0.6 + 0.05 * x, k + 1
    return h


def loop_cond_loop_args(rng):
    return _normal(rng, (6, 3)), rng.integers(0, 6, size=6).astype(np.int64), _normal(rng, (3, 3), scale=0.6)


# --- scan inside fori: SGD epochs ------------------------------------------------------------


def sgd_epochs_fn(X, y, w0, lr):
    """fori over epochs, scan over samples (per-sample losses as ys); lr decays with the epoch counter."""

    def epoch(e, state):
        w, _ = state
        step_size = lr / (1 + e)

        def sample(w, xy):
            x, target = xy
            err = x @ w - target
            return w - step_size * err * x, err * err

        return egad.scan(sample, w, (X, y))

    return egad.fori_loop(0, 3, epoch, (w0, enp.zeros_like(y)))


def sgd_epochs_ref(X, y, w0, lr):
    w, losses = w0, np.zeros_like(y)
    for e in range(3):
        step_size = lr / (1 + e)
        per_sample = []
        for x, target in zip(X, y):
            err = x @ w - target
            w = w - step_size * err * x
            per_sample.append(err * err)
        losses = np.stack(per_sample)
    return w, losses


def sgd_epochs_args(rng):
    X = _normal(rng, (8, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + _normal(rng, (8,), scale=0.1)
    return X, y, _normal(rng, (3,)), _uniform(rng, 0.02, 0.08)


# --- while -> switch -> fori ---------------------------------------------------------------------


def while_switch_fori_fn(modes, x, W, budget):
    """while (until a budget is spent) -> switch on a mode -> fori with a traced bound."""

    def cond(state):
        r, spent, h = state
        return enp.logical_and(spent < budget, r < 12)

    def body(state):
        r, spent, h = state
        mode = modes[r % modes.shape[0]]
        branches = [
            lambda h: egad.fori_loop(0, 1, lambda k, h: enp.tanh(h @ W), h),
            lambda h: egad.fori_loop(0, mode + r % 2, lambda k, h: enp.tanh(h @ W + 0.1 * k), h),
            lambda h: egad.fori_loop(0, 3, lambda k, h: h * 0.9 + x, h),
        ]
        return r + 1, spent + mode + 1, egad.switch(mode, branches, h)

    return egad.while_loop(cond, body, (0, modes[0] * 0, x))


def while_switch_fori_ref(modes, x, W, budget):
    r, spent, h = 0, modes[0] * 0, x
    while spent < budget and r < 12:
        mode = modes[r % modes.shape[0]]
        branch = _clamp(mode, 3)
        if branch == 0:
            h = np.tanh(h @ W)
        elif branch == 1:
            for k in range(int(mode + r % 2)):
                h = np.tanh(h @ W + 0.1 * k)
        else:
            for _ in range(3):
                h = h * 0.9 + x
        r, spent = r + 1, spent + mode + 1
    return r, spent, h


def while_switch_fori_args(rng):
    modes = rng.integers(0, 3, size=5).astype(np.int64)
    return modes, _normal(rng, (3,)), _normal(rng, (3, 3), scale=0.6), np.int64(rng.integers(3, 16))


# --- triangular loops: causal attention written with loops ------------------------------------


def causal_loop_attention_fn(Q, K, V):
    """Row t attends to keys 0..t with an inner fori_loop(0, t + 1); rows written via one_hot."""
    T = Q.shape[0]
    inv_scale = 1.0 / np.sqrt(Q.shape[1])

    def row(t, out):
        q = Q[t]

        def accumulate(s, carry):
            num, den = carry
            weight = enp.exp(enp.sum(q * K[s]) * inv_scale)
            return num + weight * V[s], den + weight

        num, den = egad.fori_loop(0, t + 1, accumulate, (enp.zeros_like(V[0]), enp.zeros(())))
        return out + enp.expand_dims(enn.one_hot(t, T), 1) * (num / den)

    return egad.fori_loop(0, T, row, enp.zeros(V.shape))


def causal_loop_attention_ref(Q, K, V):
    T = Q.shape[0]
    inv_scale = 1.0 / np.sqrt(Q.shape[1])
    out = np.zeros(V.shape)
    for t in range(T):
        num, den = np.zeros_like(V[0]), np.zeros(())
        for s in range(t + 1):
            weight = np.exp(np.sum(Q[t] * K[s]) * inv_scale)
            num, den = num + weight * V[s], den + weight
        out[t] = num / den
    return out


def causal_loop_attention_args(rng):
    return _normal(rng, (6, 4)), _normal(rng, (6, 4)), _normal(rng, (6, 3))


PROGRAMS = [
    CorpusProgram("fori3_static", fori3_static_fn, fori3_static_ref, fori3_static_args,
                  differentiable_argnums=(0, 1), tags=("nest3", "fori", "closure", "traced-index")),
    CorpusProgram("nest3_ragged", nest3_ragged_fn, nest3_ragged_ref, nest3_ragged_args,
                  differentiable_argnums=(2, 3),
                  tags=("nest3", "fori", "traced-bounds", "ragged", "ragged-outer-counter", "ragged-data",
                        "zero-trip", "int-counter", "floordiv-mod")),
    CorpusProgram("ragged_scan", ragged_scan_fn, ragged_scan_ref, ragged_scan_args,
                  differentiable_argnums=(0, 2, 3),
                  tags=("ragged", "ragged-data", "fori-in-scan", "scan", "pytree-xs", "zero-trip", "rnn")),
    CorpusProgram("while_in_fori", while_in_fori_fn, while_in_fori_ref, while_in_fori_args,
                  differentiable_argnums=(0, 1),
                  tags=("while-in-loop", "ragged", "ragged-state", "zero-trip", "int-counter")),
    CorpusProgram("loop_cond_loop", loop_cond_loop_fn, loop_cond_loop_ref, loop_cond_loop_args,
                  differentiable_argnums=(0, 2),
                  tags=("nest3", "mixed", "cond-in-loop", "loop-in-branch", "ragged", "closure", "while")),
    CorpusProgram("sgd_epochs", sgd_epochs_fn, sgd_epochs_ref, sgd_epochs_args,
                  differentiable_argnums=(0, 1, 2, 3), tags=("scan-in-loop", "fori", "scan", "ys", "closure")),
    CorpusProgram("while_switch_fori", while_switch_fori_fn, while_switch_fori_ref, while_switch_fori_args,
                  differentiable_argnums=(1, 2),
                  tags=("nest3", "mixed", "while", "switch", "loop-in-branch", "traced-bounds", "floordiv-mod",
                        "int-counter")),
    CorpusProgram("causal_loop_attention", causal_loop_attention_fn, causal_loop_attention_ref,
                  causal_loop_attention_args, differentiable_argnums=(0, 1, 2),
                  tags=("ragged", "ragged-outer-counter", "attention", "one_hot", "expand_dims", "fori")),
]
