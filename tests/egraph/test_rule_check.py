"""`egad rules check` (egad/rule_check.py): the interpreter judges every rule, on
generated instances of a rewrite's left side or on whole programs. It exits 1 with a
shrunk counterexample (rule, file:line, inputs, both programs) on an unsound rule it
has never seen, written in a file of the user's own, and 0 on sound families."""
from __future__ import annotations

import itertools
import re
import textwrap

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad import cli, rules
from egad.errors import RuleFileError
from egad.ir.types import TensorType
from egad.rule_check import _InstanceSearch, _type_of, check
from egad.rule_files import load_families
from egad.rule_patterns import read_rewrite
from egad.rule_programs import ProgramCase, branch_cases
from tests.egraph.test_rules import SCAN_SHAPES, scanned_rnn_gradient

_FILES = itertools.count()


def family_file(tmp_path, body: str):
    """A research family file; names carry a counter, since a process declares each once."""
    n = next(_FILES)
    path = tmp_path / f"research_{n}.py"
    path.write_text(textwrap.dedent(f'''\
        """A family of my own, outside rules/."""
        from egglog import i64, var, vars_
        from egglog import Vec

        from egad.egraph.language import Term, op
        from egad.rules import family
        from egad.rules.registry import rewrite

        MINE = family("research-{n}", __doc__)
        a, b = vars_("a b", Term)
        ''') + textwrap.dedent(body).replace("{n}", str(n)))
    return path, n


def line_of(path, text: str) -> int:
    return next(k for k, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_an_unsound_rule_it_has_never_seen_exits_1_with_a_shrunk_counterexample(tmp_path, capsys):
    path, n = family_file(tmp_path, '''\
        MINE.rewrites("exp-of-sum-{n}", "wrong on purpose: exp(a + b) = exp(a) + exp(b)",
                      rewrite(op.exp(op.add(a, b))).to(op.add(op.exp(a), op.exp(b))))
        ''')
    assert cli.main(["rules", "check", str(path), "--programs", "none"]) == 1
    out = capsys.readouterr().out
    assert f"exp-of-sum-{n}" in out and "UNSOUND" in out
    counterexample = out[out.index("counterexample to"):]
    assert f"research_{n}.py:{line_of(path, 'MINE.rewrites')}" in counterexample  # the rule's file:line
    assert "exp(add(a, b)) -> add(exp(a), exp(b))" in counterexample
    # shrunk by Hypothesis to the simplest instance: float64 scalars
    assert "a = " in counterexample and "b = " in counterexample and "(float64[])" in counterexample
    assert "as written:" in counterexample and "rewritten:" in counterexample and "differ by" in counterexample


def test_a_rule_wrong_only_at_inf_and_nan_is_caught_unless_it_says_so(tmp_path, capsys):
    """Floats were drawn from [-3, 3] only, so x - x = 0 passed for floats (inf - inf is
    NaN): found by fuzzing. IEEE's edges are drawn too, except for a rule declared
    `finite_only` (a reassociation: rules/registry.py Rule)."""
    def sub_self(finite_only: bool) -> str:
        return f'''\
            from egglog import eq
            from egad.egraph.analysis import rank_of
            from egad.egraph.language import literal
            from egad.rules.patterns import has_dtype
            MINE.rewrites("float-sub-self-{{n}}", "wrong at inf and NaN: x - x = 0",
                          rewrite(op.sub(a, a)).to(literal(0, "float64"), has_dtype(a, "float64"),
                                                   eq(rank_of(a)).to(i64(0))), finite_only={finite_only})
            '''

    flagged, _ = family_file(tmp_path, sub_self(False))
    assert cli.main(["rules", "check", str(flagged), "--programs", "none"]) == 1
    out = capsys.readouterr().out
    assert "UNSOUND" in out and "NaN or inf in other places" in out
    declared, _ = family_file(tmp_path, sub_self(True))
    assert cli.main(["rules", "check", str(declared), "--programs", "none"]) == 0


@pytest.mark.parametrize("rule", [
    'rewrite(op.mul(op.mul(a, literal(2.0, "float64")), literal(0.5, "float64"))).to(a, has_dtype(a, "float64"))',
    'rewrite(op.add(op.add(a, b), c)).to(op.add(a, op.add(b, c)), has_dtype(a, "float64"))',
    'rewrite(op.floordiv(op.add(a, a), literal(2, "int64"))).to(a, has_dtype(a, "int64"))',
    'rewrite(op.ne(a, a)).to(literal(False, "bool"), has_dtype(a, "float64"), eq(rank_of(a)).to(i64(0)))',
], ids=["overflow-then-halve", "reassociate-three", "int-wraps", "nan-only"])
def test_a_rule_wrong_only_at_an_edge_is_caught_on_every_run(tmp_path, capsys, rule):
    """Edges came one element in four at random, the largest magnitude was max/4 and
    ints were -3..3: `(h * 2) * 0.5 -> h` (docs/rules.md's own example), `(a + b) + c`
    reassociated, `(x + x) // 2 -> x` where ints wrap and `x != x -> False` (NaN only)
    passed, some on every seed. Found by fuzzing. Every combination of edges is now
    tried on the first instances."""
    path, _ = family_file(tmp_path, f'''\
        from egglog import eq
        from egad.egraph.analysis import rank_of
        from egad.egraph.language import literal
        from egad.rules.patterns import has_dtype
        c = var("c", Term)
        MINE.rewrites("edge-{{n}}", "wrong only at an edge", {rule})
        ''')
    for seed in ("0", "4"):
        assert cli.main(["rules", "check", str(path), "--programs", "none", "--seed", seed]) == 1
        assert "UNSOUND" in capsys.readouterr().out


def test_sound_families_pass_with_instances_and_programs_for_each_rule():
    def rnn(W, U, xs, h0):
        return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ U + h @ W), h0) ** 2)

    def make_args(seed):
        rng = np.random.default_rng(seed)
        return rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), rng.normal(size=(4, 2, 3)), rng.normal(size=(2, 3))

    def scanned_args(seed):
        rng = np.random.default_rng(seed)
        return tuple(rng.normal(size=shape) for shape in SCAN_SHAPES.values())

    gradient = egad.value_and_grad(egad.trace(rnn, *make_args(0)), wrt=(0, 1))
    programs = [ProgramCase("rnn (gradient)", gradient, make_args),
                ProgramCase("scanned rnn (gradient)", scanned_rnn_gradient(scanned_args(0)), scanned_args)]
    report = check(["loop_invariant", "batching"], programs=programs, examples=12)
    assert report.sound, report
    assert {v.rule.name: v.status for v in report.verdicts} == {
        "hoist-invariant-factors": "ok", "hoist-invariant-matmul-chain": "ok", "hoist-transpose-of-row": "ok",
        "batch-input-projection": "ok", "batch-elementwise-rows": "ok", "batch-weight-gradient": "ok",
        "stacked-rows-in-counter-order": "ok"}
    assert all(v.instances >= 12 for v in report.verdicts if v.rule.transform is None)
    assert report.verdict("batch-weight-gradient").programs == ["rnn (gradient)", "scanned rnn (gradient)"]
    assert report.verdict("stacked-rows-in-counter-order").programs == ["scanned rnn (gradient)"]
    assert "no counterexample" in str(report)


def test_an_unsound_region_rule_is_caught_on_the_programs_where_it_fires(tmp_path):
    path, n = family_file(tmp_path, '''\
        pred, region, k = var("pred", Term), var("region", i64), var("k", i64)
        then, otherwise = vars_("then otherwise", Vec[Term])
        MINE.rewrites("if-is-then-{n}", "wrong on purpose: an if is its then branch",
                      rewrite(Term.if_(region, pred, then, otherwise).get(k)).to(then[k]))
        ''')
    report = check([path], programs=branch_cases())
    verdict = report.verdict(f"if-is-then-{n}")
    assert not report.sound and verdict.status == "UNSOUND" and verdict.instances == 0
    assert "checked on programs" in " ".join(verdict.notes)
    text = str(verdict.counterexample)
    assert "program " in text and "make_args(seed=" in text and "as written" in text


def test_an_unsound_loop_transformer_is_caught(tmp_path):
    path, n = family_file(tmp_path, '''\
        @MINE.transformer("loop-runs-zero-times-{n}", "wrong on purpose: a loop's first state is its init")
        def loop_runs_zero_times(view):
            changed = 0
            for loop, gets in view.outputs().items():
                for node in view.snapshot.nodes[loop]:
                    if node.head == "For" and 0 in gets and node.args[3]:
                        init = view.snapshot.nodes[node.args[3][0]][0]
                        view.union(gets[0], init)
                        changed += 1
            return changed
        ''')
    cases = [c for c in branch_cases() if c.name == "in-a-loop"]
    report = check([path], programs=cases)
    assert not report.sound and report.verdict(f"loop-runs-zero-times-{n}").counterexample is not None
    assert "differ by" in str(report)


def test_a_transformer_that_builds_on_another_rule_is_checked_on_the_programs_it_rewrites(tmp_path):
    """A chain of scatters exists only once `scatter-into-sum` has rewritten AD's sum of
    scatters: a transformer declaring `reads=` that rule is checked on what it writes."""
    path, n = family_file(tmp_path, '''\
        from egad.egraph.class_types import node_inputs

        def _scatters(view, cid):
            return [node for node in view.snapshot.nodes[cid] if node.args[:1] == ("index_add",)]

        @MINE.transformer("drop-chained-scatter-{n}", "wrong on purpose: a chained scatter adds nothing",
                          reads=("scatter-into-sum",))
        def drop_chained_scatter(view):
            changed = 0
            for cid in list(view.snapshot.nodes):
                for node in _scatters(view, cid):
                    buffer = node_inputs(node)[0]
                    if _scatters(view, buffer):
                        view.union(cid, view.snapshot.nodes[buffer][0])
                        changed += 1
                        break
            return changed
        ''')
    from tests.egraph.test_scatters_into_concat import LSTM_SHAPES, lstm_gradient

    _, gradient = lstm_gradient()
    case = ProgramCase("lstm (gradient)", gradient, lambda seed: tuple(
        np.random.default_rng(seed).normal(size=shape) for shape in LSTM_SHAPES), "gradient")
    report = check([path], programs=[case])
    verdict = report.verdict(f"drop-chained-scatter-{n}")
    assert not report.sound and verdict.counterexample is not None
    assert "after scatter-into-sum" in str(verdict.counterexample)


def test_a_rule_that_raises_is_reported_not_propagated(tmp_path):
    path, n = family_file(tmp_path, '''\
        @MINE.transformer("broken-{n}", "raises, as a research rule in progress would")
        def broken(view):
            raise ValueError("not finished")
        ''')
    report = check([path], programs=branch_cases()[:1])
    assert not report.sound
    assert "the rule raised ValueError: not finished" in str(report.verdict(f"broken-{n}").counterexample)


def test_family_files_that_cannot_be_used_say_why(tmp_path, capsys):
    assert cli.main(["rules", "check", str(tmp_path / "missing.py")]) == 2
    assert "no rule family file at" in capsys.readouterr().err
    assert cli.main(["rules", "check", str(tmp_path)]) == 2
    assert "is a folder, not a rule family file" in capsys.readouterr().err
    assert cli.main(["rules", "check", "no-such-family"]) == 2
    assert "no rule family named 'no-such-family'" in capsys.readouterr().err
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(RuleFileError, match="declares no rule family"):
        load_families(empty)
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    with pytest.raises(RuleFileError, match="broken.py failed: SyntaxError"):
        load_families(broken)


@pytest.mark.parametrize("source, says", [
    ('F = family("", None)\n', "family name '' is not a name of lower-case words"),
    ('F = family("nameless_doc", "  ")\n', "family 'nameless_doc' has no doc"),
    ('F = family("no_rules", __doc__)\n', r"declares the families \['no_rules'\] but no rules in them"),
    ('F = family("whyless", __doc__)\nF.rewrites("my-neg-neg", "", rewrite(op.neg(op.neg(a))).to(a))\n',
     "rule 'my-neg-neg' says no why"),
    ('F = family("again", __doc__)\nF.rewrites("neg-neg", "mine", rewrite(op.neg(op.neg(a))).to(a))\n',
     r"rule 'neg-neg' is defined twice, first at .*rules/algebra.py:\d+ \(family 'algebra'\)"),
], ids=["family-name", "family-doc", "no-rules", "rule-why", "rule-twice"])
def test_a_family_file_without_names_docs_or_rules_says_which(tmp_path, capsys, source, says):
    """An empty family name and doc, a rule with no why and a family with no rules were
    accepted ("0 rules checked: no counterexample"); a rule defined twice did not say
    where first. Found by fuzzing."""
    path = tmp_path / "family.py"
    path.write_text('"""doc"""\nfrom egglog import var\nfrom egad.egraph.language import Term, op\n'
                    'from egad.rules import family\nfrom egad.rules.registry import rewrite\n'
                    'a = var("a", Term)\n' + source)
    assert cli.main(["rules", "check", str(path), "--programs", "none"]) == 2
    assert re.search(says, capsys.readouterr().err)


@pytest.mark.parametrize("item, says", [
    ("op.neg(a)", "a RuntimeExpr, not rewrite(lhs).to(rhs)"),
    ("rewrite(op.neg(op.neg(a))).to(0.0)", "the right side is a float, not a term"),
    ("rewrite(op.neg(a)).to(a, True)", "a condition is a bool, not a fact"),
    ("rewrite(a).to(op.neg(op.neg(a)))", "the left side is a bare variable"),
    ("rewrite(op.neg(a)).to(b)", "egglog refuses it: Unbound symbol _b"),
    ("rewrite(op.tanh(a, b)).to(a)", "op 'tanh' takes 1 operand, not 2"),
], ids=["not-a-rewrite", "right-side-float", "condition-bool", "bare-variable", "unbound", "arity"])
def test_a_malformed_rule_is_an_error_naming_it_and_its_line(tmp_path, capsys, item, says):
    """They were raw AttributeError/EggSmolError tracebacks, a silent fallback of the
    whole optimizer, or a counterexample cut to "EggSmolError: At 0:0 of ". Found by
    fuzzing."""
    path, n = family_file(tmp_path, f'''\
        MINE.rewrites("malformed-{{n}}", "a typo", {item})
        ''')
    assert cli.main(["rules", "check", str(path), "--programs", "none"]) == 2
    err = capsys.readouterr().err
    assert says in err and f"{path.name}:{line_of(path, 'MINE.rewrites')}" in err
    if "egglog" in says:  # a family that loads but egglog refuses: egad.optimize refuses it at once too
        (family,) = load_families(path)
        with pytest.raises(egad.RuleError, match=f"malformed-{n}"):
            egad.optimize(egad.trace(lambda x: -x, np.ones(2)), rules=[family])


def test_a_misspelled_attribute_is_malformed_not_unchecked(tmp_path, capsys):
    """reduce_sum takes `axes`: with `axis` no node can match, and the rule was reported
    unchecked ("no well-typed instance"), exit 0."""
    path, n = family_file(tmp_path, '''\
        MINE.rewrites("sum-of-neg-{n}", "sum(-x) = -sum(x)",
                      rewrite(op.reduce_sum(op.neg(a), axis=(0,), keepdims=False))
                      .to(op.neg(op.reduce_sum(a, axis=(0,), keepdims=False))))
        ''')
    assert cli.main(["rules", "check", str(path), "--programs", "none"]) == 1
    out = capsys.readouterr().out
    assert "MALFORMED" in out and "reduce_sum reads the attribute 'axes', which the left side does not give" in out


def test_a_type_change_names_the_op_and_its_operand_types(tmp_path, capsys):
    path, n = family_file(tmp_path, '''\
        from egad.rules.patterns import has_dtype
        MINE.rewrites("drop-keepdims-{n}", "wrong: keepdims=False to True",
                      rewrite(op.reduce_sum(a, axes=(0,), keepdims=False))
                      .to(op.reduce_sum(a, axes=(0,), keepdims=True)))
        ''')
    assert cli.main(["rules", "check", str(path), "--programs", "none"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"the rewrite changes a type: reduce_sum\(f64\[\d\], axes=\(0,\), keepdims=(True|False)\) "
                     r"computes f64\[1?\] in a class of type f64\[1?\]", out)
    assert "Value object at" not in out


def test_a_family_file_is_loaded_once(tmp_path):
    path, n = family_file(tmp_path, '''\
        MINE.rewrites("tanh-is-odd-{n}", "tanh(-x) = -tanh(x)", rewrite(op.tanh(op.neg(a))).to(op.neg(op.tanh(a))))
        ''')
    (family,) = load_families(path)
    assert family.name == f"research-{n}" and load_families(path) == [family]
    assert rules.family_named(f"research-{n}") is family


def test_the_search_finds_well_typed_instances_that_meet_the_conditions():
    factor_matmul = next(r for r in rules.all_rules() if r.name == "factor-matmul")
    pattern = read_rewrite(factor_matmul.rewrites[0])  # a@b + a@c -> a@(b + c) when b and c share a shape
    assignments = _InstanceSearch(pattern).assignments()
    assert len(assignments) >= 10
    by_name = [{var.name: value for var, value in assignment.items()} for assignment in assignments]
    for assignment in by_name:
        assert assignment["b"].shape == assignment["c"].shape
    for assignment in assignments:
        assert isinstance(_type_of(pattern.lhs, assignment), TensorType)
    assert by_name[0]["a"].ndim <= 1  # simplest first: what Hypothesis shrinks toward
    flatten = next(r for r in rules.all_rules() if r.name == "sum-keepdims-then-flatten")
    rank_four = read_rewrite(flatten.rewrites[-1])  # asks for rank_of(x) == 4
    found = _InstanceSearch(rank_four).assignments()
    assert found and all(a[rank_four.term_vars[0]].ndim == 4 for a in found)


@pytest.mark.slow
def test_every_default_family_passes_on_instances_and_every_program(capsys):
    assert cli.main(["rules", "check"]) == 0
    out = capsys.readouterr().out
    assert "no counterexample" in out and "UNSOUND" not in out
    for rule in rules.all_rules():
        if rule.family in {f.name for f in rules.default()}:
            line = next(line for line in out.splitlines() if line.split()[:1] == [rule.name])
            assert " ok " in line, line
