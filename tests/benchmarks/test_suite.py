"""benchmarks/suite.py, the side-by-side suite: on the tiny workload of
tests/benchmarks/tiny_lstm.py a configuration gives a JSON row and a markdown table,
a wrong gradient is recorded and never timed, a configuration past the cap is
stopped and recorded as "> cap", and the goals and README section come out of the
rows. Timings are never asserted, only that they were taken.

The fast tests measure in this process (the worker's functions) with PyTorch eager as
the peer; the end-to-end run through worker processes, egad included, is slow.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from benchmarks import suite, suite_report, suite_worker
from egad.errors import ArgumentError

TINY = "tests.benchmarks.tiny_lstm"


def _measure_in_process(tmp_path, case: str, system: str) -> dict:
    """The worker's reference and one system, in this process, as the worker runs them."""
    from benchmarks.workload import load, wrt_of

    module = load(TINY)
    args, wrt = module.arguments(case), wrt_of(module, case)
    reference = tmp_path / f"{case}-reference.npz"
    reference_row = suite_worker.Row(tmp_path / f"{case}-reference.json", workload=TINY, case=case,
                                     system="reference")
    suite_worker.measure_reference(module, case, args, wrt, reference, reference_row)
    assert reference_row["status"] == "ok" and reference.exists()
    row = suite_worker.Row(tmp_path / f"{case}-{system}.json", workload=TINY, case=case, system=system,
                           status="running")
    suite_worker.measure_system(system, module, case, args, wrt, reference, row, min_runs=5)
    stored = json.loads(row.path.read_text())
    assert stored == json.loads(json.dumps(dict(row), default=str))  # the file holds the final row
    return stored


def test_a_configuration_gives_a_json_row_and_a_markdown_table(tmp_path):
    pytest.importorskip("torch")
    row = _measure_in_process(tmp_path, "T3", "torch-eager")
    assert row["status"] == "ok", row.get("message")
    assert row["compile s"] > 0 and row["step ms"] > 0 and row["step runs"] >= 5
    assert row["gradient error"] <= suite_worker.TOLERANCE and row["loss error"] <= suite_worker.TOLERANCE
    assert row["peak rss MB"] >= row["baseline rss MB"] > 0

    table = suite_report.pivot_table([row])
    header, rule, line = table.splitlines()
    assert header == "| workload | case | torch-eager |"
    assert line.startswith(f"| {TINY} | T3 | ") and " ms / " in line
    document = {"machine": suite_report.machine(), "versions": suite_report.versions(), "command": "test",
                "cap s": 60.0, "rows": [row]}
    page = suite_report.results_markdown(document, [], tmp_path)
    assert f"| {TINY} | T3 | torch-eager | ok |" in page and "## Goals" in page


def test_a_wrong_gradient_is_recorded_and_not_timed(tmp_path):
    pytest.importorskip("torch")
    row = _measure_in_process(tmp_path, "T3_wrong_torch", "torch-eager")
    assert row["status"] == "wrong gradient"
    assert row["gradient error"] > suite_worker.TOLERANCE
    assert "step ms" not in row and "not timed" in row["message"]
    assert "wrong gradient" in suite_report.pivot_table([row])


def test_gradient_error_is_relative_per_array_with_a_floor():
    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((3, 4)), rng.standard_normal(5) * 1e-9, rng.standard_normal(())]
    exact = suite_worker.gradient_error(1.5, reference, 1.5, reference)
    assert exact["gradient error"] == 0.0 and exact["loss error"] == 0.0
    assert suite_worker.within_tolerance(exact)

    off = [reference[0] * (1 + 2e-3), reference[1], reference[2]]
    errors = suite_worker.gradient_error(1.5, off, 1.5, reference)
    assert errors["worst gradient"] == 0 and errors["gradient error"] == pytest.approx(2e-3)
    assert not suite_worker.within_tolerance(errors)

    # an array ~1e-9 of the whole, off by 10% of itself, is float32 noise: within the floor
    noisy = [reference[0], reference[1] * 1.1, reference[2]]
    assert suite_worker.within_tolerance(suite_worker.gradient_error(1.5, noisy, 1.5, reference))

    assert not suite_worker.within_tolerance(suite_worker.gradient_error(1.5 * 1.01, reference, 1.5, reference))
    nan = [reference[0] * np.nan, reference[1], reference[2]]
    assert suite_worker.gradient_error(1.5, nan, 1.5, reference)["gradient error"] == float("inf")
    shape = suite_worker.gradient_error(1.5, [reference[0].T, *reference[1:]], 1.5, reference)
    assert not suite_worker.within_tolerance(shape) and "shape" in shape["shape mismatch"]


def test_a_configuration_past_the_cap_is_stopped_and_recorded(tmp_path):
    row = suite.run_configuration(TINY, "T3_hangs", "reference", tmp_path / "ref.npz", tmp_path, cap_s=1.5)
    assert row["status"] == "> cap" and "1.5 s cap" in row["message"]
    assert row["wall s"] < 30 and "step ms" not in row
    assert suite_report.cell(row, suite_report.Footnotes()) == "> 1.5 s cap"
    assert "> cap" in suite.progress_line(row)


def test_unknown_workloads_and_cases_name_the_choices():
    assert suite.plan([f"{TINY}:T3"]) == [(TINY, ["T3"])]
    with pytest.raises(ArgumentError, match="no workload 'no_such_workload'"):
        suite.plan(["no_such_workload"])
    with pytest.raises(ArgumentError, match="has no case T5(.|\n)*choose among T3, T3_wrong_torch, T3_hangs"):
        suite.plan([f"{TINY}:T5"])


def _row(workload, case, system, status="ok", **fields):
    return {"workload": workload, "case": case, "system": system, "status": status, **fields}


def test_goals_are_judged_from_the_rows():
    rows = [_row("gnmt_lite", "small", "egad", **{"step ms": 10.0, "compile s": 5.0}),
            _row("gnmt_lite", "small", "jax-scan", **{"step ms": 12.0, "compile s": 2.0}),
            _row("gnmt_lite", "small", "torch-eager", **{"step ms": 15.0, "compile s": 0.1}),
            _row("lstm_lm", "T16", "egad", **{"step ms": 1.0, "compile s": 4.0, "gradient/forward": 2.5}),
            _row("lstm_lm", "T64", "egad", **{"step ms": 2.0, "compile s": 5.0, "gradient/forward": 3.5}),
            _row("lstm_lm", "T16", "jax-scan", **{"step ms": 1.0, "compile s": 6.0}),
            _row("lstm_lm", "T64", "jax-scan", **{"step ms": 1.0, "compile s": 4.0}),
            _row("lstm_lm", "T64", "torch-compile", "> cap", **{"cap s": 300.0})]
    verdicts = {goal["goal"]: goal["verdict"] for goal in suite_report.goals(rows)}
    assert verdicts == {
        "GNMT-lite small step <= JAX-scan's": "met",  # 10 <= 12
        "GNMT-lite small step <= 0.5 x PyTorch eager's": "not met",  # 10 > 7.5
        "egad compile time <= JAX-scan's (lstm_lm, every T)": "not met",  # T64: 5 > 4
        "egad compile time flat in T (lstm_lm: max / min <= 1.5)": "met",  # 5 / 4
        "compile >= 10x faster than torch.compile (lstm_lm T64)": "met",  # > 300 / 5
        "egad gradient step / forward <= 3 (every case)": "not met",  # T64: 3.5
    }
    assert all(g["verdict"] == "not measured" for g in suite_report.goals([]))


def test_the_readme_section_is_replaced_between_the_markers_only():
    readme = f"# egad\n\nintro\n\n{suite_report.PERFORMANCE_BEGIN}\nold\n{suite_report.PERFORMANCE_END}\n\n## Layout\n"
    section = f"{suite_report.PERFORMANCE_BEGIN}\nnew table\n{suite_report.PERFORMANCE_END}"
    assert suite_report.replace_performance_section(readme, section) == readme.replace("\nold\n", "\nnew table\n")
    assert suite_report.replace_performance_section("# egad\n", section) is None


@pytest.mark.slow
def test_the_suite_runs_egad_and_a_peer_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    results = tmp_path / "results"
    code = suite.main([f"{TINY}:T3", "--systems", "egad", "torch-eager", "--results", str(results),
                       "--markdown", str(tmp_path / "RESULTS.md"), "--no-readme", "--cap", "240"])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"[  1/3] {TINY}" in printed  # a line per configuration as it finishes
    document = json.loads((results / "suite.json").read_text())
    rows = {row["system"]: row for row in document["rows"]}
    assert set(rows) == {"egad", "torch-eager"}
    for row in rows.values():
        assert row["status"] == "ok", row.get("message")
        assert row["gradient error"] <= suite_worker.TOLERANCE and row["step ms"] > 0
    assert rows["egad"]["forward ms"] > 0 and rows["egad"]["gradient/forward"] > 0
    page = (tmp_path / "RESULTS.md").read_text()
    assert f"| {TINY} | T3 | egad | ok |" in page and f"| {TINY} | T3 | torch-eager | ok |" in page
    assert os.path.exists(results / "step_time.png")


@pytest.mark.parametrize("stored", ['{"rows": [', "{}", "[1, 2]"])
def test_a_report_from_stored_results_that_hold_none_says_so(tmp_path, capsys, stored):
    (tmp_path / "suite.json").write_text(stored)
    assert suite.main(["--report-only", "--results", str(tmp_path), "--no-readme",
                       "--markdown", str(tmp_path / "new" / "RESULTS.md")]) == 2
    assert "holds no suite results" in capsys.readouterr().err
