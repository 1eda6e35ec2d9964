"""The corpus (tests/programs) rewritten in plain Python control flow for `@egad.function`.

Each function here computes what the corpus program of the same name computes, but
written the way its plain-numpy *reference* is written: `if`/`elif`/`else`, `while`,
`for i in range(n)`, `for x in xs`, `and`/`or`/`not`, nested functions — with
`egad.numpy`/`egad.nn` ops instead of numpy so that it traces. `PLAIN` maps the corpus
name to the decorated function.

What is traced and what stays Python is deliberate and varied:

- conditions on traced values (`if enp.sum(x) > 0`, `while ... and k < 30`) and
  `range()` over traced ints (`range(n)`, `range(lo, hi)`, `range(lengths[i])`) are
  converted into cond / while_loop / fori_loop;
- `for x in xs` iterates a traced array's first axis (converted);
- counters started as Python ints (`i = 0`, `k = 0`) and incremented inside a traced
  loop become loop-carried traced ints;
- `for t in range(xs.shape[0])` over a static shape stays Python (unrolled), which is
  how programs that collect per-step outputs in a Python list are written.

Where a corpus program uses `switch` with a clamped index, the plain version uses an
`if`/`elif`/`else` chain on the unclamped index (`<= 0` first, `>= last` in `else`).
"""
from __future__ import annotations

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

PLAIN: dict = {}  # corpus name -> egad.function(fn)
ORIGINAL: dict = {}  # corpus name -> fn itself (undecorated)


def plain(name):
    """Register `fn` under the corpus name `name`, decorated with `egad.function`."""

    def register(fn):
        converted = egad.function(fn)
        ORIGINAL[name] = fn
        PLAIN[name] = converted
        return converted

    return register


# --- loops ------------------------------------------------------------------------------


@plain("fori_static")
def fori_static(xs, w):
    acc = enp.zeros_like(w)
    for x in xs:  # a traced array's rows
        acc = acc * 0.9 + enp.tanh(x * w)
    return acc


@plain("fori_mask_bound")
def fori_mask_bound(x, mask, scale):
    n = enp.sum(mask).astype("int64")
    s = enp.zeros_like(x[0])
    for i in range(n):  # traced bound, zero trips when the mask is empty
        s = s + scale * enp.square(x[i])
    return s


@plain("fori_lo_hi")
def fori_lo_hi(lo, hi, x, a):
    y, count = enp.zeros_like(x[0]), 0
    for i in range(lo, hi):  # both bounds traced; hi < lo runs zero trips
        y, count = y * a + x[i], count + 1
    return y, count


@plain("negative_index")
def negative_index(xs, decay, offset):
    h = enp.zeros_like(xs[0])
    for i in range(xs.shape[0]):  # static: unrolled
        h = h * decay + xs[-(i + 1)] + offset
    return h


@plain("fori_divmod")
def fori_divmod(xs, w):
    h, odd_steps = enp.zeros_like(w), 0
    i = 0
    while i < 2 * xs.shape[0]:  # static condition on a Python int: stays Python
        sign = 1.0 - 2.0 * (i % 2)
        h = h + sign * xs[i // 2] * w + (i % 3) * 0.1
        h, odd_steps = enp.tanh(h), odd_steps + i % 2
        i += 1
    return h, odd_steps


@plain("newton_sqrt")
def newton_sqrt(a, x0):
    x, k = x0, 0
    while enp.any(enp.abs(x * x - a) > 1e-10) and k < 30:
        x, k = 0.5 * (x + a / x), k + 1
    return x, k


@plain("while_zero_trip")
def while_zero_trip(x, tol):
    never = enp.sum(x * x) * 2.0 + 1.0
    v1, k1 = x, 0
    while not enp.all(v1 * v1 <= tol) and k1 < 25:
        v1, k1 = v1 * 0.5, k1 + 1
    v2, k2 = x, 0
    while enp.sum(v2 * v2) > never and k2 < 25:  # zero trips
        v2, k2 = v2 * 0.5, k2 + 1
    return v1, k1, v2, k2


@plain("euler_ode")
def euler_ode(y0, rate, amp, y_stop):
    dt = 0.1
    t, y, k = enp.zeros_like(rate), y0, 0
    while enp.max(enp.abs(y)) > y_stop and k < 30:
        dy = amp * enp.sin(t) - rate * y
        t, y, k = t + dt, y + dt * dy, k + 1
    return t, y, k


@plain("euler_fixed")
def euler_fixed(y0, rate, forcing):
    y = y0
    for t in range(forcing.shape[0]):  # static: a loop, not 40 copies
        y = y + 0.05 * (forcing[t] - rate * y)
    return y


@plain("gate_blocks")
def gate_blocks(xs, dzs):
    H = dzs.shape[2] // 4
    blocks = []
    for k in range(4):  # static: four contractions
        blocks.append(enp.einsum("tbi,tbj->ij", xs, dzs[:, :, k * H:(k + 1) * H]))
    return tuple(blocks)


@plain("scan_ys")
def scan_ys(xs, decay, h0):
    h, ys = h0, []
    for t in range(xs.shape[0]):  # static, collecting per-step outputs in a list
        h = decay * h + xs[t]
        ys.append(enp.sum(h * h))
    return h, enp.stack(ys)


@plain("scan_reverse")
def scan_reverse(rewards, values, gamma):
    ret = enp.zeros_like(gamma)
    advantages = []
    for t in reversed(range(rewards.shape[0])):
        ret = rewards[t] + gamma * ret
        advantages.append(ret - values[t])
    advantages.reverse()
    return ret, enp.stack(advantages)


@plain("scan_pytree")
def scan_pytree(xs, gates, W, h0):
    h, total = h0, enp.zeros(())
    hs, norms = [], []
    for t in range(xs.shape[0]):
        g = gates[t]
        h = enp.tanh(xs[t] @ W + h) * g + h * (1.0 - g)
        total = total + enp.sum(h)
        hs.append(h)
        norms.append(enp.sqrt(enp.sum(h * h)))
    return {"h": h, "total": total, "ys": {"h": enp.stack(hs), "norm": enp.stack(norms)}}


@plain("scan_no_xs")
def scan_no_xs(A, v0):
    v, quotients = v0, []
    for _ in range(2 * A.shape[0]):
        v = A @ v
        v = v / enp.sqrt(enp.sum(v * v))
        quotients.append(enp.sum(v * (A @ v)))
    return v, enp.stack(quotients)


@plain("scan_zero_length")
def scan_zero_length(xs, h0, W):
    h = h0
    for x in xs:  # zero rows
        h = enp.tanh(h @ W + x)
    c = enp.sum(h0)
    same = h0
    for i in range(xs.shape[0]):
        same = same + xs[i]
    return h + same * c, enp.zeros((0, h0.shape[0])), enp.zeros((0,))


@plain("weak_types_f32")
def weak_types_f32(x, w, n):
    h = x[0]
    for i in range(7):  # static
        h = h * 0.5 + w * i
        h = h + 1e-3 * (i * i) - 2
        h = enp.tanh(h / 3.0) + x[i % x.shape[0]]
    g = h
    for i in range(n):  # traced bound; the counter stays weakly typed
        g = g * 0.75 + i / 4
    return h, g, enp.sum(g * g) * 0.5


@plain("weak_init_f32")
def weak_init_f32(xs):
    total, count = 0.0, 0  # Python scalars, made float32 / int by the loop
    for x in xs:
        total, count = total + enp.sum(x) * 0.5, count + 1
    return total, count


@plain("dict_state")
def dict_state(xs, W, b):
    s = {"h": enp.zeros_like(b), "best": enp.full((), -10.0), "best_step": enp.zeros((), "int64"), "steps": 0}
    i = 0
    for x in xs:
        h = enp.tanh(x @ W + s["h"] + b)
        peak = enp.max(h)
        better = peak > s["best"]
        s = {
            "h": h,
            "best": enp.maximum(s["best"], peak),
            "best_step": enp.where(better, i, s["best_step"]),
            "steps": s["steps"] + 1,
        }
        i = i + 1
    return s


@plain("bisection")
def bisection(c, interval):
    def f(x):
        return x**3 + c * x - 1.0

    lo, hi = interval[0], interval[1]
    x, k = 0.5 * (lo + hi), 0
    while hi - lo > 1e-6 and k < 30:
        mid = 0.5 * (lo + hi)
        if f(mid) * f(lo) > 0:
            lo = mid
        else:
            hi = mid
        x, k = mid, k + 1
    return (x, [lo, hi]), k


@plain("momentum_descent")
def momentum_descent(A, b, x0):
    x, velocity, grad, k = x0, enp.zeros_like(x0), A @ x0 - b, 0
    while enp.sum(grad * grad) > 1e-6 and k < 30:
        velocity = 0.3 * velocity - 0.2 * grad
        x = x + velocity
        grad, k = A @ x - b, k + 1
    return (x, [velocity, grad]), k


@plain("online_softmax")
def online_softmax(scores, values):
    m, denom, acc = enp.full((), -1e3), enp.zeros(()), enp.zeros_like(values[0][0])
    i = 0
    for row in scores:
        m_new = egad.stop_gradient(enp.maximum(m, enp.max(row)))
        rescale = enp.exp(m - m_new)
        p = enp.exp(row - m_new)
        m, denom, acc = m_new, denom * rescale + enp.sum(p), acc * rescale + p @ values[i]
        i += 1
    return acc / denom, m + enp.log(denom)


@plain("closure")
def closure(xs, W, alpha):
    W_scaled = W * alpha
    bias = enp.mean(xs, axis=0)
    h = enp.ones_like(bias) * 0.1
    for x in xs:
        h = enp.tanh(h @ W_scaled + x - bias)
    return h


# --- branches -----------------------------------------------------------------------------


@plain("cond_in_fori")
def cond_in_fori(xs, a, b):
    h = enp.zeros_like(xs[0])
    for x in xs:
        if enp.sum(x) > 0:
            h = enp.tanh(h * a + x)
        else:
            h = h * b - x * 0.5
    return h


@plain("switch_mod")
def switch_mod(xs, W):
    h = enp.zeros_like(xs[0])
    i = 0
    for x in xs:  # i is carried by the traced loop: the if/elif/else below is traced
        if i % 3 == 0:
            h = enp.tanh(h @ W + x)
        elif i % 3 == 1:
            h = h * 0.5 + enp.sin(x)
        else:
            h = enp.maximum(h, x) - 0.1
        i = i + 1
    return h


@plain("switch_clamped")
def switch_clamped(logits, xs, scale):
    h, indices = enp.ones_like(xs[0]), []
    for t in range(xs.shape[0]):  # static (the indices are collected in a list)
        x = xs[t]
        index = enp.argmax(logits[t]) - 1
        if index <= 0:  # traced
            h = h + x
        elif index == 1:
            h = enp.tanh(h * scale)
        else:
            h = h * enp.cos(x)
        indices.append(index)
    return h, enp.stack(indices)


@plain("loop_in_branch")
def loop_in_branch(x, n, thresh):
    def long_branch(v):
        for i in range(n):
            v = enp.tanh(v * 1.5 + 0.1 * i)
        return v

    def short_branch(v):
        k = 0
        while enp.sum(v * v) > thresh and k < 20:
            v, k = v * 0.7, k + 1
        return v

    s = enp.sum(x)
    if s > 0:
        first = long_branch(x)
    else:
        first = short_branch(x)
    if -s > 0:
        second = long_branch(-x)
    else:
        second = short_branch(-x)
    return first, second


@plain("cond_pytree")
def cond_pytree(params, x, temperature):
    scale = enp.exp(temperature)

    def smooth(p, pair):
        h = enp.tanh(pair[0] @ p["W"] + p["b"]) * scale
        return {"out": h, "aux": [enp.sum(h), pair[1]]}

    def rough(p, pair):
        h = enp.sin(pair[0]) * p["b"] - scale
        return {"out": h, "aux": [enp.max(h), pair[1] * 2.0]}

    pair = [x, x * 0.5]
    if temperature > 0:
        first = smooth(params, pair)
    else:
        first = rough(params, pair)
    second = smooth(params, pair) if temperature <= 0 else rough(params, pair)
    return first, second


@plain("cond_int_pred")
def cond_int_pred(xs, counts):
    h, flips = enp.zeros_like(xs[0]), counts[0] * 0
    for i in range(xs.shape[0]):  # static loop, traced (integer) predicate
        pred = (counts[i] + flips) % 2
        if pred:
            h = h * 0.8 + xs[i]
        else:
            h = enp.tanh(h - xs[i])
        flips = flips + pred
    return h, flips


@plain("where_clip")
def where_clip(xs, w, lo, hi):
    h, clipped = enp.zeros_like(w), enp.zeros((), "int64")
    for x in xs:
        z = h * w + x
        z = enp.where(z > 0, z, 0.1 * z)
        outside = enp.logical_or(z < lo, z > hi)
        h, clipped = enp.clip(z, lo, hi), clipped + enp.sum(outside.astype("int64"))
    return h, clipped


@plain("collatz")
def collatz(n0, w):
    n, k, acc = n0, 0, enp.zeros_like(w)
    while n != 1 and k < 30:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        k = k + 1
        acc = acc * w + n * 0.01
    return n, k, acc


@plain("opcode_interpreter")
def opcode_interpreter(codes, x, w):
    pc, k, acc = codes[0] * 0, 0, x
    while pc < codes.shape[0] and k < 30:
        code = codes[pc]
        if code <= 0:
            acc = acc + x
        elif code == 1:
            acc = acc * w
        elif code == 2:
            acc = enp.tanh(acc)
        else:
            acc = enp.exp(-acc * acc)
        skip = (code >= 3).astype("int64")
        pc, k = pc + 1 + skip, k + 1
    return pc, k, acc


# --- nesting ------------------------------------------------------------------------------


@plain("fori3_static")
def fori3_static(A, x):
    s = enp.zeros_like(x[0])
    i = 0
    for Ai in A:  # traced outer loop; the two inner loops are static and unrolled
        for j in range(A.shape[1]):
            for k in range(A.shape[2]):
                s = enp.tanh(s * 0.9 + Ai[j][k] * x[k] + 0.01 * (i - j))
        i = i + 1
    return s


@plain("nest3_ragged")
def nest3_ragged(n, lengths, xs, w):
    s, steps = enp.zeros_like(w), 0
    for i in range(n):
        for j in range(lengths[i]):
            for k in range(j + 1):
                s, steps = s * w + xs[(i + j + k) % xs.shape[0]], steps + 1
    return enp.tanh(s), steps


@plain("ragged_scan")
def ragged_scan(seqs, lengths, W, U):
    total, finals = lengths[0] * 0, []
    for b in range(seqs.shape[0]):  # static
        seq, length = seqs[b], lengths[b]
        h = enp.zeros((W.shape[0],))
        for t in range(length):  # traced, sometimes zero trips
            h = enp.tanh(seq[t] @ U + h @ W)
        total = total + length
        finals.append(h)
    return total, enp.stack(finals)


@plain("while_in_fori")
def while_in_fori(xs, growth):
    v, total = enp.zeros_like(xs[0]), 0
    for x in xs:
        v = v * growth + enp.abs(x)
        k = 0
        while enp.sum(v) > 1.0 and k < 10:
            v, k = v * 0.5, k + 1
        total = total + k
    return v, total


@plain("loop_cond_loop")
def loop_cond_loop(X, lengths, W):
    h = enp.ones_like(X[0])
    t = 0
    for x in X:
        if lengths[t] % 2 == 0:
            for _ in range(lengths[t]):
                h = enp.tanh(h @ W + x * 0.5)
        else:
            k = 0  # assigned in one branch only, never used after the if
            while enp.max(enp.abs(h)) > 0.3 and k < lengths[t] + 2:
                h, k = h * 0.6 + 0.05 * x, k + 1
        t = t + 1
    return h


@plain("sgd_epochs")
def sgd_epochs(X, y, w0, lr):
    w, losses = w0, enp.zeros_like(y)
    for e in range(3):
        step_size = lr / (1 + e)
        per_sample = []
        for j in range(X.shape[0]):
            x, target = X[j], y[j]
            err = x @ w - target
            w = w - step_size * err * x
            per_sample.append(err * err)
        losses = enp.stack(per_sample)
    return w, losses


@plain("while_switch_fori")
def while_switch_fori(modes, x, W, budget):
    r, spent, h = 0, modes[0] * 0, x
    while spent < budget and r < 12:
        mode = modes[r % modes.shape[0]]
        if mode <= 0:
            h = enp.tanh(h @ W)
        elif mode == 1:
            for k in range(mode + r % 2):  # traced bound inside a traced branch
                h = enp.tanh(h @ W + 0.1 * k)
        else:
            for _ in range(3):  # static inside a traced branch: unrolled there
                h = h * 0.9 + x
        r, spent = r + 1, spent + mode + 1
    return r, spent, h


@plain("causal_loop_attention")
def causal_loop_attention(Q, K, V):
    T = Q.shape[0]
    inv_scale = 1.0 / np.sqrt(Q.shape[1])
    out = enp.zeros(V.shape)
    t = 0
    for q in Q:
        num, den = enp.zeros_like(V[0]), enp.zeros(())
        for s in range(t + 1):  # bound from the traced outer counter
            weight = enp.exp(enp.sum(q * K[s]) * inv_scale)
            num, den = num + weight * V[s], den + weight
        out = out + enp.expand_dims(enn.one_hot(t, T), 1) * (num / den)
        t = t + 1
    return out


# --- models -------------------------------------------------------------------------------


@plain("rnn_tanh")
def rnn_tanh(W, U, xs, h0):
    h = h0
    for x in xs:
        h = enp.tanh(x @ U + h @ W)
    return enp.sum(h * h)


@plain("packed_rnn")
def packed_rnn(P, xs, h0):
    H = h0.shape[1]
    h = h0
    for x in xs:
        h = enp.tanh(x @ P[:, :H] + h @ P[:, 2 * H:])
    return enp.sum(h * h)


@plain("lstm")
def lstm(xs, Wx, Wh, b, h0, c0):
    H = h0.shape[-1]
    h, c = h0, c0
    sum_sq = enp.zeros(())
    for x in xs:
        z = x @ Wx + h @ Wh + b
        i, f = enn.sigmoid(z[:, :H]), enn.sigmoid(z[:, H : 2 * H])
        g, o = enp.tanh(z[:, 2 * H : 3 * H]), enn.sigmoid(z[:, 3 * H :])
        c = f * c + i * g
        h = o * enp.tanh(c)
        sum_sq = sum_sq + enp.sum(h * h)
    return (h, c), sum_sq / (xs.shape[0] * h0.shape[0] * H)


@plain("gru_f32")
def gru_f32(xs, params, h0):
    B, H = h0.shape
    T = xs.shape[0]
    W, U, b = params["W"], params["U"], params["b"]
    h, hs = h0, []
    for t in range(T):
        x = xs[t]
        z = enn.sigmoid(
            enp.einsum("bi,ih->bh", x, W[0]) + enp.einsum("bk,kh->bh", h, U[0]) + enp.broadcast_to(b[0], (B, H))
        )
        r = enn.sigmoid(x @ W[1] + h @ U[1] + b[1])
        n = enp.tanh(x @ W[2] + (r * h) @ U[2] + b[2])
        h = (1.0 - z) * n + z * h
        hs.append(h)
    per_batch = enp.reshape(enp.transpose(enp.stack(hs), (1, 0, 2)), (B, T * H))
    summary = enp.stack([enp.mean(per_batch, axis=1), enn.logsumexp(per_batch, axis=1)], axis=1)
    return h, summary


@plain("embedding_lm")
def embedding_lm(tokens, E, W, Wo):
    T = tokens.shape[0]
    h, nll = enp.zeros((E.shape[1],)), enp.zeros(())
    for t in range(T - 1):
        h = enp.tanh(E[tokens[t]] + h @ W)
        nll = nll - enn.log_softmax(h @ Wo)[tokens[t + 1]]
    return nll / (T - 1), h


@plain("attention_decoder")
def attention_decoder(enc, E, Wq, Wc, Wo, h0, start):
    S, H = enc.shape
    positions = enp.arange(S)
    h, token, logp = h0, start, enp.zeros(())
    tokens, attns = [], []
    for t in range(6):
        x = E[token]
        q = h @ Wq
        scores = (enc @ q) / np.sqrt(H) - 0.1 * enp.abs(positions - t)
        attn = enn.softmax(scores)
        context = attn @ enc
        h = enp.tanh(enp.concatenate([x, context]) @ Wc)
        logits = h @ Wo
        token = enp.argmax(logits)
        logp = logp + enp.max(enn.log_softmax(logits))
        tokens.append(token)
        attns.append(attn)
    return logp, enp.stack(tokens), enp.stack(attns), h


@plain("while_rnn")
def while_rnn(xs, W, U, h0, thresh):
    h, k = h0, 0
    while enp.sqrt(enp.sum(h * h)) < thresh and k < 25:
        h, k = enp.tanh(xs[k % xs.shape[0]] @ U + h @ W), k + 1
    return h, k


@plain("stacked_rnn")
def stacked_rnn(xs, Ws, Us, num_layers):
    seq = xs
    for layer in range(num_layers):  # num_layers is static (static_argnums)
        W, U = Ws[layer], Us[layer]
        h, outputs = enp.zeros((W.shape[0],)), []
        for t in range(seq.shape[0]):
            h = enp.tanh(seq[t] @ U + h @ W)
            outputs.append(h)
        seq = enp.stack(outputs)
    return enp.sum(enn.relu(seq[-1])), seq


@plain("moe_topk")
def moe_topk(xs, Wr, We):
    num_experts = Wr.shape[1]
    load, ys = enp.zeros((num_experts,)), []
    for t in range(xs.shape[0]):
        x = xs[t]
        logits = x @ Wr
        _, idx = enn.top_k(egad.stop_gradient(logits), 2)
        gates = enn.softmax(enp.stack([logits[idx[0]], logits[idx[1]]]))
        expert_out = enp.stack([x @ We[idx[0]], x @ We[idx[1]]])
        ys.append(gates @ expert_out)
        load = load + enp.sum(enn.one_hot(idx, num_experts), axis=0)
    return enp.stack(ys), load
