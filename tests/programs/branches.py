"""Corpus: branches — cond and switch, inside loops and around them.

Each program is a traced `*_fn`, a plain-numpy `*_ref` with ordinary Python
control flow, and a `*_args` factory.
"""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp

from . import CorpusProgram


def _normal(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float64)


def _uniform(rng, low, high, shape=()):
    value = rng.uniform(low, high, shape)
    return np.asarray(value, np.float64) if shape else np.float64(value)


def _clamp(index, num_branches):
    return min(max(int(index), 0), num_branches - 1)


# --- cond inside a fori_loop ------------------------------------------------------


def cond_in_fori_fn(xs, a, b):
    """cond on the sign of each row inside fori_loop; branches close over the row and a, b."""

    def body(i, h):
        x = xs[i]
        return egad.cond(enp.sum(x) > 0, lambda h: enp.tanh(h * a + x), lambda h: h * b - x * 0.5, h)

    return egad.fori_loop(0, xs.shape[0], body, enp.zeros_like(xs[0]))


def cond_in_fori_ref(xs, a, b):
    h = np.zeros_like(xs[0])
    for i in range(xs.shape[0]):
        x = xs[i]
        if np.sum(x) > 0:
            h = np.tanh(h * a + x)
        else:
            h = h * b - x * 0.5
    return h


def cond_in_fori_args(rng):
    return _normal(rng, (8, 3)), _uniform(rng, 0.5, 1.5), _uniform(rng, 0.3, 0.9)


# --- switch on the counter mod 3 --------------------------------------------------


def switch_mod_fn(xs, W):
    """switch(i % 3, ...) inside fori_loop, with two operands (state and row)."""
    branches = [
        lambda h, x: enp.tanh(h @ W + x),
        lambda h, x: h * 0.5 + enp.sin(x),
        lambda h, x: enp.maximum(h, x) - 0.1,
    ]

    def body(i, h):
        return egad.switch(i % 3, branches, h, xs[i])

    return egad.fori_loop(0, xs.shape[0], body, enp.zeros_like(xs[0]))


def switch_mod_ref(xs, W):
    h = np.zeros_like(xs[0])
    for i in range(xs.shape[0]):
        x = xs[i]
        if i % 3 == 0:
            h = np.tanh(h @ W + x)
        elif i % 3 == 1:
            h = h * 0.5 + np.sin(x)
        else:
            h = np.maximum(h, x) - 0.1
    return h


def switch_mod_args(rng):
    return _normal(rng, (10, 4)), _normal(rng, (4, 4), scale=0.5)


# --- switch with an out-of-range index, inside scan ------------------------------------


def switch_clamped_fn(logits, xs, scale):
    """switch index argmax(logit) - 1 ranges over -1..3 and is clamped to 0..2 (JAX semantics)."""

    def step(h, inp):
        logit, x = inp
        index = enp.argmax(logit) - 1
        branches = [lambda h: h + x, lambda h: enp.tanh(h * scale), lambda h: h * enp.cos(x)]
        return egad.switch(index, branches, h), index

    return egad.scan(step, enp.ones_like(xs[0]), (logits, xs))


def switch_clamped_ref(logits, xs, scale):
    h, indices = np.ones_like(xs[0]), []
    for logit, x in zip(logits, xs):
        index = np.argmax(logit) - 1
        branch = _clamp(index, 3)
        if branch == 0:
            h = h + x
        elif branch == 1:
            h = np.tanh(h * scale)
        else:
            h = h * np.cos(x)
        indices.append(index)
    return h, np.stack(indices)


def switch_clamped_args(rng):
    return _normal(rng, (12, 5)), _normal(rng, (12, 3)), _uniform(rng, 0.5, 2.0)


# --- loops inside the branches of a cond -----------------------------------------------


def loop_in_branch_fn(x, n, thresh):
    """cond whose branches run a traced-bound fori_loop or a while_loop (both branches taken)."""

    def long_branch(v):
        return egad.fori_loop(0, n, lambda i, v: enp.tanh(v * 1.5 + 0.1 * i), v)

    def short_branch(v):
        def shrinking(state):
            return enp.logical_and(enp.sum(state[0] * state[0]) > thresh, state[1] < 20)

        v, _ = egad.while_loop(shrinking, lambda state: (state[0] * 0.7, state[1] + 1), (v, 0))
        return v

    s = enp.sum(x)
    first = egad.cond(s > 0, long_branch, short_branch, x)
    second = egad.cond(-s > 0, long_branch, short_branch, -x)
    return first, second


def loop_in_branch_ref(x, n, thresh):
    def long_branch(v):
        for i in range(int(n)):
            v = np.tanh(v * 1.5 + 0.1 * i)
        return v

    def short_branch(v):
        k = 0
        while np.sum(v * v) > thresh and k < 20:
            v, k = v * 0.7, k + 1
        return v

    s = np.sum(x)
    first = long_branch(x) if s > 0 else short_branch(x)
    second = long_branch(-x) if -s > 0 else short_branch(-x)
    return first, second


def loop_in_branch_args(rng):
    return _normal(rng, (4,)), np.int64(rng.integers(0, 7)), _uniform(rng, 0.05, 0.5)


# --- cond over pytree operands and a pytree argument, closing over outer values ----------


def cond_pytree_fn(params, x, temperature):
    """cond with a dict + list of operands, dict/list results, closing over an outer traced scale."""
    scale = enp.exp(temperature)

    def smooth(p, pair):
        h = enp.tanh(pair[0] @ p["W"] + p["b"]) * scale
        return {"out": h, "aux": [enp.sum(h), pair[1]]}

    def rough(p, pair):
        h = enp.sin(pair[0]) * p["b"] - scale
        return {"out": h, "aux": [enp.max(h), pair[1] * 2.0]}

    pair = [x, x * 0.5]
    first = egad.cond(temperature > 0, smooth, rough, params, pair)
    second = egad.cond(temperature <= 0, smooth, rough, params, pair)
    return first, second


def cond_pytree_ref(params, x, temperature):
    scale = np.exp(temperature)

    def smooth(p, pair):
        h = np.tanh(pair[0] @ p["W"] + p["b"]) * scale
        return {"out": h, "aux": [np.sum(h), pair[1]]}

    def rough(p, pair):
        h = np.sin(pair[0]) * p["b"] - scale
        return {"out": h, "aux": [np.max(h), pair[1] * 2.0]}

    pair = [x, x * 0.5]
    first = smooth(params, pair) if temperature > 0 else rough(params, pair)
    second = smooth(params, pair) if temperature <= 0 else rough(params, pair)
    return first, second


def cond_pytree_args(rng):
    params = {"W": _normal(rng, (3, 3)), "b": _normal(rng, (3,))}
    return params, _normal(rng, (3,)), _uniform(rng, -1.0, 1.0)


# --- integer predicate (non-zero is true) --------------------------------------------


def cond_int_pred_fn(xs, counts):
    """cond on an int64 predicate (counts[i] + flips) % 2; the int flip count is carried."""

    def body(i, state):
        h, flips = state
        pred = (counts[i] + flips) % 2
        h = egad.cond(pred, lambda h: h * 0.8 + xs[i], lambda h: enp.tanh(h - xs[i]), h)
        return h, flips + pred

    return egad.fori_loop(0, xs.shape[0], body, (enp.zeros_like(xs[0]), counts[0] * 0))


def cond_int_pred_ref(xs, counts):
    h, flips = np.zeros_like(xs[0]), counts[0] * 0
    for i in range(xs.shape[0]):
        pred = (counts[i] + flips) % 2
        h = h * 0.8 + xs[i] if pred else np.tanh(h - xs[i])
        flips = flips + pred
    return h, flips


def cond_int_pred_args(rng):
    return _normal(rng, (9, 3)), rng.integers(0, 5, size=9).astype(np.int64)


# --- where / clip / logical ops instead of branches ----------------------------------------


def where_clip_fn(xs, w, lo, hi):
    """Elementwise selection inside a loop: leaky where, clip to traced bounds, count clipped."""

    def body(i, state):
        h, clipped = state
        z = h * w + xs[i]
        z = enp.where(z > 0, z, 0.1 * z)
        outside = enp.logical_or(z < lo, z > hi)
        return enp.clip(z, lo, hi), clipped + enp.sum(outside.astype("int64"))

    return egad.fori_loop(0, xs.shape[0], body, (enp.zeros_like(w), enp.zeros((), "int64")))


def where_clip_ref(xs, w, lo, hi):
    h, clipped = np.zeros_like(w), np.zeros((), np.int64)
    for i in range(xs.shape[0]):
        z = h * w + xs[i]
        z = np.where(z > 0, z, 0.1 * z)
        outside = np.logical_or(z < lo, z > hi)
        h, clipped = np.clip(z, lo, hi), clipped + np.sum(outside.astype(np.int64))
    return h, clipped


def where_clip_args(rng):
    return _normal(rng, (8, 5)), _normal(rng, (5,)), _uniform(rng, -1.5, -0.5), _uniform(rng, 0.5, 1.5)


# --- cond inside a while_loop on integer state: Collatz ----------------------------------


def collatz_fn(n0, w):
    """Collatz steps (cond on n % 2, n // 2) in a while_loop, with a float accumulator."""

    def cond(state):
        n, k, acc = state
        return enp.logical_and(n != 1, k < 30)

    def body(state):
        n, k, acc = state
        n = egad.cond(n % 2 == 0, lambda n: n // 2, lambda n: 3 * n + 1, n)
        return n, k + 1, acc * w + n * 0.01

    return egad.while_loop(cond, body, (n0, 0, enp.zeros_like(w)))


def collatz_ref(n0, w):
    n, k, acc = n0, 0, np.zeros_like(w)
    while n != 1 and k < 30:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        n, k, acc = n, k + 1, acc * w + n * 0.01
    return n, k, acc


def collatz_args(rng):
    return np.int64(rng.integers(1, 31)), _uniform(rng, 0.5, 0.95)


# --- switch inside a while_loop: a tiny op-code interpreter ------------------------------------


def opcode_interpreter_fn(codes, x, w):
    """while_loop over a program counter; switch on codes[pc] (out-of-range codes clamp) and jumps."""
    ops = [
        lambda a: a + x,
        lambda a: a * w,
        lambda a: enp.tanh(a),
        lambda a: enp.exp(-a * a),
    ]

    def cond(state):
        pc, k, acc = state
        return enp.logical_and(pc < codes.shape[0], k < 30)

    def body(state):
        pc, k, acc = state
        code = codes[pc]
        acc = egad.switch(code, ops, acc)
        skip = (code >= 3).astype("int64")
        return pc + 1 + skip, k + 1, acc

    return egad.while_loop(cond, body, (codes[0] * 0, 0, x))


def opcode_interpreter_ref(codes, x, w):
    pc, k, acc = codes[0] * 0, 0, x
    while pc < codes.shape[0] and k < 30:
        code = codes[pc]
        branch = _clamp(code, 4)
        if branch == 0:
            acc = acc + x
        elif branch == 1:
            acc = acc * w
        elif branch == 2:
            acc = np.tanh(acc)
        else:
            acc = np.exp(-acc * acc)
        skip = (code >= 3).astype(np.int64)
        pc, k = pc + 1 + skip, k + 1
    return pc, k, acc


def opcode_interpreter_args(rng):
    return rng.integers(-1, 6, size=14).astype(np.int64), _normal(rng, (3,)), _uniform(rng, 0.5, 1.2, (3,))


PROGRAMS = [
    CorpusProgram("cond_in_fori", cond_in_fori_fn, cond_in_fori_ref, cond_in_fori_args,
                  differentiable_argnums=(0, 1, 2), tags=("cond", "cond-in-loop", "fori", "closure")),
    CorpusProgram("switch_mod", switch_mod_fn, switch_mod_ref, switch_mod_args,
                  differentiable_argnums=(0, 1), tags=("switch", "switch-in-loop", "floordiv-mod", "fori")),
    CorpusProgram("switch_clamped", switch_clamped_fn, switch_clamped_ref, switch_clamped_args,
                  differentiable_argnums=(1, 2),
                  tags=("switch", "switch-clamp", "switch-in-loop", "scan", "argmax", "pytree-xs", "int-ys")),
    CorpusProgram("loop_in_branch", loop_in_branch_fn, loop_in_branch_ref, loop_in_branch_args,
                  differentiable_argnums=(0,),
                  tags=("cond", "loop-in-branch", "fori", "while", "traced-bounds", "closure", "neg")),
    CorpusProgram("cond_pytree", cond_pytree_fn, cond_pytree_ref, cond_pytree_args,
                  differentiable_argnums=(0, 1, 2),
                  tags=("cond", "pytree-operands", "pytree-arg", "dict", "closure")),
    CorpusProgram("cond_int_pred", cond_int_pred_fn, cond_int_pred_ref, cond_int_pred_args,
                  differentiable_argnums=(0,), tags=("cond", "int-pred", "cond-in-loop", "floordiv-mod", "int-counter")),
    CorpusProgram("where_clip", where_clip_fn, where_clip_ref, where_clip_args,
                  differentiable_argnums=(0, 1, 2, 3), tags=("where", "clip", "logical", "fori", "int-counter")),
    CorpusProgram("collatz", collatz_fn, collatz_ref, collatz_args,
                  differentiable_argnums=(1,),
                  tags=("while", "cond-in-loop", "floordiv-mod", "int-state", "zero-trip", "data-dependent-trips")),
    CorpusProgram("opcode_interpreter", opcode_interpreter_fn, opcode_interpreter_ref, opcode_interpreter_args,
                  differentiable_argnums=(1, 2),
                  tags=("while", "switch", "switch-in-loop", "switch-clamp", "int-counter", "traced-index")),
]
