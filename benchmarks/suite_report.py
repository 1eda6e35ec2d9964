"""What `benchmarks/suite.py` writes from its rows: the markdown tables (a pivot of
step and compile time per workload and system, every measurement, the failures'
messages), the issue-6 goals as met / not met, benchmarks/RESULTS.md, the plots
(benchmarks/suite_plots.py) and README.md's Performance section (between the
PERFORMANCE_BEGIN and PERFORMANCE_END markers; nothing else in README is touched).

    document = json.loads(pathlib.Path("benchmarks/results/suite.json").read_text())
    print(pivot_table(document["rows"])); print(goals_table(document["rows"]))
"""
from __future__ import annotations

import importlib.metadata
import os
import pathlib
import platform
import re

from .suite_systems import SYSTEMS
from .workload import WORKLOADS, load

PERFORMANCE_BEGIN = "<!-- performance:begin (written by `make bench`: python -m benchmarks.suite) -->"
PERFORMANCE_END = "<!-- performance:end -->"
DISTRIBUTIONS = ("egad", "numpy", "egglog", "apache-tvm", "jax", "jaxlib", "torch", "matplotlib")
# issue 6's goals
GNMT_CASE, FLAT_IN_T, TORCH_COMPILE_T, TORCH_COMPILE_SPEEDUP, GRADIENT_OVER_FORWARD = "small", 1.5, "T64", 10.0, 3.0


# --- the machine --------------------------------------------------------------------------------


def machine() -> dict:
    facts = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
             "cpus usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        facts["processor"] = model.group(1).strip() if model else platform.processor()
    meminfo = pathlib.Path("/proc/meminfo")
    if meminfo.exists():
        total = re.search(r"^MemTotal:\s*(\d+) kB", meminfo.read_text(), re.M)
        if total:
            facts["memory GiB"] = round(int(total.group(1)) / 2 ** 20, 1)
    if hasattr(os, "getloadavg"):
        facts["load average when written"] = [round(x, 2) for x in os.getloadavg()]
    return facts


def versions() -> dict:
    found = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


# --- ordering and cells ------------------------------------------------------------------------------


def _case_order(workload: str, rows: list[dict]) -> list[str]:
    seen = list(dict.fromkeys(r["case"] for r in rows if r["workload"] == workload))
    try:
        declared = list(load(workload).CASES)
    except Exception:  # noqa: BLE001 - a workload that no longer imports keeps its rows' order
        declared = []
    return [c for c in declared if c in seen] + [c for c in seen if c not in declared]


def ordered_cases(rows: list[dict]) -> list[tuple[str, str]]:
    """(workload, case) pairs in the suite's order: WORKLOADS, then each one's CASES."""
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    workloads.sort(key=lambda w: WORKLOADS.index(w) if w in WORKLOADS else len(WORKLOADS))
    return [(w, c) for w in workloads for c in _case_order(w, rows)]


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _first_line(text) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0][:300] if lines else ""


class Footnotes:
    """Messages of failed configurations, numbered once each."""

    def __init__(self):
        self.notes: list[str] = []
        self.numbers: dict[tuple, int] = {}

    def mark(self, row: dict) -> str:
        key = (row["workload"], row["case"], row["system"])
        if key not in self.numbers:
            self.notes.append(f"{row['system']} on {row['workload']} {row['case']}: {_first_line(row.get('message'))}")
            self.numbers[key] = len(self.notes)
        return f"[{self.numbers[key]}]"

    def markdown(self) -> str:
        return "\n".join(f"{k}. {note}" for k, note in enumerate(self.notes, 1))


def cell(row: dict | None, footnotes: Footnotes) -> str:
    """One system's result for a case: 'step ms / compile s', or what stopped it."""
    if row is None:
        return "–"
    status = row["status"]
    if status == "ok":
        return f"{_number(row['step ms'])} ms / {_number(row['compile s'])} s"
    if status == "> cap":
        return f"> {row.get('cap s', 0):g} s cap"
    if status == "wrong gradient":
        return f"wrong gradient (error {row['gradient error']:.1e}) {footnotes.mark(row)}"
    if status == "not installed":
        return "not installed"
    return f"{status} {footnotes.mark(row)}"


# --- tables -------------------------------------------------------------------------------------------


def _index(rows):
    return {(r["workload"], r["case"], r["system"]): r for r in rows}


def systems_in(rows) -> list[str]:
    present = {r["system"] for r in rows}
    return [s for s in SYSTEMS if s in present] + sorted(present - set(SYSTEMS))


def pivot_table(rows: list[dict], footnotes: Footnotes | None = None) -> str:
    """Workload and case down, systems across; each cell 'step ms / compile s'."""
    own_notes = footnotes is None
    footnotes = footnotes or Footnotes()
    index, systems = _index(rows), systems_in(rows)
    lines = ["| workload | case | " + " | ".join(systems) + " |", "|---|---|" + "---|" * len(systems)]
    for workload, case in ordered_cases(rows):
        cells = [cell(index.get((workload, case, s)), footnotes) for s in systems]
        lines.append(f"| {workload} | {case} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    if own_notes and footnotes.notes:
        text += "\n\n" + footnotes.markdown()
    return text


FULL_COLUMNS = (("compile s", "compile s"), ("step ms", "step ms"), ("forward ms", "forward ms"),
                ("gradient/forward", "step / forward"), ("peak rss MB", "peak MB"),
                ("peak above baseline MB", "above baseline MB"), ("gradient error", "gradient error"),
                ("loss error", "loss error"))


def full_table(rows: list[dict], footnotes: Footnotes) -> str:
    """Every measurement of every configuration."""
    index, systems = _index(rows), systems_in(rows)
    lines = ["| workload | case | system | status | " + " | ".join(h for _, h in FULL_COLUMNS) + " |",
             "|---|---|---|---|" + "---:|" * len(FULL_COLUMNS)]
    for workload, case in ordered_cases(rows):
        for system in systems:
            row = index.get((workload, case, system))
            if row is None:
                continue
            status = row["status"] if row["status"] in ("ok", "not installed") else cell(row, footnotes)
            values = []
            for key, _ in FULL_COLUMNS:
                value = row.get(key)
                if value is None or (row["status"] != "ok" and key != "compile s"):
                    values.append("")  # a stopped or failed configuration's memory and errors are not its own
                elif key.endswith("error"):
                    values.append(f"{value:.1e}")
                else:
                    values.append(_number(value))
            lines.append(f"| {workload} | {case} | {system} | {status} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def egad_phases_table(rows: list[dict]) -> str:
    """Where egad's compile time goes, case by case (egad.optimize's own timings), and
    whether the optimized program was kept or the original built instead."""
    egad = {(r["workload"], r["case"]): r for r in rows if r["system"] == "egad" and r.get("egad phases s")}
    phases = list(dict.fromkeys(p for r in egad.values() for p in r["egad phases s"]))
    if not egad:
        return ""
    lines = ["| workload | case | " + " | ".join(phases) + " | built |", "|---|---|" + "---:|" * len(phases) + "---|"]
    for workload, case in ordered_cases(rows):
        row = egad.get((workload, case))
        if row is None:
            continue
        seconds = [f"{row['egad phases s'].get(p, 0):.2f}" for p in phases]
        built = "the original (optimized measured slower)" if row.get("egad fallback") else "the optimized program"
        lines.append(f"| {workload} | {case} | " + " | ".join(seconds) + f" | {built} |")
    return "\n".join(lines)


# --- goals --------------------------------------------------------------------------------------------


def goals(rows: list[dict]) -> list[dict]:
    """Issue 6's goals, each {goal, measured, verdict}: 'met', 'not met' or 'not measured'."""
    index = _index(rows)

    def get(workload, case, system):
        return index.get((workload, case, system))

    def ok(row):
        return row is not None and row["status"] == "ok"

    def describe(row, system):
        return f"{system}: {'not run' if row is None else row['status']}"

    results = []

    def add(goal, measured, verdict):
        results.append({"goal": goal, "measured": measured, "verdict": verdict})

    # GNMT-lite small: egad's step against JAX-scan's and half of PyTorch eager's
    egad = get("gnmt_lite", GNMT_CASE, "egad")
    for system, factor, goal in (("jax-scan", 1.0, "GNMT-lite small step <= JAX-scan's"),
                                 ("torch-eager", 0.5, "GNMT-lite small step <= 0.5 x PyTorch eager's")):
        peer = get("gnmt_lite", GNMT_CASE, system)
        if not ok(egad) or not ok(peer):
            verdict = "not met" if egad is not None and not ok(egad) else "not measured"
            add(goal, f"{describe(egad, 'egad')}, {describe(peer, system)}", verdict)
            continue
        add(goal, f"egad {_number(egad['step ms'])} ms, {system} {_number(peer['step ms'])} ms "
                  f"(egad / {system} = {egad['step ms'] / peer['step ms']:.2f}, goal <= {factor:g})",
            "met" if egad["step ms"] <= factor * peer["step ms"] else "not met")

    # LSTM: egad's compile time against JAX-scan's at every T, and flat in T
    lstm_cases = [c for w, c in ordered_cases(rows) if w == "lstm_lm"]
    pairs = [(c, get("lstm_lm", c, "egad"), get("lstm_lm", c, "jax-scan")) for c in lstm_cases]
    compared = [(c, e, j) for c, e, j in pairs if ok(e) and ok(j)]
    if compared:
        slower = [c for c, e, j in compared if e["compile s"] > j["compile s"]]
        add("egad compile time <= JAX-scan's (lstm_lm, every T)",
            ", ".join(f"{c}: {_number(e['compile s'])} s vs {_number(j['compile s'])} s" for c, e, j in compared),
            "not met" if slower else "met")
    else:
        add("egad compile time <= JAX-scan's (lstm_lm, every T)", "no T with both measured", "not measured")
    compiled = [(c, e["compile s"]) for c, e, _ in pairs if ok(e)]
    if len(compiled) >= 2:
        spread = max(s for _, s in compiled) / min(s for _, s in compiled)
        add(f"egad compile time flat in T (lstm_lm: max / min <= {FLAT_IN_T})",
            ", ".join(f"{c}: {_number(s)} s" for c, s in compiled) + f" (max / min = {spread:.2f})",
            "met" if spread <= FLAT_IN_T else "not met")
    else:
        add(f"egad compile time flat in T (lstm_lm: max / min <= {FLAT_IN_T})",
            f"{len(compiled)} lstm_lm case(s) compiled by egad", "not measured")

    # torch.compile at T=64
    egad, torch_compiled = get("lstm_lm", TORCH_COMPILE_T, "egad"), get("lstm_lm", TORCH_COMPILE_T, "torch-compile")
    goal = f"compile >= {TORCH_COMPILE_SPEEDUP:g}x faster than torch.compile (lstm_lm {TORCH_COMPILE_T})"
    if ok(egad) and ok(torch_compiled):
        ratio = torch_compiled["compile s"] / egad["compile s"]
        add(goal, f"egad {_number(egad['compile s'])} s, torch.compile {_number(torch_compiled['compile s'])} s "
                  f"({ratio:.1f}x)", "met" if ratio >= TORCH_COMPILE_SPEEDUP else "not met")
    elif ok(egad) and torch_compiled is not None and torch_compiled["status"] == "> cap":
        ratio = torch_compiled["cap s"] / egad["compile s"]
        add(goal, f"egad {_number(egad['compile s'])} s, torch.compile > {torch_compiled['cap s']:g} s cap "
                  f"(> {ratio:.1f}x)", "met" if ratio >= TORCH_COMPILE_SPEEDUP else "not measured")
    else:
        add(goal, f"{describe(egad, 'egad')}, {describe(torch_compiled, 'torch-compile')}",
            "not met" if egad is not None and not ok(egad) else "not measured")

    # gradient step / forward
    ratios = [(w, c, index[(w, c, "egad")]["gradient/forward"]) for w, c in ordered_cases(rows)
              if (w, c, "egad") in index and index[(w, c, "egad")].get("gradient/forward") is not None]
    goal = f"egad gradient step / forward <= {GRADIENT_OVER_FORWARD:g} (every case)"
    if ratios:
        worst = max(ratios, key=lambda x: x[2])
        over = [f"{w} {c} ({r:.2f})" for w, c, r in ratios if r > GRADIENT_OVER_FORWARD]
        add(goal, f"worst {worst[0]} {worst[1]}: {worst[2]:.2f} over {len(ratios)} cases"
                  + (f"; above: {', '.join(over)}" if over else ""), "not met" if over else "met")
    else:
        add(goal, "no case with both measured", "not measured")
    return results


def goals_table(rows: list[dict]) -> str:
    lines = ["| goal (issue 6) | measured | verdict |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {g['measured']} | **{g['verdict']}** |" for g in goals(rows)]
    return "\n".join(lines)


# --- documents ------------------------------------------------------------------------------------------


def _threads_text(rows: list[dict]) -> str:
    threads = sorted({r.get("threads") for r in rows}, key=str)
    return ", ".join("each library's default threads" if not t else f"{t} thread{'s' * (t > 1)} per system"
                     for t in threads)


def _header(document: dict) -> str:
    m, v = document["machine"], document["versions"]
    dates = sorted({r.get("measured_at", "") for r in document["rows"]} - {""})
    thread_text = _threads_text(document["rows"])
    return "\n".join([
        f"Machine: {m.get('processor', '?')}, {m.get('cpus usable')} usable CPUs of {m.get('cpus')}, "
        f"{m.get('memory GiB', '?')} GiB, {m.get('platform')}; load average (1, 5, 15 min) when written: "
        f"{m.get('load average when written', '?')}.  ",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f", Python {m.get('python')}.  ",
        f"Threads: {thread_text}. Cap: {document['cap s']:g} s per configuration. "
        f"Measured: {', '.join(dates) or '?'}.  ",
        f"Command: `{document['command']}` (`make bench` runs the whole suite)."])


METHOD = """- **compile s**: preparing the step and its first call, in a fresh process after the
  framework is imported: tracing, differentiating, optimizing, building (egad:
  `egad.optimize(program, wrt=..., target="llvm")` with the default rules, disk cache off,
  including its own side-by-side timing of optimized and plain builds; JAX: `jit(value_and_grad)`;
  torch.compile: Dynamo + Inductor for forward and backward, caches off; PyTorch eager: just
  the first step).
- **step ms**: median of >= 5 calls (more while they fit in 3 s) after one warm-up call;
  inputs already in the system's arrays (egad: numpy in, numpy out).
- **forward ms** (egad): the same for a forward-only build (`wrt=None`); step / forward is
  the gradient step's time over it.
- **peak MB**: the measuring process's peak resident set (`ru_maxrss`) over compile and
  steps; above baseline: minus what it held once the framework, the workload and its
  arguments were loaded (helper processes, e.g. Inductor's compile workers, not counted).
- **gradient error**: the first call's loss and gradients against egad's numpy interpreter
  run in float64 (itself checked against the workload's numpy `reference_loss`), the
  worst array's relative 2-norm error (each array against max(its norm, 1e-6 x the whole
  gradient's)). Above 1e-3 the configuration is "wrong gradient" and is not timed.
- **threads**: one per system unless the command says otherwise (`--threads`): the
  OpenMP/MKL/OpenBLAS and TVM pools and XLA's Eigen pool, so that load from other work on
  a small machine does not stall a spinning pool, and the systems' generated code is compared.
- A configuration that passes the cap is stopped and recorded as "> cap"; one whose
  system cannot differentiate the workload is recorded with its error."""


def results_markdown(document: dict, plots: list[pathlib.Path], markdown_dir: pathlib.Path) -> str:
    rows, footnotes = document["rows"], Footnotes()
    pivot = pivot_table(rows, footnotes)
    full = full_table(rows, footnotes)
    parts = ["# Side-by-side results: egad, JAX, PyTorch",
             "Written by `python -m benchmarks.suite` (`make bench`, `egad bench`); do not edit by hand.",
             _header(document), "## What is measured", METHOD,
             "## Step time / compile time", pivot, "## Goals", goals_table(rows), "## Every measurement", full]
    phases = egad_phases_table(rows)
    if phases:
        parts += ["### egad's compile time by phase (s)",
                  "`check` interprets the original and the optimized program on the example inputs; `measure` "
                  "builds the original too and times both side by side, keeping the faster.", phases]
    if footnotes.notes:
        parts += ["### Failures", footnotes.markdown()]
    if plots:
        parts += ["## Plots", "\n\n".join(f"![{p.stem.replace('_', ' ')}]({os.path.relpath(p, markdown_dir)})"
                                          for p in plots)]
    return "\n\n".join(parts) + "\n"


def readme_section(document: dict, plots: list[pathlib.Path], readme_dir: pathlib.Path) -> str:
    rows, footnotes = document["rows"], Footnotes()
    m = document["machine"]
    lines = [PERFORMANCE_BEGIN, "",
             f"One gradient step (loss and gradients) per workload on {m.get('processor', 'this machine')} "
             f"({m.get('cpus usable')} CPUs; {_threads_text(rows)}), egad against JAX and PyTorch; each cell is step "
             "time / compile time. "
             "Full method, versions, memory and gradient errors: [benchmarks/RESULTS.md](benchmarks/RESULTS.md). "
             "Regenerate with `make bench`.", "", pivot_table(rows, footnotes), ""]
    if footnotes.notes:
        lines += [footnotes.markdown(), ""]
    lines += [goals_table(rows), ""]
    compile_plot = [p for p in plots if p.stem == "compile_time_vs_T"]
    if compile_plot:
        lines += [f"![compile time vs T]({os.path.relpath(compile_plot[0], readme_dir)})", ""]
    lines.append(PERFORMANCE_END)
    return "\n".join(lines)


def replace_performance_section(readme: str, section: str) -> str | None:
    """README with the text between the markers replaced; None when the markers are missing."""
    start, end = readme.find(PERFORMANCE_BEGIN), readme.find(PERFORMANCE_END)
    if start < 0 or end < start:
        return None
    return readme[:start] + section + readme[end + len(PERFORMANCE_END):]


def write_all(document: dict, results_dir: pathlib.Path, markdown_path: pathlib.Path,
              readme_path: pathlib.Path | None) -> list[pathlib.Path]:
    """RESULTS.md, the plots and README's section; the paths written."""
    from .suite_plots import write_plots

    plots = write_plots(document["rows"], results_dir)
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.write_text(results_markdown(document, plots, markdown_path.parent))
    written = [*plots, markdown_path]
    if readme_path is not None and readme_path.exists():
        updated = replace_performance_section(readme_path.read_text(),
                                              readme_section(document, plots, readme_path.parent))
        if updated is None:
            print(f"note: {readme_path} has no performance markers ({PERFORMANCE_BEGIN!r} ... "
                  f"{PERFORMANCE_END!r}); its Performance section was not written")
        else:
            readme_path.write_text(updated)
            written.append(readme_path)
    return written
