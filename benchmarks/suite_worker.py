"""One configuration (workload, case, system) of the side-by-side suite, measured in a
process of its own so that the parent can cap it and its peak memory is its own.

    python -m benchmarks.suite_worker lstm_lm T16 reference --reference ref.npz --out ref.json
    python -m benchmarks.suite_worker lstm_lm T16 jax-scan --reference ref.npz --out row.json

`reference` computes the reference loss and gradients: egad's numpy interpreter of
the gradient program, in float64, its loss checked against the workload's own numpy
`reference_loss`. Any other system (benchmarks/suite_systems.py) is measured as:

1. compile time: preparing the step and its first call (tracing, differentiating,
   optimizing, building), after the framework itself is imported;
2. the first call's loss and gradients against the reference: relative error <= 1e-3
   (`gradient_error`) or the row is "wrong gradient" and nothing is timed;
3. step time: the median of >= `--min-runs` calls after one warm-up call;
4. for egad, the same for a forward-only build (the gradient-step / forward ratio);
5. peak memory: the process's peak resident set (`ru_maxrss`), total and above what
   it held once the framework, the workload and its arguments were loaded.

The row (JSON) is rewritten after each phase, so a configuration stopped at the cap
still tells how far it got.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import sys
import time
import traceback

import numpy as np

from .suite_systems import INSTALL_HINT, SYSTEMS, import_framework, prepare
from .workload import as_float64, load, wrt_of

TOLERANCE = 1e-3  # relative; issue 6: "gradients are compared ... (relative <= 1e-3)"
# Each gradient array is compared relative to its own norm, but never to less than this
# fraction of the whole gradient's norm: GNMT-lite's attention gradients are ~1e-9 of the
# whole at its initialisation, and float32 rounding alone moves them by ~1e-2 of themselves.
NORM_FLOOR = 1e-6
REFERENCE_AGREEMENT = 1e-6  # float64 egad interpreter against the float64 numpy reference_loss
MIN_RUNS, TIMING_BUDGET_S, MAX_RUNS = 5, 3.0, 50


def gradient_error(value: float, grads, reference_value: float, reference_grads) -> dict:
    """Relative errors of a loss and its gradients against the reference: the loss's
    |v - v_ref| / |v_ref|, and the worst array's |g - g_ref| / max(|g_ref|,
    NORM_FLOOR * |whole reference gradient|) in the 2-norm."""
    if len(grads) != len(reference_grads):
        raise AssertionError(f"{len(grads)} gradients, the reference has {len(reference_grads)}")
    reference_grads = [np.asarray(w, np.float64) for w in reference_grads]
    total = np.sqrt(sum(np.sum(np.square(w)) for w in reference_grads))
    worst, worst_position = 0.0, None
    for position, (got, want) in enumerate(zip(grads, reference_grads)):
        got = np.asarray(got, np.float64)
        if got.shape != want.shape:
            return {"loss error": None, "gradient error": float("inf"), "worst gradient": position,
                    "shape mismatch": f"gradient {position} has shape {got.shape}, the reference {want.shape}"}
        error = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), NORM_FLOOR * total, 1e-300))
        error = error if np.isfinite(error) else float("inf")  # NaN or inf in a gradient: as wrong as it gets
        if worst_position is None or error > worst:
            worst, worst_position = error, position
    loss_error = abs(float(value) - float(reference_value)) / max(abs(float(reference_value)), 1e-30)
    return {"loss error": loss_error if np.isfinite(loss_error) else float("inf"),
            "gradient error": worst, "worst gradient": worst_position}


def within_tolerance(errors: dict) -> bool:
    return (errors.get("loss error") is not None and errors["loss error"] <= TOLERANCE
            and errors["gradient error"] <= TOLERANCE)


def peak_rss_mb() -> float:
    """The process's peak resident set so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_call_seconds(call, min_runs: int = MIN_RUNS) -> tuple[float, int]:
    """(median seconds, number of timed calls) of `call` after one warm-up call: at
    least `min_runs` calls, more while they fit in TIMING_BUDGET_S (at most MAX_RUNS)."""
    call()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_runs or (len(times) < MAX_RUNS and time.perf_counter() - started < TIMING_BUDGET_S):
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), len(times)


class Row(dict):
    """The configuration's record, written to `path` after each phase."""

    def __init__(self, path: pathlib.Path, **fields):
        super().__init__(fields)
        self.path = path

    def save(self, **fields) -> None:
        self.update(fields)
        self["peak rss MB"] = round(peak_rss_mb(), 1)
        if self.get("baseline rss MB") is not None:
            self["peak above baseline MB"] = round(self["peak rss MB"] - self["baseline rss MB"], 1)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self, indent=2, default=str))
        os.replace(partial, self.path)


def measure_reference(module, case: str, args, wrt, reference_path: pathlib.Path, row: Row) -> None:
    import egad

    started = time.perf_counter()
    wide = as_float64(args)
    value, grads = egad.interpret(egad.value_and_grad(egad.trace(module.loss(case), *wide), wrt=wrt), *wide)
    numpy_value = float(module.reference_loss(case)(*wide))
    disagreement = abs(float(value) - numpy_value) / max(abs(numpy_value), 1e-30)
    row.update({"loss": float(value), "numpy loss": numpy_value, "loss error": disagreement,
                "reference s": round(time.perf_counter() - started, 3)})
    if not disagreement <= REFERENCE_AGREEMENT:
        row.save(status="error", message=f"egad's interpreter (float64) gives loss {float(value)!r}, the workload's "
                                         f"numpy reference_loss {numpy_value!r}: no reference to check against")
        return
    np.savez(reference_path, value=np.float64(value), **{f"grad{k}": np.asarray(g) for k, g in enumerate(grads)})
    row.save(status="ok")


def measure_system(system: str, module, case: str, args, wrt, reference_path: pathlib.Path, row: Row,
                   min_runs: int) -> None:
    try:
        row["version"] = import_framework(system)
    except ImportError as error:
        row.save(status="not installed", message=f"{error}; {INSTALL_HINT}")
        return
    with np.load(reference_path) as stored:
        reference_value = float(stored["value"])
        reference_grads = [stored[f"grad{k}"] for k in range(len(wrt))]
    row.save(**{"baseline rss MB": round(peak_rss_mb(), 1)})

    started = time.perf_counter()
    step = prepare(system, module, case, args, wrt)
    result = step()
    row["compile s"] = time.perf_counter() - started
    value, grads = step.to_numpy(result)
    errors = gradient_error(value, grads, reference_value, reference_grads)
    row.update(errors, loss=value)
    if not within_tolerance(errors):
        row.save(status="wrong gradient", message=(
            f"loss error {errors['loss error']:.3g}, gradient error {errors['gradient error']:.3g} (array "
            f"{errors['worst gradient']}) against the reference; tolerance {TOLERANCE}: not timed"))
        return
    row.save()
    seconds, runs = median_call_seconds(step, min_runs)
    row.save(**{"step ms": seconds * 1e3, "step runs": runs})
    if step.forward is not None:
        started = time.perf_counter()
        forward_value = float(np.asarray(step.forward()))
        row["forward compile s"] = time.perf_counter() - started
        forward_error = abs(forward_value - reference_value) / max(abs(reference_value), 1e-30)
        if not forward_error <= TOLERANCE:
            row.save(**{"forward message": f"forward-only loss {forward_value!r} is off the reference "
                                           f"{reference_value!r} by {forward_error:.3g}: not timed"})
        else:
            seconds, runs = median_call_seconds(step.forward, min_runs)
            row.save(**{"forward ms": seconds * 1e3, "forward runs": runs,
                        "gradient/forward": row["step ms"] / (seconds * 1e3)})
    row.save(status="ok", **step.details())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite_worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("case")
    parser.add_argument("system", choices=("reference", *SYSTEMS))
    parser.add_argument("--reference", type=pathlib.Path, required=True, help="the reference .npz (read or written)")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="where the row (JSON) goes")
    parser.add_argument("--min-runs", type=int, default=MIN_RUNS)
    options = parser.parse_args(argv)
    row = Row(options.out, workload=options.workload, case=options.case, system=options.system, status="running")
    try:
        module = load(options.workload)
        args = module.arguments(options.case)
        wrt = wrt_of(module, options.case)
        if options.system == "reference":
            measure_reference(module, options.case, args, wrt, options.reference, row)
        else:
            measure_system(options.system, module, options.case, args, wrt, options.reference, row, options.min_runs)
    except NotImplementedError as error:
        row.save(status="unsupported", message=str(error) or "NotImplementedError")
    except Exception as error:  # noqa: BLE001 - a peer's failure is a result to record, not a crash
        row.save(status="error", message=f"{type(error).__name__}: {error}"[:2000],
                 traceback=traceback.format_exc()[-4000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
