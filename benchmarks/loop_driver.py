"""Compiled loops (tvm_bridge, llvm): per-iteration overhead of the loop driver on a
tiny body, 100,000 iterations, and build time of an RNN gradient against T.

    python -m benchmarks.loop_driver        # prints a table, writes results/loop_driver.json
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
from egad.tvm_bridge import build

RESULTS = pathlib.Path(__file__).parent / "results"


def _tiny(x, n):
    return egad.fori_loop(0, n, lambda i, h: h * 0.5 + 1.0, x)


def _rnn(W, xs, h0):
    return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W + h), h0) ** 2)


def main() -> int:
    compiled = build(egad.trace(_tiny, np.zeros(4), 1))
    compiled(np.zeros(4), 10)  # warm-up
    per_iteration = []
    for n in (1_000, 100_000):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            compiled(np.zeros(4), n)
            times.append(time.perf_counter() - start)
        per_iteration.append({"iterations": n, "median_s": statistics.median(times),
                              "us_per_iteration": statistics.median(times) / n * 1e6})
    builds = []
    rng = np.random.default_rng(0)
    for T in (16, 64, 256, 1024):
        W, xs, h0 = rng.standard_normal((8, 8)) * 0.3, rng.standard_normal((T, 4, 8)), np.zeros((4, 8))
        program = egad.value_and_grad(egad.trace(_rnn, W, xs, h0), wrt=(0, 1))
        start = time.perf_counter()
        build(program)
        builds.append({"T": T, "build_s": time.perf_counter() - start})
    print(f"{'iterations':>10} {'median s':>9} {'us/iter':>8}")
    for row in per_iteration:
        print(f"{row['iterations']:>10} {row['median_s']:>9.3f} {row['us_per_iteration']:>8.2f}")
    print(f"\n{'T':>5} {'build s (RNN value+grad)':>25}")
    for row in builds:
        print(f"{row['T']:>5} {row['build_s']:>25.3f}")
    spread = max(r["build_s"] for r in builds) / min(r["build_s"] for r in builds)
    print(f"build time max/min over T: {spread:.2f}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "loop_driver.json"
    out.write_text(json.dumps({"machine": platform.platform(), "per_iteration": per_iteration, "builds": builds,
                               "build_spread": spread}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
