"""Tracing time and the reference interpreter's overhead against plain numpy.

The interpreter is the semantic oracle, not the fast path (that is the TVM
lowering), but every test runs through it, so its per-iteration overhead matters.
Measures, side by side in one run, a tanh RNN (B=32, I=128, H=256) over T steps:
trace time, `egad.interpret` time, and the same loop in plain numpy.

    python -m benchmarks.interp_overhead        # prints a table, writes results/interp_overhead.json
"""
from __future__ import annotations

import json
import pathlib
import platform
import statistics
import time

import numpy as np

import egad
import egad.numpy as enp

B, I, H = 32, 128, 256
REPEATS = 5
RESULTS = pathlib.Path(__file__).parent / "results"


def rnn_loss(W, U, xs, h0):
    def step(t, h):
        return enp.tanh(xs[t] @ U + h @ W)

    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)


def rnn_loss_numpy(W, U, xs, h0):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ U + h @ W)
    return np.sum(h ** 2)


def median_seconds(fn, repeats: int = REPEATS) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    U = (rng.standard_normal((I, H)) / np.sqrt(I)).astype(np.float32)
    h0 = np.zeros((B, H), np.float32)
    rows = []
    for T in (16, 256):
        xs = rng.standard_normal((T, B, I)).astype(np.float32)
        trace_s = median_seconds(lambda: egad.trace(rnn_loss, W, U, egad.Spec(("T", B, I), "float32"), h0))
        program = egad.trace(rnn_loss, W, U, egad.Spec(("T", B, I), "float32"), h0)
        interp_s = median_seconds(lambda: egad.interpret(program, W, U, xs, h0))
        numpy_s = median_seconds(lambda: rnn_loss_numpy(W, U, xs, h0))
        np.testing.assert_allclose(egad.interpret(program, W, U, xs, h0), rnn_loss_numpy(W, U, xs, h0), rtol=1e-4)
        rows.append({"T": T, "trace_ms": trace_s * 1e3, "interpret_ms": interp_s * 1e3, "numpy_ms": numpy_s * 1e3,
                     "interpret_over_numpy": interp_s / numpy_s,
                     "overhead_us_per_step": (interp_s - numpy_s) / T * 1e6})
    print(f"{'T':>5} {'trace ms':>9} {'interpret ms':>13} {'numpy ms':>9} {'ratio':>6} {'overhead us/step':>17}")
    for r in rows:
        print(f"{r['T']:>5} {r['trace_ms']:>9.2f} {r['interpret_ms']:>13.2f} {r['numpy_ms']:>9.2f} "
              f"{r['interpret_over_numpy']:>6.2f} {r['overhead_us_per_step']:>17.1f}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "interp_overhead.json"
    out.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                               "numpy": np.__version__, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
