"""Calibrate the cost model's CPU constants (egad/cost_model.py, TARGETS["cpu"]) on
this machine, from compiled loops (so every figure includes what a kernel costs
inside a loop body: the Relax VM's call, allocation and checks):

- dispatch: the slope of time per iteration against the number of small,
  dependent matmuls in the body ((32, 64) @ (64, 64): scheduled in parallel, so it
  pays the thread pool's fork/join), less their work; the slope for 1x1 matmuls
  (serial, no work) is printed beside it;
- flops per second: matmuls of the sizes an RNN runs per step (32 rows), in a loop,
  and the same matmuls on 2048 rows (a batched projection): the two rates give the
  peak rate and `matmul_half_rows`, the rows at which a matmul runs at half of it;
- bytes per second: an elementwise kernel over 256k float32, in a loop;
- tape push seconds: the time of a tape push per value beyond what the model prices
  as its dispatch and bytes, through the runtime functions the VM calls (a body's
  pushes go in one `egad.tape_push_all`, its pops in one `egad.tape_pop_all`): 9
  tapes of 32x256 float32 rows (an LSTM step's residuals), 64 trips. A pop is printed
  beside it (the model prices it as a dispatch and its bytes);
- stacked output seconds: a loop's fixed host cost per stacked output (a scan's ys,
  the rows rules/batching.py stacks for a product after the loop), per run of the loop.

It prints the measured values beside the model's and writes
results/calibrate.json. The constants in cost_model.py are copied from a run of this
benchmark (the date and machine are in the comment there).

    python -m benchmarks.calibrate
"""
from __future__ import annotations

import os

os.environ.setdefault("EGAD_DISK_CACHE", "0")

import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import tvm  # noqa: E402

import egad  # noqa: E402
import egad.numpy as enp  # noqa: E402
from egad.cost_model import TARGETS  # noqa: E402
from egad.tvm_bridge import build  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
TRIPS = 200
RNG = np.random.default_rng(0)


def per_iteration(body, h0, *invariants, trips: int = TRIPS) -> float:
    """Median seconds per iteration of `h = body(h, *invariants)` run `trips` times."""
    def loop(h, *c):
        return egad.fori_loop(0, trips, lambda t, state: body(state, *c), h)

    return call_seconds(loop, (h0, *invariants), calls=7) / trips


def call_seconds(fn, args, calls: int) -> float:
    """Median seconds of a call of `fn` built on its own (egad.tvm_bridge.build), on TVM
    tensors made beforehand, after one warm-up call."""
    compiled = build(egad.trace(fn, *args))
    tensors = [tvm.runtime.tensor(a, tvm.cpu()) for a in args]
    compiled(*tensors)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        compiled(*tensors)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def f32(*shape, scale=0.05):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def chain(k):
    def body(h, w):
        for _ in range(k):
            h = h @ w
        return h
    return body


TAPE_ROW = (32, 256)  # an LSTM step's residual, float32
TAPE_ROW_BYTES = 4 * TAPE_ROW[0] * TAPE_ROW[1]


def tape_seconds(values: int = 9, trips: int = 64) -> tuple[float, float]:
    """Median host seconds of one push and of one pop of a `TAPE_ROW`, per value (copy
    included)."""
    push_all, pop_all = tvm.get_global_func("egad.tape_push_all"), tvm.get_global_func("egad.tape_pop_all")
    alloc = tvm.get_global_func("egad.tape_alloc")
    rows = [tvm.runtime.tensor(f32(*TAPE_ROW), tvm.cpu()) for _ in range(values)]
    pushes, pops = [], []
    for _ in range(7):
        handles = [alloc() for _ in range(values)]
        start = time.perf_counter()
        for _ in range(trips):
            push_all(*handles, *rows)
        middle = time.perf_counter()
        for _ in range(trips):
            pop_all(*handles)
        end = time.perf_counter()
        pushes.append((middle - start) / (trips * values))
        pops.append((end - middle) / (trips * values))
    return statistics.median(pushes), statistics.median(pops)


def stacked_output_seconds(dispatch: float) -> float:
    """A loop's fixed host cost per stacked output (a scan's ys): its buffer set up and
    handed back, once per run of the loop. The slope of a one-trip scan's call time
    over its number of outputs, less what the model prices already for each: the
    body's kernel making it, the trip's row copy, the sum reading it after the loop
    (a dispatch each)."""
    counts = (1, 4, 7)
    seconds = []
    for count in counts:
        def loop(h0, xs, count=count):
            def step(h, row):
                return h + row, tuple(h * (j + 1.0) for j in range(count))
            h, ys = egad.scan(step, h0, xs)
            return h + sum(enp.sum(y) for y in ys)

        seconds.append(call_seconds(loop, (f32(4), f32(1, 4)), calls=301))
    return float(np.polyfit(counts, seconds, 1)[0]) - 3 * dispatch


def main() -> int:
    one = np.ones((1, 1), np.float32)
    kernels = (1, 5, 9)
    times = [per_iteration(chain(k), one, one) for k in kernels]
    tiny = float(np.polyfit(kernels, times, 1)[0])
    # a small kernel big enough to be scheduled in parallel pays the thread pool's fork/join
    small = [per_iteration(chain(k), f32(32, 64), f32(64, 64, scale=0.1)) for k in kernels]
    parallel = float(np.polyfit(kernels, small, 1)[0])

    def matmul_rate(rows: int) -> float:
        rates = []
        for k, n in [(256, 256), (256, 1024), (128, 1024)]:
            trips = max(TRIPS * 32 // rows, 8)
            seconds = per_iteration(lambda h, w, back: (h @ w) @ back, f32(rows, k), f32(k, n), f32(n, k),
                                    trips=trips) - times[0]
            rates.append(2 * 2 * rows * k * n / seconds)  # two matmuls per iteration
        return statistics.median(rates)

    step_rate, batched_rate = matmul_rate(32), matmul_rate(2048)
    # rate(m) = peak * m / (m + half): two rates give both
    ratio = step_rate / batched_rate
    half_rows = max(2048 * 32 * (1 - ratio) / (2048 * ratio - 32), 0.0)
    flops = batched_rate * (2048 + half_rows) / 2048

    n = 256 * 1024
    seconds = per_iteration(lambda h: h * 0.5 + 1.0, f32(n)) - times[0] + tiny
    bandwidth = 2 * 4 * n / seconds

    dispatch = parallel - 2 * 32 * 64 * 64 / step_rate  # the small kernels have 32 rows
    model = TARGETS["cpu"]
    push, pop = tape_seconds()
    stacked = stacked_output_seconds(dispatch)
    tape_push = push - (dispatch + 2 * TAPE_ROW_BYTES / bandwidth)  # beyond its price as an op, at the rates here
    modelled = model.dispatch_seconds + 2 * TAPE_ROW_BYTES / model.bytes_per_second
    print(f"a tape push costs {push * 1e6:.1f} us a value, a pop {pop * 1e6:.1f} us (32x256 float32); "
          f"the model prices each at {modelled * 1e6:.1f} us plus {model.tape_push_seconds * 1e6:.1f} us a push")
    print(f"a tiny serial kernel costs {tiny * 1e6:.2f} us in a loop; a small parallel one {parallel * 1e6:.2f} us")
    print(f"matmuls run at {step_rate / 1e9:.0f} GFlop/s on 32 rows, {batched_rate / 1e9:.0f} on 2048")
    rows = [("dispatch seconds (per kernel in a loop)", dispatch, model.dispatch_seconds),
            ("flops per second (matmul peak)", flops, model.flops_per_second),
            ("matmul half rows", half_rows, model.matmul_half_rows),
            ("bytes per second (elementwise)", bandwidth, model.bytes_per_second),
            ("tape push seconds (beyond dispatch, bytes)", tape_push, model.tape_push_seconds),
            ("stacked output seconds (per loop run)", stacked, model.stacked_output_seconds)]
    print(f"{'constant':42s} {'measured':>12s} {'cost model':>12s}")
    for name, measured, modelled in rows:
        print(f"{name:42s} {measured:12.4g} {modelled:12.4g}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "calibrate.json"
    out.write_text(json.dumps({"machine": platform.platform(), "processor": platform.processor(),
                               "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                               "measured": {"dispatch_seconds": dispatch, "flops_per_second": flops,
                                            "matmul_half_rows": half_rows, "bytes_per_second": bandwidth,
                                            "matmul_flops_per_second_32_rows": step_rate,
                                            "matmul_flops_per_second_2048_rows": batched_rate,
                                            "tape_push_seconds": tape_push, "tape_push_seconds_whole": push,
                                            "tape_pop_seconds_whole": pop, "stacked_output_seconds": stacked},
                               "model": {"dispatch_seconds": model.dispatch_seconds,
                                         "flops_per_second": model.flops_per_second,
                                         "matmul_half_rows": model.matmul_half_rows,
                                         "bytes_per_second": model.bytes_per_second,
                                         "tape_push_seconds": model.tape_push_seconds,
                                         "stacked_output_seconds": model.stacked_output_seconds}}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
