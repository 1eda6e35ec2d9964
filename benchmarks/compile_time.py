"""Compile time of an LSTM loss + gradient (benchmarks/lstm.py) against T: the loop
written with `egad.fori_loop` next to the same program unrolled by a Python `for`
loop (T copies of the cell in the IR).

Both are traced with concrete xs of length T (a static length, so the comparison is
fair: the loop version could also be traced once for every T with egad.Spec).
Compile time = trace + `egad.value_and_grad` + `tvm_bridge.build` (lower to Relax,
`tvm.compile`). Each build runs in a fresh subprocess with the build cache off
(EGAD_DISK_CACHE=0, and a new process has an empty memory cache), after one
warm-up build of a tiny loop there (first-use costs of LLVM and TVM's passes).
Target: the loop's compile time does not grow with T (max/min over T of the
medians of 3 <= 1.2; the same for the fastest of 3, which other jobs on a shared
machine disturb less, is printed beside it).
The unrolled build grows at least linearly with T; it is measured while its
predicted time stays within UNROLLED_BUDGET_S (linear growth from one measured
point, a power law through the last two) and extrapolated beyond, marked so.

    python -m benchmarks.compile_time        # prints a table, writes results/compile_time.json
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import egad
from benchmarks import lstm
from egad.tvm_bridge import build

RESULTS = pathlib.Path(__file__).parent / "results"
LENGTHS = (16, 64, 256, 1024)
UNROLLED_BUDGET_S = 300  # two built points fit the power law; with the CPU schedules T=64 takes ~3.5 min
LOOP_REPEATS = 3  # the unrolled builds run once each: they take minutes
TARGET_SPREAD = 1.2
LOSSES = {"loop": lstm.loop_loss, "unrolled": lstm.unrolled_loss}


# --- the child: one warm-up build, then the measured one ------------------------------------


def _tiny_loop(x, n):
    return egad.fori_loop(0, n, lambda i, h: h * 0.5 + 1.0, x)


def compile_seconds(loss, T: int) -> dict:
    """Seconds to trace, differentiate and build `loss` on a length-T sequence."""
    args = lstm.arguments(T)
    started = time.perf_counter()
    program = egad.trace(loss, *args)
    traced = time.perf_counter()
    gradient = egad.value_and_grad(program, wrt=lstm.WRT)
    differentiated = time.perf_counter()
    build(gradient)
    built = time.perf_counter()
    return {"trace_s": traced - started, "differentiate_s": differentiated - traced,
            "build_s": built - differentiated, "total_s": built - started}


def child(kind: str, T: int) -> dict:
    build(egad.trace(_tiny_loop, np.zeros(4, np.float32), 1))
    return compile_seconds(LOSSES[kind], T)


def run_child(kind: str, T: int) -> dict:
    """One build in a fresh interpreter with no build cache; its JSON is the last line it prints."""
    environment = {**os.environ, "EGAD_DISK_CACHE": "0"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.compile_time", "--child", kind, str(T)],
                          capture_output=True, text=True, check=True, env=environment)
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the parent: the table ------------------------------------------------------------------


def median_compile(kind: str, T: int, repeats: int) -> dict:
    runs = [run_child(kind, T) for _ in range(repeats)]
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    # the fastest run too: on a shared machine other jobs only ever add time
    return {**medians, "fastest_total_s": min(run["total_s"] for run in runs)}


def extrapolate(measured: list[tuple[int, float]], T: int) -> float:
    """Power law through the last two (T, seconds) points, evaluated at T (linear
    growth from a single point; nothing measured predicts 0)."""
    if not measured:
        return 0.0
    if len(measured) == 1:
        (t1, s1), = measured
        return s1 * T / t1
    (t1, s1), (t2, s2) = measured[-2:]
    exponent = math.log(s2 / s1) / math.log(t2 / t1)
    return s2 * (T / t2) ** exponent


def print_table(rows: list[dict], spread: float, fastest_spread: float):
    print(f"\nLSTM loss + gradient wrt (Wx, Wh, b), B={lstm.B} I={lstm.I} H={lstm.H} float32, static T")
    print(f"{'T':>5} {'loop trace s':>13} {'loop AD s':>10} {'loop build s':>13} {'loop total s':>13} "
          f"{'unrolled total s':>17}")
    for r in rows:
        loop, unrolled = r["loop"], r["unrolled"]["total_s"]
        note = " (extrapolated, not built)" if r["unrolled_extrapolated"] else ""
        print(f"{r['T']:>5} {loop['trace_s']:>13.3f} {loop['differentiate_s']:>10.3f} {loop['build_s']:>13.2f} "
              f"{loop['total_s']:>13.2f} {unrolled:>17.1f}{note}")
    print(f"loop compile time max/min over T: {spread:.2f} (target <= {TARGET_SPREAD}); "
          f"loop: median of {LOOP_REPEATS}, unrolled: one build each, built while predicted <= {UNROLLED_BUDGET_S} s")
    print(f"loop compile time max/min over T of the fastest of {LOOP_REPEATS}: {fastest_spread:.2f}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1], int(argv[2]))))
        return 0
    run_child("loop", LENGTHS[0])  # discarded: the first child also pays for cold file caches
    rows, unrolled_measured = [], []
    for T in LENGTHS:
        row = {"T": T, "loop": median_compile("loop", T, LOOP_REPEATS)}
        if extrapolate(unrolled_measured, T) <= UNROLLED_BUDGET_S:
            row["unrolled"] = run_child("unrolled", T)
            row["unrolled_extrapolated"] = False
            unrolled_measured.append((T, row["unrolled"]["total_s"]))
        else:
            row["unrolled"] = {"total_s": extrapolate(unrolled_measured, T)}
            row["unrolled_extrapolated"] = True
        rows.append(row)
        print(f"T={T}: loop {row['loop']['total_s']:.2f} s, unrolled {row['unrolled']['total_s']:.2f} s", flush=True)
    loop_totals = [r["loop"]["total_s"] for r in rows]
    spread = max(loop_totals) / min(loop_totals)
    fastest = [r["loop"]["fastest_total_s"] for r in rows]
    fastest_spread = max(fastest) / min(fastest)
    print_table(rows, spread, fastest_spread)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "compile_time.json"
    out.write_text(json.dumps({"machine": platform.platform(), "sizes": {"B": lstm.B, "I": lstm.I, "H": lstm.H},
                               "loop_repeats": LOOP_REPEATS, "rows": rows, "loop_spread": spread,
                               "loop_fastest_spread": fastest_spread,
                               "target_spread": TARGET_SPREAD}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
