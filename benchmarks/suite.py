"""The side-by-side suite of issue 6: every workload (benchmarks/workload.py) and case
on egad and its peers — JAX `jit(value_and_grad)` with `lax.scan`/`cond`/`while_loop`,
JAX with Python-unrolled loops, PyTorch eager and `torch.compile` — measured in one
run on this machine: compile time, step time, peak memory and the gradient error
against egad's float64 interpreter.

Each configuration runs in a process of its own (benchmarks/suite_worker.py) under a
cap (default 300 s); one that passes it is recorded as "> cap", one that cannot
differentiate a workload is recorded with its error message, and a gradient off the
reference by more than 1e-3 (relative) is recorded as "wrong gradient" and never
timed. A line is printed as each configuration finishes. Writes
benchmarks/results/suite.json (rows of earlier runs are kept unless measured again
or `--fresh`), benchmarks/RESULTS.md, PNG plots in benchmarks/results/ and the
"Performance" section of README.md (benchmarks/suite_report.py, suite_plots.py).

    python -m benchmarks.suite                          # everything (make bench)
    python -m benchmarks.suite lstm_lm:T16,T64 gnmt_lite:tiny --systems egad jax-scan
    egad bench gnmt_lite --cap 120
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from egad.errors import ArgumentError, EgadError, message

from .suite_systems import FRAMEWORK, SYSTEMS
from .workload import WORKLOADS, load

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_CAP_S = 300.0  # the command-line defaults are in egad/cli_bench.py
# One thread each by default: on a small machine shared with other work, a library's
# spinning thread pool loses whole time slices to the other load (measured: PyTorch
# eager's LSTM T16 step 1.2 s with 2 threads, 85 ms with 1, at load average 8 on 2 cores),
# and one thread each compares the code the systems generate, as benchmarks/cpu_kernels.py does.
DEFAULT_THREADS = 1


def worker_environment(threads: int | None = DEFAULT_THREADS) -> dict:
    """The environment of a worker: the repo importable, egad's disk cache and
    Inductor's caches off (so compile time is compiling, not loading), JAX on the CPU,
    and with `threads` (> 0) every library's thread pool that size."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(EGAD_DISK_CACHE="0", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", JAX_PLATFORMS="cpu")
    if threads:
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS"):
            env[variable] = str(threads)
        if threads == 1:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                                "intra_op_parallelism_threads=1").strip()
    return env


def run_configuration(workload: str, case: str, system: str, reference: pathlib.Path, scratch: pathlib.Path,
                      cap_s: float, min_runs: int = 5, env: dict | None = None) -> dict:
    """Measure one configuration in a worker process stopped at `cap_s` seconds; the
    row it wrote (whatever phases it finished), with the status the run ended in."""
    name = f"{workload.replace('.', '_')}-{case}-{system}"
    out, log = scratch / f"{name}.json", scratch / f"{name}.log"
    command = [sys.executable, "-m", "benchmarks.suite_worker", workload, case, system,
               "--reference", str(reference), "--out", str(out), "--min-runs", str(min_runs)]
    started = time.perf_counter()
    with open(log, "wb") as output:
        # a session of its own: at the cap the worker and anything it started (Inductor's
        # compile workers) are stopped together
        process = subprocess.Popen(command, cwd=ROOT, env=env or worker_environment(), stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=cap_s)
            capped = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            capped = True
    wall = time.perf_counter() - started
    row = json.loads(out.read_text()) if out.exists() else {"workload": workload, "case": case, "system": system}
    row["wall s"] = round(wall, 2)
    row["cap s"] = cap_s
    if capped:
        if "step ms" in row:  # only egad's forward-only build was still going
            row.update(status="ok", **{"forward message": f"the forward-only build passed the {cap_s:g} s cap"})
        else:
            finished = ""
            if "compile s" in row:
                finished = f" (compiled in {row['compile s']:.1f} s, then still checking or timing)"
            row.update(status="> cap", message=f"stopped at the {cap_s:g} s cap{finished}")
    elif row.get("status") in (None, "running"):
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        row.update(status="crashed", message=f"the worker exited with status {process.returncode}: {tail}")
    return row


def plan(selection: list[str]) -> list[tuple[str, list[str]]]:
    """[(workload, [cases])] for command-line words `workload` or `workload:case,case`;
    all WORKLOADS that exist when none are named. An unknown workload or case raises
    egad.errors.ArgumentError naming the choices."""
    if not selection:
        selection = [name for name in WORKLOADS if (ROOT / "benchmarks" / f"{name}.py").exists()]
    planned = []
    for word in selection:
        workload, _, cases = word.partition(":")
        try:
            module = load(workload)
        except ModuleNotFoundError as error:
            if error.name not in (workload, f"benchmarks.{workload}"):
                raise  # the workload exists but something it imports does not
            raise ArgumentError(message(f"no workload {workload!r} (no module {error.name})",
                                        where=f"the command-line word {word!r}",
                                        instead=f"name one of {', '.join(WORKLOADS)} or a dotted module path"))
        known = list(module.CASES)
        chosen = cases.split(",") if cases else known
        unknown = [case for case in chosen if case not in known]
        if unknown:
            raise ArgumentError(message(f"{workload} has no case {', '.join(unknown)}",
                                        where=f"the command-line word {word!r}",
                                        instead=f"choose among {', '.join(known)}"))
        planned.append((workload, chosen))
    return planned


def run(planned: list[tuple[str, list[str]]], systems=SYSTEMS, cap_s: float = DEFAULT_CAP_S, min_runs: int = 5,
        threads: int | None = DEFAULT_THREADS, progress=print) -> list[dict]:
    """Every planned (workload, case) on every system: the reference first, then each
    system in a capped worker; a line through `progress` as each finishes."""
    env = worker_environment(threads)
    total = sum(len(cases) for _, cases in planned) * (len(systems) + 1)
    done, rows = 0, []
    measured_at = datetime.datetime.now().isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="egad-suite-") as scratch:
        scratch = pathlib.Path(scratch)

        def measure(workload, case, system, reference):
            nonlocal done
            row = run_configuration(workload, case, system, reference, scratch, cap_s, min_runs, env)
            row.update(measured_at=measured_at, threads=threads)
            done += 1
            progress(f"[{done:>3}/{total}] {progress_line(row)}")
            return row

        for workload, cases in planned:
            for case in cases:
                reference = scratch / f"{workload.replace('.', '_')}-{case}-reference.npz"
                reference_row = measure(workload, case, "reference", reference)
                for system in systems:
                    if reference_row["status"] == "ok":
                        rows.append(measure(workload, case, system, reference))
                        continue
                    rows.append({"workload": workload, "case": case, "system": system, "status": "no reference",
                                 "message": f"the reference failed: {reference_row.get('message', '')}"[:500],
                                 "measured_at": measured_at, "threads": threads})
                    done += 1
    return rows


def progress_line(row: dict) -> str:
    head = f"{row['workload']:<12} {row['case']:<6} {row['system']:<14}"
    if row["system"] == "reference" and row["status"] == "ok":
        return f"{head} float64 interpreter in {row['reference s']:.1f} s, loss {row['loss']:.6g}"
    if row["status"] != "ok":
        message = str(row.get("message", "")).splitlines()[0] if row.get("message") else ""
        return f"{head} {row['status']}" + (f": {message[:110]}" if message else "")
    line = (f"{head} compile {row['compile s']:7.2f} s  step {row['step ms']:9.2f} ms  "
            f"peak {row['peak rss MB']:6.0f} MB  grad err {row['gradient error']:.1e}")
    if "forward ms" in row:
        line += f"  forward {row['forward ms']:.2f} ms (x{row['gradient/forward']:.2f})"
    return line + f"  [{row['wall s']:.0f} s]"


def merge(previous: list[dict], new: list[dict]) -> list[dict]:
    """The new rows, and the previous ones for configurations not measured again."""
    measured = {(r["workload"], r["case"], r["system"]) for r in new}
    return [r for r in previous if (r["workload"], r["case"], r["system"]) not in measured] + new


def command_line(options, program: str = "python -m benchmarks.suite") -> str:
    """The command that repeats a run with these options, every option spelled out."""
    words = [program, *options.workloads, "--systems", *options.systems, "--cap", f"{options.cap:g}",
             "--min-runs", str(options.min_runs), "--threads", str(options.threads)]
    return " ".join(words)


def run_command(options, program: str = "python -m benchmarks.suite") -> int:
    """Run the suite as the command line asks (`egad bench` and `python -m
    benchmarks.suite` share egad/cli_bench.py's options) and write every output."""
    from . import suite_report

    results = options.results or RESULTS
    stored = results / "suite.json"
    markdown = options.markdown or ROOT / "benchmarks" / "RESULTS.md"
    readme = None if options.no_readme else ROOT / "README.md"
    if options.report_only:
        if not stored.exists():
            print(f"{program}: --report-only needs {stored}; run the suite first", file=sys.stderr)
            return 2
        document = _stored_document(stored)
        if document is None:
            print(f"{program}: {stored} holds no suite results (not JSON with 'rows'); run the suite with --fresh",
                  file=sys.stderr)
            return 2
    else:
        try:
            planned = plan(options.workloads)
        except EgadError as error:
            print(f"{program}: {error}", file=sys.stderr)
            return 2
        document = measure_and_store(planned, options, program, stored)
    rows = document["rows"]
    written = [stored, *suite_report.write_all(document, results, markdown, readme)]
    print()
    print(suite_report.pivot_table(rows))
    print()
    print(suite_report.goals_table(rows))
    print("\nwrote " + ", ".join(os.path.relpath(path, ROOT) for path in written))
    return 0


def _stored_document(stored: pathlib.Path) -> dict | None:
    """The results stored by an earlier run, or None where the file holds none."""
    try:
        document = json.loads(stored.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return document if isinstance(document, dict) and isinstance(document.get("rows"), list) else None


def measure_and_store(planned, options, program: str, stored: pathlib.Path) -> dict:
    """Run the planned configurations and store them with the rows of earlier runs
    (unless `options.fresh`) in `stored`; the document written."""
    from . import suite_report

    threads = "each library's default threads" if not options.threads else f"{options.threads} thread(s) each"
    print(f"egad suite: {', '.join(f'{w} ({len(c)} cases)' for w, c in planned)} on {', '.join(options.systems)}; "
          f"cap {options.cap:g} s per configuration, {threads}", flush=True)
    missing = [] if options.workloads else [w for w in WORKLOADS if w not in {name for name, _ in planned}]
    if missing:
        print(f"  (not yet written, skipped: {', '.join(missing)})", flush=True)
    rows = run(planned, options.systems, options.cap, options.min_runs, options.threads,
               progress=lambda line: print(line, flush=True))
    stored.parent.mkdir(parents=True, exist_ok=True)
    earlier = None if options.fresh or not stored.exists() else _stored_document(stored)
    previous = [] if earlier is None else earlier["rows"]  # unreadable results are replaced, not merged
    document = {"machine": suite_report.machine(), "versions": suite_report.versions(),
                "systems": {s: FRAMEWORK[s] for s in SYSTEMS}, "command": command_line(options, program),
                "cap s": options.cap, "rows": merge(previous, rows)}
    stored.write_text(json.dumps(document, indent=2, default=str))
    return document


def main(argv=None) -> int:
    from egad.cli_bench import add_arguments

    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
