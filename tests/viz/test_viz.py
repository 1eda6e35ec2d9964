"""egad.viz without a browser: the page is one self-contained HTML file whose data
says what the optimizer saw and chose (tests/viz/test_viz_browser.py draws it)."""
from __future__ import annotations

import html.parser
import json
import pathlib
import re

import pytest

import egad
from egad import viz
from egad.viz_data import page_data, relative_path

from .conftest import rnn_args, rnn_loss

ROOT = pathlib.Path(__file__).resolve().parents[2]


class _Tags(html.parser.HTMLParser):
    """Every start tag with its attributes, and the tags left open at the end."""

    VOID = {"meta", "input", "br", "img", "link", "hr"}

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()


def page_json(text: str) -> dict:
    match = re.search(r'<script type="application/json" id="egad-data">(.*?)</script>', text, flags=re.S)
    assert match, "the page holds no #egad-data"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def page(rnn_optimization, tmp_path_factory):
    path = viz.render(rnn_optimization, tmp_path_factory.mktemp("viz") / "rnn.html")
    return path.read_text(encoding="utf-8")


def test_page_is_one_self_contained_html_file(page):
    parser = _Tags()
    parser.feed(page)
    parser.close()
    assert parser.open == [], f"tags left open: {parser.open}"
    names = [tag for tag, _ in parser.tags]
    assert names[0] == "html" and "body" in names and names.count("script") == 4  # 2 libraries, the data, the app; and
    # no element loads anything: no external script, stylesheet, image or frame
    for tag, attrs in parser.tags:
        assert "src" not in attrs, f"<{tag} src=...> loads a file"
        assert not (tag == "link" and attrs.get("rel") == "stylesheet")
        assert not re.match(r"\s*(https?:)?//", attrs.get("href", "")), f"<{tag}> links out: {attrs['href']}"
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "The Cytoscape Consortium" in page and "var dagre=" in page  # the vendored libraries, inlined


def test_page_data_round_trips_through_the_html(page, rnn_optimization):
    assert page_json(page) == json.loads(json.dumps(page_data(rnn_optimization)))


def test_every_enode_names_the_rule_that_made_it_where_it_is_written(rnn_optimization):
    data = page_data(rnn_optimization)
    sites = {rule.name: f"{relative_path(rule.site.file)}:{rule.site.line}"
             for family in egad.rules.default() for rule in family.rules}
    by_rule = {}
    for node in data["nodes"]:
        by_rule.setdefault(node["rule"], []).append(node)
    made_by_rules = set(by_rule) - {"input"}
    # the rules that added e-nodes are the ones the saturation report says did
    assert made_by_rules == {name for name, count in rnn_optimization.saturation.new_nodes.items() if count}
    assert {"batch-input-projection", "batch-weight-gradient"} <= made_by_rules
    for name in made_by_rules:
        assert {node["site"] for node in by_rule[name]} == {sites[name]}
        file, line = sites[name].rsplit(":", 1)
        assert 0 < int(line) <= len((ROOT / file).read_text().splitlines())
    # e-nodes of the program as written carry the user's source line
    assert any(node["source"].startswith("conftest.py:") for node in by_rule["input"])


def test_extracted_term_is_one_enode_per_chosen_class_and_closed_under_inputs(rnn_optimization):
    data = page_data(rnn_optimization)
    classes = {c["id"]: c for c in data["classes"]}
    nodes = {n["id"]: n for n in data["nodes"]}
    extracted = [n for n in data["nodes"] if n["extracted"]]
    assert len(extracted) == len(rnn_optimization.graph.extraction.choice)
    assert all(classes[n["class"]]["chosen"] == n["id"] for n in extracted)
    for node in extracted:
        for input_class in node["inputs"]:
            chosen = classes[input_class]["chosen"]
            assert chosen is not None and nodes[chosen]["extracted"]
    # rules' e-nodes in the term: as many as the report counts
    from_rules = [n for n in extracted if n["rule"] != "input"]
    assert len(from_rules) == sum(rnn_optimization.chosen.values()) > 0


def test_critical_chains_are_the_reports_critical_paths(rnn_optimization):
    """The chain drawn on the e-nodes of each loop is the one egad/critical_path.py
    finds on the decoded program: the same kernels, the same latency."""
    data = page_data(rnn_optimization)
    drawn = sorted((round(chain["seconds_per_trip"], 12), chain["ops"]) for chain in data["critical"])
    reported = sorted((round(path.chain_seconds, 12), [op for op, _ in path.steps])
                      for path in rnn_optimization.critical_path)
    assert drawn == reported and len(drawn) == 2  # the loop and its adjoint
    nodes = {n["id"]: n for n in data["nodes"]}
    for chain in data["critical"]:
        assert chain["nodes"] and all(nodes[i]["critical"] and nodes[i]["extracted"] for i in chain["nodes"])
    assert sum(n["critical"] for n in data["nodes"]) == len({i for c in data["critical"] for i in c["nodes"]})


def test_classes_are_grouped_in_nested_region_frames(rnn_optimization):
    data = page_data(rnn_optimization)
    frames = {f["id"]: f for f in data["frames"]}
    assert frames["r0"]["parent"] is None
    loops = [f for f in frames.values() if f["kind"] in ("for", "reverse for")]
    assert len(loops) >= 2 and all(f["parent"] == "r0" and f["trips"] == 12 for f in loops)
    assert all(f["loc"].startswith("conftest.py:") for f in loops)
    for chain in data["critical"]:  # each chain runs inside its own loop's frame
        classes = {c["id"]: c for c in data["classes"]}
        nodes = {n["id"]: n for n in data["nodes"]}
        inside = [classes[nodes[i]["class"]]["frame"] for i in chain["nodes"]]
        assert set(inside) == {chain["frame"]}
    assert frames["r0"]["enodes"] == len(data["nodes"])
    assert sum(f["classes"] for f in frames.values()) == len(data["classes"])


def test_branches_are_frames_inside_their_loops_frames(branchy_optimization):
    data = page_data(branchy_optimization)
    frames = {f["id"]: f for f in data["frames"]}
    branches = [f for f in frames.values() if f["kind"] == "if"]
    assert {f["label"] for f in branches} == {"if (then)", "if (else)"}
    assert len(branches) == 4  # then and else, in the loop and in its adjoint
    assert all(frames[f["parent"]]["kind"] in ("for", "reverse for") for f in branches)
    assert all(f["loc"].startswith("conftest.py:") and f["enodes"] for f in branches)
    drawn = sorted(round(chain["seconds_per_trip"], 12) for chain in data["critical"])
    assert drawn == sorted(round(path.chain_seconds, 12) for path in branchy_optimization.critical_path)


def test_summary_holds_predicted_costs_and_both_programs(rnn_optimization):
    data = page_data(rnn_optimization)
    summary = data["summary"]
    assert summary["predicted_before_us"] == pytest.approx(rnn_optimization.predicted_before.seconds * 1e6)
    assert summary["predicted_after_us"] == pytest.approx(rnn_optimization.predicted_after.seconds * 1e6)
    assert summary["predicted_after_us"] < summary["predicted_before_us"]
    assert data["before"] == str(rnn_optimization.original) and data["after"] == str(rnn_optimization.program)
    assert data["before"] != data["after"]
    assert {r["name"] for r in summary["rules"]} == set(rnn_optimization.saturation.fired())


def test_render_refuses_what_has_no_egraph(rnn_optimization, tmp_path):
    import dataclasses

    program = egad.trace(rnn_loss, *rnn_args())
    # what egad.optimize returns, made here without importing TVM (it builds at the first call)
    f = egad.Optimized(program, (0,), "llvm", False, tuple(egad.rules.default()))
    with pytest.raises(egad.EgadError, match="not been called yet"):
        viz.render(f, tmp_path / "x.html")
    with pytest.raises(egad.EgadError, match="rules=\\(\\)"):
        viz.render(egad.Optimized(program, (0,), "llvm", False, ()), tmp_path / "x.html")
    with pytest.raises(egad.EgadError, match="got Program"):
        viz.render(program, tmp_path / "x.html")
    with pytest.raises(egad.EgadError, match="kept no e-graph"):
        viz.render(dataclasses.replace(rnn_optimization, graph=None, fallback="a test"), tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


def test_names_in_the_data_cannot_break_the_page(rnn_optimization):
    """A function named `loss<!--<script>` left the data's script element open (the page
    showed nothing), and one holding `/*@APP@*/` was taken for a placeholder of the
    template ("a broken install?"). Found by fuzzing."""
    data = json.loads(json.dumps(page_data(rnn_optimization)))
    data["title"] = name = "loss<!--<script>/*@APP@*/</script><b>&"
    text = viz.page(data)
    parser = _Tags()
    parser.feed(text)
    parser.close()
    assert parser.open == [] and [tag for tag, _ in parser.tags].count("script") == 4
    assert page_json(text) == data and "<" not in re.search(r'id="egad-data">(.*?)</script>', text, re.S).group(1)
    assert "<title>loss&lt;!--&lt;script&gt;/*@APP@*/&lt;/script&gt;&lt;b&gt;&amp;</title>" in text
    app = (ROOT / "egad" / "viz_assets" / "viz.js").read_text(encoding="utf-8")
    assert text.count(app) == 1  # inlined where the template says, once


def test_render_says_what_is_wrong_with_its_path_or_specialization(rnn_optimization, tmp_path):
    """A directory, a missing folder, a specialization "0" or 1.0 raised IsADirectoryError,
    FileNotFoundError and TypeError. Found by fuzzing."""
    with pytest.raises(egad.EgadError, match="could not write .*: Is a directory"):
        viz.render(rnn_optimization, tmp_path)
    with pytest.raises(egad.EgadError, match="could not write .*: No such file or directory"):
        viz.render(rnn_optimization, tmp_path / "missing" / "x.html")
    for wrong in (None, 3, b"x.html", ""):  # a raw TypeError, or "." a directory
        with pytest.raises(egad.EgadError, match="needs the path of the page to write"):
            viz.render(rnn_optimization, wrong)
    f = egad.Optimized(egad.trace(rnn_loss, *rnn_args()), (0,), "llvm", False, tuple(egad.rules.default()))
    f.optimizations.append(rnn_optimization)  # as its first call would (without building it here)
    for wrong in ("0", 1.0, True, 1):
        with pytest.raises(egad.EgadError, match=f"specialization {wrong!r} does not exist"):
            viz.render(f, tmp_path / "x.html", specialization=wrong)
    assert viz.render(f, tmp_path / "x.html", specialization=0).exists()


def test_cli_viz_runs_a_script_function(tmp_path, capsys):
    from egad.cli import main

    script = tmp_path / "model.py"
    script.write_text(
        "import egad\n"
        "from egad.optimizer import optimize_program\n"
        "from tests.viz.conftest import rnn_args, rnn_loss\n\n"
        "def optimized():\n"
        "    args = rnn_args()\n"
        "    gradient = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(0,))\n"
        "    return optimize_program(gradient, egad.rules.default(), check_args=args)\n")
    out = tmp_path / "page.html"
    assert main(["viz", f"{script}:optimized", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert main(["viz", f"{script}:optimized", "-o", str(out)]) == 0
    assert "replacing the file there" in capsys.readouterr().out  # it said nothing. Found by fuzzing.
    data = page_json(out.read_text(encoding="utf-8"))
    assert data["title"] == "egad: value_and_grad_rnn_loss" and data["critical"]
    # the user's mistakes: a message and exit status 2, not a traceback
    for argv, error in [([f"{script}:missing", "-o", str(out)], "defines no function 'missing'"),
                        ([f"{tmp_path / 'absent.py'}:optimized"], "no file"),
                        ([f"{script}:optimized", "--workload", "gnmt-lite-tiny"], "not both"),
                        ([f"{script}:optimized", "-o", str(tmp_path / "no" / "such" / "page.html")], "cannot write")]:
        assert main(["viz", *argv]) == 2
        assert error in capsys.readouterr().err


def test_cli_viz_says_which_of_several_specializations_it_draws(tmp_path, capsys):
    """A result called on two shapes drew the first, said nothing, and the CLI could not
    pick another. Found by fuzzing."""
    from egad.cli import main

    script = tmp_path / "two.py"
    script.write_text("import numpy as np, egad, egad.numpy as enp\n\n"
                      "def loss(x):\n    return enp.sum(enp.tanh(x) * x)\n\n"
                      "def two_shapes():\n"
                      "    f = egad.optimize(egad.trace(loss, np.ones(3)), wrt=(0,))\n"
                      "    f(np.ones(3)); f(np.ones((5,)))\n"
                      "    return f\n")
    pages = {}
    for k in (None, 1):
        out = tmp_path / f"page-{k}.html"
        assert main(["viz", f"{script}:two_shapes", "-o", str(out)] + ([] if k is None else
                                                                        ["--specialization", str(k)])) == 0
        said = capsys.readouterr().out
        assert ("has 2 specializations" in said) == (k is None)
        pages[k] = page_json(out.read_text(encoding="utf-8"))
    assert pages[None]["summary"] != pages[1]["summary"]  # f32[3] and f32[5]
    assert main(["viz", f"{script}:two_shapes", "--specialization", "2", "-o", str(tmp_path / "x.html")]) == 2
    assert "specialization 2 does not exist" in capsys.readouterr().err
    assert main(["viz", "--specialization", "1"]) == 2
    assert "a workload has one" in capsys.readouterr().err


def test_cli_viz_reports_the_users_script_errors_with_their_lines(tmp_path, capsys):
    from egad.cli import main

    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    script = tmp_path / "model.py"
    script.write_text("import helper  # a module beside the script, as `python model.py` finds it\n\n"
                      "def needs_an_argument(x):\n    return x\n\n"
                      "def fails():\n    raise ValueError('the model is wrong')\n")
    assert main(["viz", f"{script}:fails"]) == 2
    err = capsys.readouterr().err
    assert "raised ValueError: the model is wrong" in err and "model.py:7" in err
    assert main(["viz", f"{script}:needs_an_argument"]) == 2
    assert "missing 1 required positional argument" in capsys.readouterr().err
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert main(["viz", f"{tmp_path / 'broken.py'}:f"]) == 2
    err = capsys.readouterr().err
    assert "SyntaxError" in err and "fix the script's syntax at that line" in err  # not "name a function..."


@pytest.mark.slow
def test_page_of_5000_enodes_is_sane(large_optimization, tmp_path):
    path = viz.render(large_optimization, tmp_path / "large.html")
    assert path.stat().st_size < 8e6  # ~4 MB: the data is a few hundred bytes per e-node, libraries 0.5 MB
    data = page_json(path.read_text(encoding="utf-8"))
    nodes, classes, frames = data["nodes"], data["classes"], {f["id"]: f for f in data["frames"]}
    assert len(nodes) >= 5000 and len(frames) == 67
    ids = [n["id"] for n in nodes] + [c["id"] for c in classes] + list(frames)
    assert len(ids) == len(set(ids))
    for frame in frames.values():  # a tree under the program's frame
        seen, at = set(), frame["id"]
        while frames[at]["parent"] is not None:
            assert at not in seen
            seen.add(at)
            at = frames[at]["parent"]
        assert at == "r0"
    # what the page draws at first (regions closed): the program's own classes and one box per loop
    top = [c for c in classes if c["frame"] == "r0"]
    assert len(top) + len(frames) < 0.1 * len(nodes)
    assert len(data["critical"]) == 66 and all(chain["nodes"] for chain in data["critical"])
