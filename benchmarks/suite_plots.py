"""The suite's PNG plots (matplotlib, the `plots` extra): compile time against the
sequence length T of lstm_lm per system (log-log; a configuration stopped at the cap
is drawn at the cap with an open triangle), and step time and peak memory per
workload, case and system (grouped bars, log scale; no bar where a system failed).

    write_plots(json.loads(pathlib.Path("benchmarks/results/suite.json").read_text())["rows"], pathlib.Path("/tmp"))
"""
from __future__ import annotations

import pathlib
import re

from .suite_report import ordered_cases, systems_in

COLORS = {"egad": "#d62728", "jax-scan": "#1f77b4", "jax-unrolled": "#aec7e8", "torch-eager": "#ff7f0e",
          "torch-compile": "#ffbb78"}


def write_plots(rows: list[dict], directory: pathlib.Path) -> list[pathlib.Path]:
    """The PNGs written (none, with a note, when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed (pip install -e '.[plots]'): no plots")
        return []
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (("compile_time_vs_T", _compile_time_vs_T), ("step_time", _step_time),
                       ("peak_memory", _peak_memory)):
        figure = draw(plt, rows)
        if figure is None:
            continue
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def _length(case: str) -> int | None:
    match = re.fullmatch(r"T(\d+)", case)
    return int(match.group(1)) if match else None


def _compile_time_vs_T(plt, rows):
    lstm = [r for r in rows if r["workload"] == "lstm_lm" and _length(r["case"]) is not None]
    if not lstm:
        return None
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    caps = set()
    for k, system in enumerate(systems_in(lstm)):
        done = sorted((_length(r["case"]), r["compile s"]) for r in lstm if r["system"] == system and "compile s" in r
                      and r["status"] in ("ok", "> cap"))
        # stopped at the cap before compiling: drawn at the cap, nudged sideways so systems do not hide each other
        capped = sorted((_length(r["case"]) * (1 + 0.04 * k), r["cap s"]) for r in lstm
                        if r["system"] == system and r["status"] == "> cap" and "compile s" not in r)
        color = COLORS.get(system)
        label = f"{system} (first call)" if system == "torch-eager" else system
        if done:
            axes.plot(*zip(*done), marker="o", color=color, label=label, linewidth=2.5 if system == "egad" else 1.5)
        if capped:
            axes.plot(*zip(*capped), linestyle="none", marker="^", markerfacecolor="none", color=color,
                      markersize=9, label=None if done else f"{label} (> cap)")
            if done:  # where the line goes: at least up to the cap
                axes.plot([done[-1][0], capped[0][0]], [done[-1][1], capped[0][1]], linestyle="--", color=color,
                          linewidth=1)
            caps.update(cap for _, cap in capped)
    for cap in caps:
        axes.axhline(cap, color="grey", linestyle=":", linewidth=1)
        axes.text(0.01, cap, f"cap {cap:g} s", transform=axes.get_yaxis_transform(), fontsize=8, color="grey",
                  verticalalignment="bottom")
    axes.set_xscale("log", base=2)
    lengths = sorted({_length(r["case"]) for r in lstm})
    axes.set_xticks(lengths, [str(t) for t in lengths])
    axes.minorticks_off()
    axes.set_yscale("log")
    axes.set_xlabel("sequence length T (lstm_lm, B=32, I=128, H=256)")
    axes.set_ylabel("compile time, s (first call)")
    axes.set_title("Compile time against T (open triangle: stopped at the cap)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _grouped_bars(plt, rows, key: str, ylabel: str, title: str):
    groups = ordered_cases(rows)
    systems = systems_in(rows)
    index = {(r["workload"], r["case"], r["system"]): r for r in rows}
    if not groups:
        return None
    figure, axes = plt.subplots(figsize=(max(6.4, 1.1 * len(groups) + 2), 4.2))
    width = 0.8 / max(len(systems), 1)
    for k, system in enumerate(systems):
        xs, heights = [], []
        for g, (workload, case) in enumerate(groups):
            row = index.get((workload, case, system))
            if row is not None and row["status"] == "ok" and row.get(key) is not None:
                xs.append(g + (k - (len(systems) - 1) / 2) * width)
                heights.append(row[key])
        axes.bar(xs, heights, width=width, color=COLORS.get(system), label=system)
    axes.set_xticks(range(len(groups)))
    axes.set_xticklabels([f"{w}\n{c}" for w, c in groups], fontsize=8)
    axes.set_yscale("log")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, axis="y", which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def _step_time(plt, rows):
    return _grouped_bars(plt, rows, "step ms", "gradient step, ms (median)",
                         "Step time per workload and system (no bar: failed, capped or wrong)")


def _peak_memory(plt, rows):
    return _grouped_bars(plt, rows, "peak rss MB", "peak resident set, MB",
                         "Peak memory of the measuring process")
