"""`egad rules list`, and the command line's errors for `rules check` and `rules stats`."""
from __future__ import annotations

import re

from egad import cli, rules


def test_rules_list_names_every_rule_where_it_is_written_and_why(capsys):
    assert cli.main(["rules", "list"]) == 0
    out = capsys.readouterr().out
    for family in rules.default():
        assert re.search(rf"^{family.name}\b", out, flags=re.M), family.name
        for rule in family.rules:
            line = next(line for line in out.splitlines() if line.split()[:1] == [rule.name])
            assert f"rules/{family.name}.py:{rule.site.line}" in line and rule.why in line
    assert "checkpoint (planned:" in out


def test_a_corpus_named_on_the_command_line_that_cannot_be_loaded_fails_the_command(tmp_path, capsys):
    (tmp_path / "__init__.py").write_text("raise ImportError('broken corpus')\n")
    assert cli.main(["rules", "check", "control", "--programs", "corpus", "--corpus", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "loading the corpus package" in err and "broken corpus" in err and "__init__.py:1" in err
    assert cli.main(["rules", "stats", "corpus", "--corpus", str(tmp_path / "missing")]) == 2
    assert "missing is not a folder" in capsys.readouterr().err
    # checked before the instance checks (minutes), or when no program is the corpus (ignored). Found by fuzzing.
    assert cli.main(["rules", "check", "algebra", "--corpus", str(tmp_path / "missing")]) == 2
    assert "missing is not a folder" in capsys.readouterr().err
    assert cli.main(["rules", "check", "control", "--programs", "lstm", "--corpus", str(tmp_path)]) == 2
    assert "the corpus is not among the programs (lstm)" in capsys.readouterr().err


def test_a_count_of_examples_must_be_positive(capsys):
    try:
        cli.main(["rules", "check", "algebra", "--examples", "0"])
    except SystemExit as stop:
        assert stop.code == 2
    assert "0 is not a positive number" in capsys.readouterr().err


def test_rule_stats_with_no_workload_says_which_to_name(capsys):
    assert cli.main(["rules", "stats", "none"]) == 2
    assert "no workload to measure" in capsys.readouterr().err


def test_a_rule_file_that_exits_is_reported_not_silent(tmp_path, capsys):
    """A rule file calling sys.exit(0) made `egad rules check` print nothing and exit 0.
    Found by fuzzing."""
    path = tmp_path / "exits.py"
    path.write_text('"""doc"""\nimport sys\nsys.exit(0)\n')
    assert cli.main(["rules", "check", str(path), "--programs", "none"]) == 2
    assert re.search(r"loading the rule family file .*exits\.py exited \(sys\.exit\(0\)\)", capsys.readouterr().err)


def test_output_cut_short_by_its_reader_is_no_error():
    """`egad rules list | head -1` printed a BrokenPipeError traceback. Found by fuzzing."""
    import subprocess
    import sys

    done = subprocess.run(f"'{sys.executable}' -m egad.cli rules list | head -c 10", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert len(done.stdout) == 10 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
