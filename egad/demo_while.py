"""The smaller demo (`egad demo --while-loop`): trace an RNN language-model step that
runs a data-dependent `while_loop`, print its IR, interpret it against the same
math in plain numpy, and differentiate it — through the while loop, which JAX
refuses to do in reverse mode — checking the gradient against finite differences.

The RNN reads tokens until it has consumed a sequence's length (data) or its hidden
state saturates (a norm threshold, also data) — a trip count no framework can know
at compile time.
"""
from __future__ import annotations

import time

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp

VOCAB, EMBED, HIDDEN, BATCH, MAX_LEN = 32, 16, 24, 4, 12
SATURATION = 0.9  # stop early once the mean |h| exceeds this


def rnn_loss(params, tokens, length):
    """Mean next-token cross-entropy of a tanh RNN run for a data-dependent number of steps."""
    E, W, U, b, V = params["E"], params["W"], params["U"], params["b"], params["V"]

    def keep_going(state):
        t, h, loss = state
        return enp.logical_and(t < length, enp.mean(enp.abs(h)) < SATURATION)

    def step(state):
        t, h, loss = state
        x = E[tokens[t]]                                 # (BATCH, EMBED) token gather
        h = enp.tanh(x @ U + h @ W + b)
        logits = h @ V
        targets = enn.one_hot(tokens[t + 1], VOCAB, dtype=W.dtype)
        loss = loss - enp.sum(targets * enn.log_softmax(logits)) / BATCH
        return t + 1, h, loss

    h0 = enp.zeros((BATCH, HIDDEN), dtype=W.dtype)
    steps, h, total = egad.while_loop(keep_going, step, (0, h0, enp.zeros((), W.dtype)))
    return total / enp.maximum(steps, 1), steps


def rnn_loss_reference(params, tokens, length):
    """The same math in plain Python + numpy: the oracle the interpreter must match."""
    E, W, U, b, V = params["E"], params["W"], params["U"], params["b"], params["V"]
    t, h, total = 0, np.zeros((BATCH, HIDDEN), "float32"), np.float32(0)
    while t < length and np.mean(np.abs(h)) < SATURATION:
        h = np.tanh(E[tokens[t]] @ U + h @ W + b)
        logits = h @ V
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        total = total - log_probs[np.arange(BATCH), tokens[t + 1]].sum() / BATCH
        t += 1
    return total / max(t, 1), t


def make_inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    scale = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype("float32")  # noqa: E731
    params = {"E": scale(VOCAB, EMBED), "W": scale(HIDDEN, HIDDEN), "U": scale(EMBED, HIDDEN),
              "b": np.zeros(HIDDEN, "float32"), "V": scale(HIDDEN, VOCAB)}
    tokens = rng.integers(0, VOCAB, size=(MAX_LEN + 1, BATCH)).astype("int64")
    return params, tokens


def main() -> int:
    params, tokens = make_inputs()
    print("egad demo: an RNN run by a data-dependent while_loop\n")
    started = time.perf_counter()
    program = egad.trace(rnn_loss, params, tokens, np.int64(MAX_LEN))
    traced_ms = (time.perf_counter() - started) * 1e3
    print(program)
    print(f"\ntraced in {traced_ms:.1f} ms\n")
    print(f"{'length':>6}  {'steps':>5}  {'egad loss':>12}  {'numpy loss':>12}  {'|diff|':>9}")
    worst = 0.0
    for length in (0, 3, MAX_LEN):
        loss, steps = egad.interpret(program, params, tokens, np.int64(length))
        ref_loss, ref_steps = rnn_loss_reference(params, tokens, length)
        diff = abs(float(loss) - float(ref_loss))
        worst = max(worst, diff)
        assert int(steps) == ref_steps, (steps, ref_steps)
        print(f"{length:>6}  {int(steps):>5}  {float(loss):>12.6f}  {float(ref_loss):>12.6f}  {diff:>9.2e}")
    ok = worst <= 1e-5
    print("\ninterpreter matches plain numpy" if ok else "\nMISMATCH against plain numpy")
    return 0 if ok and check_gradient(params, tokens) else 1


def check_gradient(params, tokens) -> bool:
    """d loss / d params through the while loop, against central differences (float64)."""
    params64 = {k: v.astype(np.float64) for k, v in params.items()}
    program64 = egad.trace(rnn_loss, params64, tokens, np.int64(MAX_LEN))
    started = time.perf_counter()
    grad64 = egad.grad(program64, wrt=0, has_aux=True)
    grad_ms = (time.perf_counter() - started) * 1e3
    stats = egad.RunStats()
    grads, steps = egad.interpret(grad64, params64, tokens, np.int64(MAX_LEN), stats=stats)
    print(f"\ngradient program built in {grad_ms:.1f} ms: the adjoint of the while loop is a reversed for loop "
          f"over its {int(steps)} trips; peak tape {stats.peak_tape_bytes} bytes")
    rng = np.random.default_rng(1)
    worst, eps = 0.0, 1e-6
    print(f"{'param':>6}  {'entry':>8}  {'egad grad':>12}  {'finite diff':>12}")
    for name in ("W", "U", "E"):
        for _ in range(2):
            index = tuple(int(rng.integers(0, n)) for n in params64[name].shape)
            values = []
            for sign in (1, -1):
                shifted = {k: v.copy() for k, v in params64.items()}
                shifted[name][index] += sign * eps
                values.append(float(egad.interpret(program64, shifted, tokens, np.int64(MAX_LEN))[0]))
            numeric = (values[0] - values[1]) / (2 * eps)
            exact = float(grads[name][index])
            worst = max(worst, abs(exact - numeric) / max(abs(numeric), 1e-3))
            print(f"{name:>6}  {str(index):>8}  {exact:>12.6f}  {numeric:>12.6f}")
    ok = worst <= 1e-5
    print("gradient matches finite differences" if ok else "GRADIENT MISMATCH")
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
