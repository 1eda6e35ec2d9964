"""Corpus: single loops — fori_loop (static and traced bounds), while_loop, scan.

Each program is a traced `*_fn`, a plain-numpy `*_ref` with ordinary Python
control flow, and a `*_args` factory.
"""
from __future__ import annotations

import numpy as np

import egad
import egad.numpy as enp

from . import CorpusProgram

F32_RTOL = 1e-5


def _normal(rng, shape, dtype=np.float64, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(dtype)


def _uniform(rng, low, high, shape=(), dtype=np.float64):
    value = rng.uniform(low, high, shape)
    return np.asarray(value, dtype=dtype) if shape else dtype(value)


# --- fori_loop, static bounds ---------------------------------------------------


def fori_static_fn(xs, w):
    """fori_loop with static bounds reading xs[i] with the traced counter."""

    def body(i, acc):
        return acc * 0.9 + enp.tanh(xs[i] * w)

    return egad.fori_loop(0, xs.shape[0], body, enp.zeros_like(w))


def fori_static_ref(xs, w):
    acc = np.zeros_like(w)
    for i in range(xs.shape[0]):
        acc = acc * 0.9 + np.tanh(xs[i] * w)
    return acc


def fori_static_args(rng):
    return _normal(rng, (8, 5)), _normal(rng, (5,))


# --- fori_loop, bound computed from data ------------------------------------------


def fori_mask_bound_fn(x, mask, scale):
    """Upper bound n = sum(mask) is a traced int64; zero trips when the mask is empty."""
    n = enp.sum(mask).astype("int64")

    def body(i, s):
        return s + scale * enp.square(x[i])

    return egad.fori_loop(0, n, body, enp.zeros_like(x[0]))


def fori_mask_bound_ref(x, mask, scale):
    s = np.zeros_like(x[0])
    for i in range(int(np.sum(mask))):
        s = s + scale * np.square(x[i])
    return s


def fori_mask_bound_args(rng):
    mask = (rng.uniform(size=10) < 0.6).astype(np.int64)
    return _normal(rng, (10, 3)), mask, _uniform(rng, 0.5, 2.0)


# --- fori_loop, both bounds are int arguments --------------------------------------


def fori_lo_hi_fn(lo, hi, x, a):
    """Both bounds are traced int64 arguments (hi < lo runs zero trips); int counter carried."""

    def body(i, carry):
        y, count = carry
        return y * a + x[i], count + 1

    y, count = egad.fori_loop(lo, hi, body, (enp.zeros_like(x[0]), 0))
    return y, count


def fori_lo_hi_ref(lo, hi, x, a):
    y, count = np.zeros_like(x[0]), 0
    for i in range(int(lo), int(hi)):
        y, count = y * a + x[i], count + 1
    return y, count


def fori_lo_hi_args(rng):
    lo = np.int64(rng.integers(0, 7))
    hi = np.int64(rng.integers(2, 13))
    return lo, hi, _normal(rng, (12, 4)), _uniform(rng, 0.5, 0.9)


# --- negative traced indices and Python-scalar arguments -----------------------------------


def negative_index_fn(xs, decay, offset):
    """xs[-(i + 1)] with a traced negative index (wraps as numpy); decay/offset are Python scalars."""

    def body(i, h):
        return h * decay + xs[-(i + 1)] + offset

    return egad.fori_loop(0, xs.shape[0], body, enp.zeros_like(xs[0]))


def negative_index_ref(xs, decay, offset):
    h = np.zeros_like(xs[0])
    for i in range(xs.shape[0]):
        h = h * decay + xs[-(i + 1)] + offset
    return h


def negative_index_args(rng):
    return _normal(rng, (6, 3)), float(rng.uniform(0.3, 0.9)), int(rng.integers(-2, 3))


# --- integer floor-division / mod of the counter ---------------------------------


def fori_divmod_fn(xs, w):
    """Counter arithmetic: i // 2 picks the row, i % 2 the sign, i % 3 an offset."""

    def body(i, carry):
        h, odd_steps = carry
        sign = 1.0 - 2.0 * (i % 2)
        h = h + sign * xs[i // 2] * w + (i % 3) * 0.1
        return enp.tanh(h), odd_steps + i % 2

    return egad.fori_loop(0, 2 * xs.shape[0], body, (enp.zeros_like(w), 0))


def fori_divmod_ref(xs, w):
    h, odd_steps = np.zeros_like(w), 0
    for i in range(2 * xs.shape[0]):
        sign = 1.0 - 2.0 * (i % 2)
        h = h + sign * xs[i // 2] * w + (i % 3) * 0.1
        h, odd_steps = np.tanh(h), odd_steps + i % 2
    return h, odd_steps


def fori_divmod_args(rng):
    return _normal(rng, (5, 4)), _normal(rng, (4,))


# --- while_loop: Newton iteration to tolerance -----------------------------------


def newton_sqrt_fn(a, x0):
    """Newton's method for sqrt(a) until every residual is below tolerance (capped)."""

    def cond(state):
        x, k = state
        unconverged = enp.any(enp.abs(x * x - a) > 1e-10)
        return enp.logical_and(unconverged, k < 30)

    def body(state):
        x, k = state
        return 0.5 * (x + a / x), k + 1

    return egad.while_loop(cond, body, (x0, 0))


def newton_sqrt_ref(a, x0):
    x, k = x0, 0
    while np.any(np.abs(x * x - a) > 1e-10) and k < 30:
        x, k = 0.5 * (x + a / x), k + 1
    return x, k


def newton_sqrt_args(rng):
    return _uniform(rng, 0.5, 4.0, (4,)), _uniform(rng, 0.5, 3.0, (4,))


# --- while_loop: zero trips ------------------------------------------------------


def while_zero_trip_fn(x, tol):
    """Two halving while_loops; the second's threshold (a closure) exceeds the start: zero trips."""
    never = enp.sum(x * x) * 2.0 + 1.0

    def halve(state):
        v, k = state
        return v * 0.5, k + 1

    def above_tol(state):
        v, k = state
        return enp.logical_and(enp.logical_not(enp.all(v * v <= tol)), k < 25)

    def above_never(state):
        v, k = state
        return enp.logical_and(enp.sum(v * v) > never, k < 25)

    v1, k1 = egad.while_loop(above_tol, halve, (x, 0))
    v2, k2 = egad.while_loop(above_never, halve, (x, 0))
    return v1, k1, v2, k2


def while_zero_trip_ref(x, tol):
    never = np.sum(x * x) * 2.0 + 1.0
    v1, k1 = x, 0
    while not np.all(v1 * v1 <= tol) and k1 < 25:
        v1, k1 = v1 * 0.5, k1 + 1
    v2, k2 = x, 0
    while np.sum(v2 * v2) > never and k2 < 25:
        v2, k2 = v2 * 0.5, k2 + 1
    return v1, k1, v2, k2


def while_zero_trip_args(rng):
    return _normal(rng, (5,), scale=3.0), _uniform(rng, 0.01, 0.5)


# --- while_loop: Euler ODE with a state-dependent stop -----------------------------


def euler_ode_fn(y0, rate, amp, y_stop):
    """Explicit Euler for y' = -rate*y + amp*sin(t) until max|y| <= y_stop (capped at 30 steps)."""
    dt = 0.1

    def cond(state):
        t, y, k = state
        return enp.logical_and(enp.max(enp.abs(y)) > y_stop, k < 30)

    def body(state):
        t, y, k = state
        dy = amp * enp.sin(t) - rate * y
        return t + dt, y + dt * dy, k + 1

    return egad.while_loop(cond, body, (enp.zeros_like(rate), y0, 0))


def euler_ode_ref(y0, rate, amp, y_stop):
    dt = 0.1
    t, y, k = np.zeros_like(rate), y0, 0
    while np.max(np.abs(y)) > y_stop and k < 30:
        dy = amp * np.sin(t) - rate * y
        t, y, k = t + dt, y + dt * dy, k + 1
    return t, y, k


def euler_ode_args(rng):
    return (
        _uniform(rng, 0.5, 2.0, (3,)),
        _uniform(rng, 0.5, 2.0),
        _uniform(rng, 0.0, 0.3),
        _uniform(rng, 0.2, 0.6),
    )


# --- fori_loop: Euler ODE with fixed steps and a forcing term -------------------------


def euler_fixed_fn(y0, rate, forcing):
    """Explicit Euler for y' = forcing[t] - rate*y, one fixed step per forcing row (40):
    a small body run many times, the loop rules/unroll.py's unroll-by-k is for."""
    dt = 0.05
    return egad.fori_loop(0, forcing.shape[0], lambda t, y: y + dt * (forcing[t] - rate * y), y0)


def euler_fixed_ref(y0, rate, forcing):
    y = y0
    for row in forcing:
        y = y + 0.05 * (row - rate * y)
    return y


def euler_fixed_args(rng):
    return _normal(rng, (3,)), _uniform(rng, 0.5, 2.0), _normal(rng, (40, 3))


# --- scan with per-step outputs ---------------------------------------------------


def scan_ys_fn(xs, decay, h0):
    """scan emitting a per-step scalar y; final carry and stacked ys are both returned."""

    def step(h, x):
        h = decay * h + x
        return h, enp.sum(h * h)

    return egad.scan(step, h0, xs)


def scan_ys_ref(xs, decay, h0):
    h, ys = h0, []
    for x in xs:
        h = decay * h + x
        ys.append(np.sum(h * h))
    return h, np.stack(ys)


def scan_ys_args(rng):
    return _normal(rng, (7, 4)), _uniform(rng, 0.3, 0.9, (4,)), _normal(rng, (4,))


# --- scan, reverse=True -------------------------------------------------------------


def scan_reverse_fn(rewards, values, gamma):
    """Discounted returns with scan(reverse=True); ys stay aligned with the inputs."""

    def step(ret, rv):
        r, v = rv
        ret = r + gamma * ret
        return ret, ret - v

    return egad.scan(step, enp.zeros_like(gamma), (rewards, values), reverse=True)


def scan_reverse_ref(rewards, values, gamma):
    ret = np.zeros_like(gamma)
    adv = np.zeros_like(values)
    for t in reversed(range(rewards.shape[0])):
        ret = rewards[t] + gamma * ret
        adv[t] = ret - values[t]
    return ret, adv


def scan_reverse_args(rng):
    return _normal(rng, (9,)), _normal(rng, (9,)), _uniform(rng, 0.8, 0.99)


# --- scan over a pytree of xs, pytree carry and ys ------------------------------------


def scan_pytree_fn(xs, gates, W, h0):
    """scan whose xs is a dict, carry a tuple and ys a dict (a gated tanh recurrence)."""

    def step(carry, inp):
        h, total = carry
        g = inp["g"]
        h = enp.tanh(inp["x"] @ W + h) * g + h * (1.0 - g)
        total = total + enp.sum(h)
        return (h, total), {"h": h, "norm": enp.sqrt(enp.sum(h * h))}

    (h, total), ys = egad.scan(step, (h0, enp.zeros(())), {"x": xs, "g": gates})
    return {"h": h, "total": total, "ys": ys}


def scan_pytree_ref(xs, gates, W, h0):
    h, total = h0, np.zeros(())
    hs, norms = [], []
    for t in range(xs.shape[0]):
        g = gates[t]
        h = np.tanh(xs[t] @ W + h) * g + h * (1.0 - g)
        total = total + np.sum(h)
        hs.append(h)
        norms.append(np.sqrt(np.sum(h * h)))
    return {"h": h, "total": total, "ys": {"h": np.stack(hs), "norm": np.stack(norms)}}


def scan_pytree_args(rng):
    return (
        _normal(rng, (6, 3)),
        _uniform(rng, 0.1, 0.9, (6,)),
        _normal(rng, (3, 3), scale=0.5),
        _normal(rng, (3,)),
    )


# --- scan with xs=None and a static length ----------------------------------------


def scan_no_xs_fn(A, v0):
    """Power iteration as scan(f, v0, None, length=2n), emitting Rayleigh quotients."""

    def step(v, _):
        v = A @ v
        v = v / enp.sqrt(enp.sum(v * v))
        return v, enp.sum(v * (A @ v))

    return egad.scan(step, v0, None, length=2 * A.shape[0])


def scan_no_xs_ref(A, v0):
    v, quotients = v0, []
    for _ in range(2 * A.shape[0]):
        v = A @ v
        v = v / np.sqrt(np.sum(v * v))
        quotients.append(np.sum(v * (A @ v)))
    return v, np.stack(quotients)


def scan_no_xs_args(rng):
    B = rng.standard_normal((4, 4))
    return (B + B.T + 4.0 * np.eye(4)).astype(np.float64), _uniform(rng, 0.5, 1.5, (4,))


# --- zero-length scan and zero-trip fori -------------------------------------------


def scan_zero_length_fn(xs, h0, W):
    """scan over xs of length 0, scan(None, length=0) and fori_loop(0, 0): carries pass through."""

    def step(h, x):
        h = enp.tanh(h @ W + x)
        return h, h * 2.0

    h, ys = egad.scan(step, h0, xs)
    c, zs = egad.scan(lambda c, _: (c * 3.0, enp.sum(c)), enp.sum(h0), None, length=0)
    same = egad.fori_loop(0, xs.shape[0], lambda i, s: s + xs[i], h0)
    return h + same * c, ys, zs


def scan_zero_length_ref(xs, h0, W):
    h, c, same = h0, np.sum(h0), h0
    return h + same * c, np.zeros((0, h0.shape[0])), np.zeros((0,))


def scan_zero_length_args(rng):
    return np.zeros((0, 3), np.float64), _normal(rng, (3,)), _normal(rng, (3, 3))


# --- float32 with weak Python scalars and loop counters --------------------------------


def weak_types_f32_fn(x, w, n):
    """float32 state mixed with Python scalars and the (weak) counter stays float32."""

    def body(i, h):
        h = h * 0.5 + w * i
        h = h + 1e-3 * (i * i) - 2
        return enp.tanh(h / 3.0) + x[i % x.shape[0]]

    h = egad.fori_loop(0, 7, body, x[0])
    g = egad.fori_loop(0, n, lambda i, g: g * 0.75 + i / 4, h)  # traced bound, counter still weak
    return h, g, enp.sum(g * g) * 0.5


def weak_types_f32_ref(x, w, n):
    h = x[0]
    for i in range(7):
        h = h * 0.5 + w * i
        h = h + 1e-3 * (i * i) - 2
        h = np.tanh(h / 3.0) + x[i % x.shape[0]]
    g = h
    for i in range(int(n)):
        g = g * 0.75 + i / 4
    return h, g, np.sum(g * g) * 0.5


def weak_types_f32_args(rng):
    return (
        _normal(rng, (4, 3), np.float32),
        _normal(rng, (3,), np.float32),
        np.int64(rng.integers(0, 6)),
    )


# --- float32 accumulator started from a Python scalar --------------------------------


def weak_init_f32_fn(xs):
    """Loop state initialised with Python 0.0 and 0 that the body makes float32 (JAX weak init)."""

    def body(i, state):
        total, count = state
        return total + enp.sum(xs[i]) * 0.5, count + 1

    total, count = egad.fori_loop(0, xs.shape[0], body, (0.0, 0))
    return total, count


def weak_init_f32_ref(xs):
    total, count = 0.0, 0  # Python 0.0 + float32 stays float32 under numpy's (NEP 50) rules
    for i in range(xs.shape[0]):
        total, count = total + np.sum(xs[i]) * 0.5, count + 1
    return total, count


def weak_init_f32_args(rng):
    return (_normal(rng, (5, 3), np.float32),)


# --- dict loop state ------------------------------------------------------------------


def dict_state_fn(xs, W, b):
    """fori_loop over a dict state: float recurrence, running max, its argmax step, a counter."""

    def body(i, s):
        h = enp.tanh(xs[i] @ W + s["h"] + b)
        peak = enp.max(h)
        better = peak > s["best"]
        return {
            "h": h,
            "best": enp.maximum(s["best"], peak),
            "best_step": enp.where(better, i, s["best_step"]),
            "steps": s["steps"] + 1,
        }

    init = {
        "h": enp.zeros_like(b),
        "best": enp.full((), -10.0),
        "best_step": enp.zeros((), "int64"),
        "steps": 0,
    }
    return egad.fori_loop(0, xs.shape[0], body, init)


def dict_state_ref(xs, W, b):
    s = {"h": np.zeros_like(b), "best": np.full((), -10.0), "best_step": np.zeros((), np.int64), "steps": 0}
    for i in range(xs.shape[0]):
        h = np.tanh(xs[i] @ W + s["h"] + b)
        peak = np.max(h)
        better = peak > s["best"]
        s = {
            "h": h,
            "best": np.maximum(s["best"], peak),
            "best_step": np.where(better, i, s["best_step"]),
            "steps": s["steps"] + 1,
        }
    return s


def dict_state_args(rng):
    return _normal(rng, (7, 4)), _normal(rng, (4, 4), scale=0.5), _normal(rng, (4,), scale=0.1)


# --- nested tuple/list while state: bisection -----------------------------------------


def bisection_fn(c, interval):
    """Bisection for x**3 + c*x = 1 with state ((x, [lo, hi]), k) until the bracket is tight."""

    def f(x):
        return x**3 + c * x - 1.0

    def cond(state):
        (_, (lo, hi)), k = state
        return enp.logical_and(hi - lo > 1e-6, k < 30)

    def body(state):
        (_, (lo, hi)), k = state
        mid = 0.5 * (lo + hi)
        right = f(mid) * f(lo) > 0
        return (mid, [enp.where(right, mid, lo), enp.where(right, hi, mid)]), k + 1

    lo, hi = interval[0], interval[1]
    return egad.while_loop(cond, body, ((0.5 * (lo + hi), [lo, hi]), 0))


def bisection_ref(c, interval):
    def f(x):
        return x**3 + c * x - 1.0

    lo, hi = interval[0], interval[1]
    x, k = 0.5 * (lo + hi), 0
    while hi - lo > 1e-6 and k < 30:
        mid = 0.5 * (lo + hi)
        right = f(mid) * f(lo) > 0
        x, lo, hi, k = mid, np.where(right, mid, lo), np.where(right, hi, mid), k + 1
    return (x, [lo, hi]), k


def bisection_args(rng):
    # f(0) = -1 < 0 and f(2) = 7 + 2c > 0 for c >= 0: a root is bracketed
    return _uniform(rng, 0.0, 2.0), np.array([0.0, 2.0 + rng.uniform(0, 1)], np.float64)


# --- nested tuple/list while state: heavy-ball descent -------------------------------------


def momentum_descent_fn(A, b, x0):
    """Heavy-ball descent on 0.5 x'Ax - b'x until |grad| is small; state ((x, [velocity, grad]), k)."""

    def cond(state):
        (_, [_, grad]), k = state
        return enp.logical_and(enp.sum(grad * grad) > 1e-6, k < 30)

    def body(state):
        (x, [velocity, grad]), k = state
        velocity = 0.3 * velocity - 0.2 * grad
        x = x + velocity
        return (x, [velocity, A @ x - b]), k + 1

    return egad.while_loop(cond, body, ((x0, [enp.zeros_like(x0), A @ x0 - b]), 0))


def momentum_descent_ref(A, b, x0):
    x, velocity, grad, k = x0, np.zeros_like(x0), A @ x0 - b, 0
    while np.sum(grad * grad) > 1e-6 and k < 30:
        velocity = 0.3 * velocity - 0.2 * grad
        x = x + velocity
        grad, k = A @ x - b, k + 1
    return (x, [velocity, grad]), k


def momentum_descent_args(rng):
    Q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    A = (Q * rng.uniform(1.2, 3.0, 4)) @ Q.T
    return A.astype(np.float64), _normal(rng, (4,)), _normal(rng, (4,))


# --- stop_gradient inside a loop: online log-sum-exp / softmax-weighted sum -----------


def online_softmax_fn(scores, values):
    """Online softmax over chunks with a stop_gradient'ed running max (gradient-neutral shift)."""

    def body(i, state):
        m, denom, acc = state
        row = scores[i]
        m_new = egad.stop_gradient(enp.maximum(m, enp.max(row)))
        rescale = enp.exp(m - m_new)
        p = enp.exp(row - m_new)
        return m_new, denom * rescale + enp.sum(p), acc * rescale + p @ values[i]

    init = (enp.full((), -1e3), enp.zeros(()), enp.zeros_like(values[0][0]))
    m, denom, acc = egad.fori_loop(0, scores.shape[0], body, init)
    return acc / denom, m + enp.log(denom)


def online_softmax_ref(scores, values):
    m, denom, acc = np.full((), -1e3), np.zeros(()), np.zeros_like(values[0][0])
    for i in range(scores.shape[0]):
        row = scores[i]
        m_new = np.maximum(m, np.max(row))
        rescale = np.exp(m - m_new)
        p = np.exp(row - m_new)
        m, denom, acc = m_new, denom * rescale + np.sum(p), acc * rescale + p @ values[i]
    return acc / denom, m + np.log(denom)


def online_softmax_args(rng):
    return _normal(rng, (4, 5), scale=2.0), _normal(rng, (4, 5, 3))


# --- closures over outer traced values ------------------------------------------------


def closure_fn(xs, W, alpha):
    """Loop body closes over values computed outside it (scaled weights, a mean)."""
    W_scaled = W * alpha
    bias = enp.mean(xs, axis=0)

    def body(i, h):
        return enp.tanh(h @ W_scaled + xs[i] - bias)

    return egad.fori_loop(0, xs.shape[0], body, enp.ones_like(bias) * 0.1)


def closure_ref(xs, W, alpha):
    W_scaled = W * alpha
    bias = np.mean(xs, axis=0)
    h = np.ones_like(bias) * 0.1
    for i in range(xs.shape[0]):
        h = np.tanh(h @ W_scaled + xs[i] - bias)
    return h


def closure_args(rng):
    return _normal(rng, (6, 4)), _normal(rng, (4, 4)), _uniform(rng, 0.2, 0.8)


PROGRAMS = [
    CorpusProgram("fori_static", fori_static_fn, fori_static_ref, fori_static_args,
                  differentiable_argnums=(0, 1), tags=("fori", "static-bounds", "traced-index")),
    CorpusProgram("fori_mask_bound", fori_mask_bound_fn, fori_mask_bound_ref, fori_mask_bound_args,
                  differentiable_argnums=(0, 2), tags=("fori", "traced-bounds", "reduction", "astype")),
    CorpusProgram("fori_lo_hi", fori_lo_hi_fn, fori_lo_hi_ref, fori_lo_hi_args,
                  differentiable_argnums=(2, 3),
                  tags=("fori", "traced-bounds", "traced-lower", "int-counter", "zero-trip")),
    CorpusProgram("negative_index", negative_index_fn, negative_index_ref, negative_index_args,
                  differentiable_argnums=(0, 1),
                  tags=("fori", "negative-index", "traced-index", "python-scalar-args", "neg")),
    CorpusProgram("fori_divmod", fori_divmod_fn, fori_divmod_ref, fori_divmod_args,
                  differentiable_argnums=(0, 1), tags=("fori", "floordiv-mod", "int-counter")),
    CorpusProgram("newton_sqrt", newton_sqrt_fn, newton_sqrt_ref, newton_sqrt_args,
                  differentiable_argnums=(0, 1),
                  tags=("while", "newton", "data-dependent-trips", "int-counter", "any")),
    CorpusProgram("while_zero_trip", while_zero_trip_fn, while_zero_trip_ref, while_zero_trip_args,
                  differentiable_argnums=(0,),
                  tags=("while", "zero-trip", "data-dependent-trips", "closure", "all", "logical")),
    CorpusProgram("euler_ode", euler_ode_fn, euler_ode_ref, euler_ode_args,
                  differentiable_argnums=(0, 1, 2),
                  tags=("while", "euler", "state-dependent-stop", "int-counter")),
    CorpusProgram("euler_fixed", euler_fixed_fn, euler_fixed_ref, euler_fixed_args,
                  differentiable_argnums=(0, 1, 2), tags=("fori", "euler", "static-bounds", "traced-index")),
    CorpusProgram("scan_ys", scan_ys_fn, scan_ys_ref, scan_ys_args,
                  differentiable_argnums=(0, 1, 2), tags=("scan", "ys")),
    CorpusProgram("scan_reverse", scan_reverse_fn, scan_reverse_ref, scan_reverse_args,
                  differentiable_argnums=(0, 1, 2), tags=("scan", "reverse", "ys", "pytree-xs")),
    CorpusProgram("scan_pytree", scan_pytree_fn, scan_pytree_ref, scan_pytree_args,
                  differentiable_argnums=(0, 1, 2, 3),
                  tags=("scan", "pytree-xs", "pytree-ys", "pytree-state", "dict")),
    CorpusProgram("scan_no_xs", scan_no_xs_fn, scan_no_xs_ref, scan_no_xs_args,
                  differentiable_argnums=(0, 1), tags=("scan", "no-xs", "length", "ys")),
    CorpusProgram("scan_zero_length", scan_zero_length_fn, scan_zero_length_ref, scan_zero_length_args,
                  differentiable_argnums=(1,), tags=("scan", "zero-length", "no-xs", "fori", "zero-trip")),
    CorpusProgram("weak_types_f32", weak_types_f32_fn, weak_types_f32_ref, weak_types_f32_args,
                  differentiable_argnums=(0, 1), rtol=F32_RTOL,
                  tags=("float32", "weak-type", "fori", "traced-bounds", "floordiv-mod")),
    CorpusProgram("weak_init_f32", weak_init_f32_fn, weak_init_f32_ref, weak_init_f32_args,
                  differentiable_argnums=(0,), rtol=F32_RTOL,
                  tags=("float32", "weak-type", "weak-init", "fori", "int-counter")),
    CorpusProgram("dict_state", dict_state_fn, dict_state_ref, dict_state_args,
                  differentiable_argnums=(0, 1, 2),
                  tags=("fori", "pytree-state", "dict", "where", "int-counter", "reduction")),
    # bisection's outputs move in steps of the final bracket width: no argument is smooth enough for FD
    CorpusProgram("bisection", bisection_fn, bisection_ref, bisection_args,
                  tags=("while", "pytree-state", "nested-tuple-list", "where", "closure", "int-counter")),
    CorpusProgram("momentum_descent", momentum_descent_fn, momentum_descent_ref, momentum_descent_args,
                  differentiable_argnums=(0, 1, 2),
                  tags=("while", "pytree-state", "nested-tuple-list", "data-dependent-trips", "closure",
                        "int-counter")),
    CorpusProgram("online_softmax", online_softmax_fn, online_softmax_ref, online_softmax_args,
                  differentiable_argnums=(0, 1), tags=("fori", "stop-gradient", "softmax", "reduction")),
    CorpusProgram("closure", closure_fn, closure_ref, closure_args,
                  differentiable_argnums=(0, 1, 2), tags=("fori", "closure", "mean")),
]
