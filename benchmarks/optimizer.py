"""What the e-graph optimizer gains (issue 5, item 6), side by side in one run:

- lstm: `benchmarks/lstm_lm.py` (gate by gate, B=32, I=128, H=256, T=64, float32),
  loss and gradients with respect to every weight: `egad.optimize` with the default
  rule families against `rules=()` (target: >= 1.5x faster);
- gnmt: `benchmarks/gnmt_lite.py`, config `small`, one training step's loss and
  gradients (target: >= 1.3x faster);
- unroll: an explicit Euler solve of 1000 fixed steps over 16 states, the small-bodied
  loop `rules/unroll.py`'s `unroll-by-k` is for, as written and its loss's gradient:
  default rules against `rules=()` and against the default families without `unroll`
  (no target in the issue: what the family buys, and that the cost model picks it);
- corpus: every corpus gradient program (tests/programs) with default rules against
  `rules=()` (target: none more than 1.05x slower; one measured slower is timed
  again over three times the rounds, and that is what counts), and the time to
  optimize and build each one (target: median <= 5 s);
- saturation: the time the e-graph takes to saturate under the default families,
  without a time limit, on the LSTM's (T=6) and GNMT-tiny's loss and gradients
  (`egad rules stats`' workloads), and how much of it the rules took (egglog's search
  and apply, the loop transformers) against the analyses and snapshots around them;
  `egad.optimize` stops saturating at `optimizer.DEFAULT_SECONDS`;
- ranking: alternative extractions of the LSTM (rule families switched off, crossed
  with checkpointing policies of one to three levels), the cost model's predicted
  time against the measured time: the Spearman rank correlation (target: >= 0.8,
  over alternatives spanning >= 1.5x in time);
- profile: where the lstm section's step time goes, with default rules and with
  `rules=()` (`Optimized.profile`: each kernel, loop driver and VM builtin by self
  time, in main or the loop it ran in).

Step times are medians of interleaved rounds (benchmarks/timing.py: 21 for the lstm,
gnmt and corpus sections, 7 elsewhere) of calls as a user makes them (numpy in, numpy
out). Every optimized result is checked against `rules=()` before it is timed. Builds
go through the memory cache only (EGAD_DISK_CACHE=0), so "optimize + build" is a real
build.

    python -m benchmarks.optimizer                    # all sections
    python -m benchmarks.optimizer lstm ranking       # some of them
    python -m benchmarks.optimizer unroll
    python -m benchmarks.optimizer lstm gnmt --target=cuda   # the two workloads on a GPU

`--target` (an egad target name, default llvm) builds the lstm, gnmt and profile
sections for that device; the corpus and ranking sections (the CPU cost model's) stay
on the CPU.
"""
from __future__ import annotations

import os

os.environ.setdefault("EGAD_DISK_CACHE", "0")
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import dataclasses  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import egad  # noqa: E402
import egad.numpy as enp  # noqa: E402
from egad import rules  # noqa: E402
from egad.pytree import flatten  # noqa: E402

from . import gnmt_lite, lstm_lm  # noqa: E402
from .closeness import largest_relative_error  # noqa: E402
from .timing import interleaved_seconds, median_seconds  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
TARGETS = {"lstm": 1.5, "gnmt": 1.3, "corpus_slowdown": 1.05, "optimize_build_s": 5.0, "spearman": 0.8}
ROUNDS = 7
# the lstm and gnmt sections: a call takes 30-150 ms, so a round is one call a side, and on a
# shared 2-core machine a few rounds of load on one side moved a median of 7 (1.02x printed once
# for a build measured at 1.5-1.7x before and after in the same session)
STEP_ROUNDS = 21
CORPUS_ROUNDS = 21  # corpus calls take about a millisecond: more rounds for a steadier median
# a corpus program measured slower than the target allows is timed again over this many times the
# rounds before it counts: one 21-round pass printed 0.77x for loop_in_branch, whose rewrite
# (add-neg, a hoisted factor) changes almost nothing, and 40 passes of 9 rounds gave it 1.003x
RETIME_ROUNDS_FACTOR = 3


def _check_close(got, want, context: str, rtol: float = 1e-3) -> float:
    """The largest relative error of `got` against `want` (each leaf scaled by its own
    size); raises when above `rtol`, so nothing wrong is ever timed."""
    worst = largest_relative_error(flatten(got)[0], flatten(want)[0])
    if not worst <= rtol:  # NaN fails too
        raise AssertionError(f"{context}: optimized results differ from rules=() by {worst:.3g} (relative)")
    return worst


def _side_by_side(name: str, program, wrt, args, target_ratio: float, rounds: int = ROUNDS,
                  target: str = "llvm", retime_below: float | None = None) -> dict:
    """One workload built with default rules and with `rules=()`, checked against each
    other, then timed interleaved over `rounds`. `retime_below`: a rewritten program
    measured slower than this speed-up is timed again over RETIME_ROUNDS_FACTOR times
    the rounds, and that longer measurement is the one reported ("first speed-up" keeps
    the first)."""
    started = time.perf_counter()
    optimized = egad.optimize(program, wrt=wrt, target=target)
    optimized_result = optimized(*args)
    optimize_seconds = time.perf_counter() - started
    started = time.perf_counter()
    plain = egad.optimize(program, wrt=wrt, target=target, rules=())
    plain_result = plain(*args)
    plain_seconds = time.perf_counter() - started
    error = _check_close(optimized_result, plain_result, name)
    calls = {"rules=()": lambda: plain(*args), "default": lambda: optimized(*args)}
    per_round = interleaved_seconds(calls, rounds)
    (optimization,) = optimized.optimizations
    # nothing rewritten built (a fallback to the original, or an extraction with no rule's node):
    # the two builds do the same work, and a measured difference is the machine's noise
    same_program = optimization.fallback is not None or not optimization.chosen
    times = _medians(per_round)
    first_speed_up = None
    if retime_below is not None and not same_program and times["rules=()"] / times["default"] < retime_below:
        first_speed_up = times["rules=()"] / times["default"]
        per_round = interleaved_seconds(calls, RETIME_ROUNDS_FACTOR * rounds)
        times = _medians(per_round)
    each_round = [plain_s / default_s for plain_s, default_s in zip(per_round["rules=()"], per_round["default"])]
    quartiles = statistics.quantiles(each_round, n=4) if len(each_round) > 1 else each_round * 3
    return {"workload": name, "rules=() ms": times["rules=()"] * 1e3, "default ms": times["default"] * 1e3,
            "speed-up": times["rules=()"] / times["default"], "target": target_ratio,
            # the spread the median hides: each round's two sides ran one after the other
            "round speed-up quartiles": quartiles,
            "rounds": len(each_round), "first speed-up": first_speed_up, "same program": same_program,
            "optimize+build s": optimize_seconds, "build only s": plain_seconds, "relative error": error,
            "fallback": optimization.fallback, "rules extracted": dict(optimization.chosen),
            "predicted speed-up": optimization.predicted_before.seconds / optimization.predicted_after.seconds}


def _medians(per_round: dict) -> dict:
    """Each side's median over its rounds."""
    return {side: statistics.median(seconds) for side, seconds in per_round.items()}


def lstm_workload(T: int = 64) -> tuple:
    """(name, traced loss, wrt, arguments) of the lstm section."""
    args = lstm_lm.arguments(T)
    return f"lstm_lm T={T}", egad.trace(lstm_lm.loss, *args), lstm_lm.WRT, args


def gnmt_workload(config: str = "small") -> tuple:
    """(name, traced loss, wrt, arguments) of the gnmt section."""
    params = gnmt_lite.init_params(config)
    src, tgt = gnmt_lite.make_batch(config)
    return f"gnmt_lite {config}", egad.trace(gnmt_lite.loss, params, src, tgt), (0,), (params, src, tgt)


def lstm_section(T: int = 64, target: str = "llvm") -> list[dict]:
    return [_side_by_side(*lstm_workload(T), TARGETS["lstm"], STEP_ROUNDS, target)]


def gnmt_section(config: str = "small", target: str = "llvm") -> list[dict]:
    return [_side_by_side(*gnmt_workload(config), TARGETS["gnmt"], STEP_ROUNDS, target)]


EULER_STEPS, EULER_STATES = 1000, 16


def fixed_step_euler(y0, rate, amp):
    """y' = amp sin(t) - rate y by explicit Euler, EULER_STEPS steps of 0.01: a loop
    whose trip is a handful of elementwise ops on a few numbers."""
    def step(i, state):
        t, y = state
        return t + 0.01, y + 0.01 * (amp * enp.sin(t) - rate * y)

    _, y = egad.fori_loop(0, EULER_STEPS, step, (enp.zeros_like(y0), y0))
    return enp.sum(y * y)


def unroll_section() -> list[dict]:
    args = tuple(np.random.default_rng(0).standard_normal(EULER_STATES) for _ in range(3))
    program = egad.trace(fixed_step_euler, *args)
    without_unroll = [f for f in rules.default() if f.name != "unroll"]
    rows = []
    for name, wrt in ((f"euler T={EULER_STEPS}", None), (f"euler T={EULER_STEPS} grad", (1, 2))):
        row = _side_by_side(name, program, wrt, args, 1 / TARGETS["corpus_slowdown"])
        optimized = egad.optimize(program, wrt=wrt)
        others = egad.optimize(program, wrt=wrt, rules=without_unroll)
        _check_close(optimized(*args), others(*args), name)
        times = median_seconds({"without": lambda: others(*args), "default": lambda: optimized(*args)}, ROUNDS)
        row["without unroll ms"] = times["without"] * 1e3
        row["speed-up over no unroll"] = times["without"] / times["default"]
        rows.append(row)
    return rows


def corpus_workload(program) -> tuple:
    """(name, traced loss, wrt, arguments) of a corpus program (tests/programs) in the
    corpus section: its first output's scalar loss, on float64 arguments."""
    from tests.ad.gradcheck import scalar_loss, to_float64

    args = to_float64(program.make_args(np.random.default_rng(1)))
    traced = egad.trace(scalar_loss(program.fn, 0), *args, static_argnums=program.static_argnums)
    return program.name, traced, program.differentiable_argnums, args


def corpus_section() -> list[dict]:
    from tests.programs import all_programs

    rows, slowest = [], 1 / TARGETS["corpus_slowdown"]
    for program in all_programs():
        if not program.differentiable_argnums:
            continue
        row = _side_by_side(*corpus_workload(program), slowest, CORPUS_ROUNDS, retime_below=slowest)
        rows.append(row)
        retimed = "" if row["first speed-up"] is None else (
            f" (first {row['first speed-up']:.2f}x, timed again over {RETIME_ROUNDS_FACTOR * CORPUS_ROUNDS} rounds)")
        print(f"  {program.name:24s} {row['speed-up']:5.2f}x{retimed}  optimize+build {row['optimize+build s']:.2f} s",
              flush=True)
    return rows


SATURATION_WORKLOADS = ("lstm", "gnmt-tiny")
SATURATION_REPEATS = 3


def saturation_section() -> list[dict]:
    from egad.egraph import Limits, encode, saturate
    from egad.optimizer import DEFAULT_SECONDS
    from egad.rule_programs import optimized_cases, workload_cases

    rows = []
    for workload in SATURATION_WORKLOADS:
        for case in optimized_cases(workload_cases(workload)):
            reports = [saturate(encode(case.program), families=[f.name for f in rules.default()],
                                limits=Limits(seconds=600)) for _ in range(SATURATION_REPEATS)]
            report = sorted(reports, key=lambda r: r.seconds)[len(reports) // 2]
            rows.append({"workload": case.name, "stopped by": report.stopped_by, "rounds": report.rounds,
                         "e-nodes": report.nodes, "saturate s": report.seconds,
                         "in rules s": sum(report.rule_seconds.values()), "optimize limit s": DEFAULT_SECONDS,
                         "all runs s": [r.seconds for r in reports]})
            print(f"  {case.name:24s} {report.seconds:6.2f} s", flush=True)
    return rows


# Alternative extractions of the LSTM: rule families switched on and off, crossed with
# GradLoop policies (egad/ad/checkpoint.py: store-all, and checkpointing over one, two
# and three levels, each level one more forward pass), each a different program with a
# predicted and a measured time. The families alone span little on a CPU (the LSTM is
# matmul-bound and batching moves work rather than removing it); the policies span
# about 3x, so the ranking tests the model across real differences in work.
FAMILIES = {
    "no rewrites": [],
    "batching": ["batching"],
    "all rules": [f.name for f in rules.default()],
}
POLICIES = {"store-all": (), "every-8": (8,), "every-8/2": (8, 2), "every-8/4/2": (8, 4, 2)}
ALTERNATIVES = {f"{family}, {policy}": (families, chain)
                for policy, chain in POLICIES.items() for family, families in FAMILIES.items()}


def ranking_section(T: int = 64) -> dict:
    from egad.ad import checkpoint
    from egad.optimizer import optimize_program

    args = lstm_lm.arguments(T)
    reference = egad.optimize(egad.trace(lstm_lm.loss, *args), wrt=lstm_lm.WRT, rules=())(*args)
    calls, predicted = {}, {}
    for name, (families, chain) in ALTERNATIVES.items():
        program = egad.trace(lstm_lm.loss, *args)
        if chain:
            program = checkpoint.segment(program, 0, *chain)
        gradient = egad.value_and_grad(program, wrt=lstm_lm.WRT)
        result = optimize_program(gradient, families, check_args=args)
        if result.fallback:
            raise AssertionError(f"ranking alternative {name!r} fell back: {result.fallback}")
        predicted[name] = result.predicted_after.seconds
        compiled = egad.optimize(result.program, wrt=None, rules=())
        _check_close(compiled(*args), reference, name)
        calls[name] = (lambda c: lambda: c(*args))(compiled)
        print(f"  built {name:28s} predicted {predicted[name] * 1e3:8.2f} ms", flush=True)
    measured = median_seconds(calls, ROUNDS)
    names = list(ALTERNATIVES)
    rho = spearman([predicted[n] for n in names], [measured[n] for n in names])
    return {"alternatives": [{"alternative": n, "families": ALTERNATIVES[n][0], "checkpoint levels": ALTERNATIVES[n][1],
                              "predicted ms": predicted[n] * 1e3, "measured ms": measured[n] * 1e3} for n in names],
            "spearman": rho, "target": TARGETS["spearman"],
            "measured spread": max(measured.values()) / min(measured.values())}


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (ties get their mean rank)."""
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    covariance = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    spread = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return covariance / spread if spread else 0.0


def _ranks(values) -> list[float]:
    order = sorted(range(len(values)), key=lambda k: values[k])
    ranks = [0.0] * len(values)
    k = 0
    while k < len(order):
        j = k
        while j + 1 < len(order) and values[order[j + 1]] == values[order[k]]:
            j += 1
        for m in range(k, j + 1):
            ranks[order[m]] = (k + j) / 2 + 1
        k = j + 1
    return ranks


PROFILED_CALLS = 3
PROFILE_ROWS = 12


def profile_section(T: int = 64, target: str = "llvm") -> dict:
    """The lstm section's two builds profiled (Optimized.profile): per side, the
    printed lines, the self time by kind and the longest rows."""
    name, program, wrt, args = lstm_workload(T)
    result = {"workload": name}
    for side, chosen_rules in (("default", None), ("rules=()", ())):
        profile = egad.optimize(program, wrt=wrt, target=target, rules=chosen_rules).profile(
            *args, calls=PROFILED_CALLS)
        result[side] = {"lines": profile.lines(top=PROFILE_ROWS), "call ms": profile.call_seconds * 1e3,
                        "profiled ms": profile.profiled_seconds * 1e3,
                        "by kind ms": {kind: s * 1e3 for kind, s in profile.seconds_by_kind().items()},
                        "rows": [dataclasses.asdict(row) for row in profile.rows[:PROFILE_ROWS]]}
    return result


SECTIONS = {"lstm": lstm_section, "gnmt": gnmt_section, "unroll": unroll_section, "corpus": corpus_section,
            "saturation": saturation_section, "ranking": ranking_section, "profile": profile_section}


def _print_rows(rows: list[dict]) -> None:
    print(f"  {'workload':24s} {'rules=() ms':>12s} {'default ms':>11s} {'speed-up':>9s} {'target':>7s} "
          f"{'predicted':>9s} {'opt+build s':>11s}  rules extracted")
    for row in rows:
        extracted = ", ".join(sorted(row["rules extracted"])) or "-"
        if row["fallback"]:
            extracted = f"FALLBACK: {row['fallback']}"
        print(f"  {row['workload']:24s} {row['rules=() ms']:12.2f} {row['default ms']:11.2f} "
              f"{row['speed-up']:8.2f}x {row['target']:6.2f}x {row['predicted speed-up']:8.2f}x "
              f"{row['optimize+build s']:11.2f}  {extracted[:90]}")


def main(argv=None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    target = next((a.split("=", 1)[1] for a in argv if a.startswith("--target=")), "llvm")
    chosen = [a for a in argv if not a.startswith("--target=")] or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        print(f"unknown sections {unknown}; choose from {list(SECTIONS)} (and --target=NAME)")
        return 2
    results = {}
    for name in chosen:
        on_target = name in ("lstm", "gnmt", "profile") and target != "llvm"
        print(f"== {name}" + (f" (target {target})" if on_target else ""), flush=True)
        result = SECTIONS[name](target=target) if on_target else SECTIONS[name]()
        results[f"{name}@{target}" if on_target else name] = result
        if name == "profile":
            for side in ("default", "rules=()"):
                print(f"  -- {result['workload']}, {side}")
                print("\n".join(f"  {line}" for line in result[side]["lines"]))
        elif name == "ranking":
            print(f"  {'alternative':28s} {'predicted ms':>13s} {'measured ms':>12s}")
            for row in result["alternatives"]:
                print(f"  {row['alternative']:28s} {row['predicted ms']:13.2f} {row['measured ms']:12.2f}")
            print(f"  Spearman rank correlation {result['spearman']:.2f} (target >= {result['target']}); "
                  f"measured times span {result['measured spread']:.2f}x")
        elif name == "saturation":
            print(f"  {'workload':24s} {'stopped by':>10s} {'rounds':>6s} {'e-nodes':>7s} {'median s':>8s} "
                  f"{'in rules s':>10s}")
            for row in result:
                print(f"  {row['workload']:24s} {row['stopped by']:>10s} {row['rounds']:6d} {row['e-nodes']:7d} "
                      f"{row['saturate s']:8.2f} {row['in rules s']:10.2f}")
            print(f"  median of {SATURATION_REPEATS}; egad.optimize stops at {result[0]['optimize limit s']} s")
        else:
            _print_rows(result)
            if name in ("lstm", "gnmt"):
                for row in result:
                    low, middle, high = row["round speed-up quartiles"]
                    print(f"  {row['workload']}: the speed-up of each round (one call a side), quartiles "
                          f"{low:.2f}x / {middle:.2f}x / {high:.2f}x over {row['rounds']} rounds")
            if name == "unroll":
                for row in result:
                    print(f"  {row['workload']}: {row['speed-up over no unroll']:.2f}x faster than the default "
                          f"families without unroll ({row['without unroll ms']:.2f} ms)")
            if name == "corpus":
                slower = [r for r in result if r["speed-up"] < 1 / TARGETS["corpus_slowdown"]]
                slow = [r["workload"] for r in slower if not r["same program"]]
                noise = [r["workload"] for r in slower if r["same program"]]
                build_median = statistics.median(r["optimize+build s"] for r in result)
                print(f"  slower than rules=() by more than {TARGETS['corpus_slowdown']}x: {slow or 'none'}"
                      + (f" (and, building nothing rewritten, so noise: {noise})" if noise else "")
                      + f"; optimize+build median {build_median:.2f} s (target <= {TARGETS['optimize_build_s']} s)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "optimizer.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous.update(results)
    previous.update({"machine": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                     "egad": egad.__version__, "rounds": ROUNDS, "step rounds": STEP_ROUNDS,
                     "corpus rounds": CORPUS_ROUNDS, "targets": TARGETS})
    out.write_text(json.dumps(previous, indent=2, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
