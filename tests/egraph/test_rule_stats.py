"""`egad rules stats` (egad/rule_stats.py) and the per-rule time the schedule records
(`SaturationReport.rule_seconds`, egad/egraph/schedule.py): what each rule did on a
workload, measured by the optimizer `egad.optimize` runs."""
from __future__ import annotations

import textwrap

import numpy as np

import egad
import egad.numpy as enp
from egad import cli, rules
from egad.egraph import encode, saturate
from egad.rule_programs import workload_cases
from egad.rule_stats import rule_stats


def gated_gradient():
    def loss(Wi, Wf, Ui, Uf, xs, h0):
        def step(t, h):
            i = egad.nn.sigmoid(xs[t] @ Wi + h @ Ui)
            f = enp.tanh(xs[t] @ Wf + h @ Uf)
            return i * f + (1 - i) * h

        return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)

    rng = np.random.default_rng(0)
    args = (*(rng.normal(size=(3, 4)) for _ in range(2)), *(rng.normal(size=(4, 4)) for _ in range(2)),
            rng.normal(size=(5, 2, 3)), np.zeros((2, 4)))
    return egad.value_and_grad(egad.trace(loss, *args), wrt=(0, 1, 2, 3))


def test_saturation_reports_the_time_spent_in_each_rule():
    report = saturate(encode(gated_gradient()), ["ad_simplify", "batching", "fusion"])
    names = {r.name for f in ("ad_simplify", "batching", "fusion") for r in rules.rules_of(f)}
    assert set(report.rule_seconds) <= names and all(s >= 0 for s in report.rule_seconds.values())
    # transformers are timed around their calls, every round
    assert report.rule_seconds["batch-weight-gradient"] > 0 and report.rule_seconds["fuse-shared-operand-matmuls"] > 0
    assert report.fired()["batch-input-projection"] >= 1 and "batch-input-projection" in report.rule_seconds
    assert sum(report.rule_seconds.values()) < report.seconds


def test_stats_on_the_lstm_say_what_each_rule_did():
    report = rule_stats(workload_cases("lstm"), rules.default(), "lstm")
    assert report.programs == ["lstm (gradient)"] and not report.fallbacks
    assert [r.rule.name for r in report.rows] == [r.name for f in rules.default() for r in f.rules]
    projection = report.row("batch-input-projection")  # xs[t] @ W for 8 gate matmuls: batched before the loop
    assert projection.fired_on == 1 and projection.matches >= 4 and projection.new_nodes >= 4
    fusion = report.row("fuse-shared-operand-matmuls")  # x @ W_i..W_o and h @ U_i..U_o: one matmul each
    assert fusion.matches >= 2 and fusion.extracted >= 2 and fusion.used  # the model's pick over the batched gates
    accumulation = report.row("batch-weight-gradient")
    assert accumulation.seconds > 0 and accumulation.used
    assert report.row("fold-not").matches == 0 and not report.row("fold-not").used
    before, after = report.predicted
    assert 0 < after < before


def test_the_command_shows_a_family_file_of_ones_own_beside_the_defaults(tmp_path, capsys):
    path = tmp_path / "commute.py"
    path.write_text(textwrap.dedent('''\
        """Multiplication commutes."""
        from egglog import vars_

        from egad.egraph.language import Term, op
        from egad.rules import family
        from egad.rules.registry import rewrite

        COMMUTE = family("commute-for-stats", __doc__)
        a, b = vars_("a b", Term)
        COMMUTE.rewrites("mul-commutes-for-stats", "a * b = b * a, exactly", rewrite(op.mul(a, b)).to(op.mul(b, a)))
        '''))
    assert cli.main(["rules", "stats", "lstm", "--rules", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["rule", "family"])
    mine = next(line for line in lines if line.split()[:1] == ["mul-commutes-for-stats"])
    assert mine.split()[1] == "commute-for-stats" and int(mine.split()[3]) > 0  # fired on 1 program, matches > 0
    assert any(line.split()[:1] == ["batch-input-projection"] for line in lines)  # the defaults ran too
    table = [line for line in lines[lines.index(header):] if line.startswith("  ") and len(line.split()) == 8]
    end = header.index("matches") + len("matches")
    for line in table:  # numbers are right-aligned under their heading
        assert line[end - 1].isdigit() and line[end:end + 1] == " ", line
