"""Random plain-Python control-flow programs through `egad.function` (issue 8).

Hypothesis draws a small program tree and renders it as Python SOURCE TEXT, which is
written to a temporary .py file and imported (conversion reads the source with
`inspect.getsource`). Every program has the signature `f(x, xs, n, a)`: `x` a float64
vector (2,), `xs` rows (3, 2), `n` an int64 scalar in [0, 3] (a traced loop bound and
condition operand), `a` a float64 scalar; it keeps the state `h` (vector), `s`
(scalar, starts as the Python float 0.0) and `c` (counter, starts as the Python int 0)
and returns `h, s, c`.

Statements nest up to depth 3: `if`/`elif`/`else` (traced, static and mixed
conditions with `and`/`or`/`not` and chained comparisons; variables first assigned in
every branch and used after), `x if c else y`, `s += ...`, `while` (a traced or static
condition, always bounded by a counter that the body increments first, so `continue`
cannot skip it), `for i in range(...)` with
static and traced bounds, `for r in xs` (with a variable first assigned in the loop
and used after it), guarded `break`/`continue`, early `return` (guarded, or as the
last statement of a branch), and a nested function `g` with its own early return.

Checks: `egad.interpret(egad.trace(egad.function(f), *args), *args)` equals `f(*args)`
run directly on numpy values (same source, plain Python), and, for a subset, `egad.grad`
of a scalar loss matches central finite differences (`tests/ad/gradcheck.py`). The
same checks run on `FIXED_PROGRAMS`, hand-written corners (and minimal repros of bugs
the generator found).

EGAD_RANDOM_EXAMPLES=3000 searches longer; EGAD_SHRINK=1 shrinks a failing program.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

import egad
from egad.pytree import flatten
from tests.ad.gradcheck import NotComparable, check_gradients, scalar_loss
from tests.trees import assert_trees_close

MAX_DEPTH = 3
T = 3  # rows of xs
N_MAX = 3
THRESHOLDS = ("-0.5", "0.0", "0.3", "1.0")
_SOURCE_DIR = tempfile.mkdtemp(prefix="egad_function_random_")
atexit.register(shutil.rmtree, _SOURCE_DIR, ignore_errors=True)
# Shrinking a failing program can take minutes; set EGAD_SHRINK=1 to shrink one locally.
PHASES = tuple(Phase) if os.environ.get("EGAD_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate)
# EGAD_RANDOM_EXAMPLES=2000 runs a longer search (the default run stays under ~40 s).
EXAMPLES = int(os.environ.get("EGAD_RANDOM_EXAMPLES", "200"))
SETTINGS = dict(deadline=None, phases=PHASES, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- program trees ------------------------------------------------------------------------
# A statement is a tuple ("kind", ...); a block is a list of statements. Expressions and
# conditions are rendered to source while they are drawn (they hold no structure we need).


class Names:
    """Fresh names for loop counters, rows and temporaries."""

    def __init__(self):
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"


@st.composite
def int_exprs(draw, scope):
    options = ["c", "n"] + scope["counters"]
    first = draw(st.sampled_from(options))
    if draw(st.booleans()):
        return first
    return f"{first} + {draw(st.sampled_from(options + ['1', '2']))}"


@st.composite
def vectors(draw, scope, depth=2):
    """A float64 (2,) expression."""
    leaves = ["h", "x"] + scope["rows"]
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        kind = draw(st.sampled_from(("leaf", "leaf", "gather")))
        if kind == "gather":
            return f"xs[({draw(int_exprs(scope))}) % {T}]"
        return draw(st.sampled_from(leaves))
    kinds = ["tanh", "sin", "square", "maximum", "center", "scale_a", "half", "where", "add", "sub", "mul",
             "plus_count"]
    if scope["has_g"]:
        kinds.append("g")
    kind = draw(st.sampled_from(kinds))
    e = draw(vectors(scope, depth - 1))
    if kind == "tanh":
        return f"enp.tanh({e})"
    if kind == "sin":
        return f"enp.sin({e})"
    if kind == "square":
        return f"({e}) * ({e})"
    if kind == "maximum":
        return f"enp.maximum({e}, 0.2)"
    if kind == "center":
        return f"({e}) - enp.mean({e})"
    if kind == "scale_a":
        return f"a * ({e})"
    if kind == "half":
        return f"0.5 * ({e})"
    if kind == "where":
        return f"enp.where(({e}) > 0.1, {e}, -0.5 * ({draw(vectors(scope, depth - 1))}))"
    if kind == "g":
        return f"g({e})"
    if kind == "plus_count":
        return f"({e}) + 0.1 * ({draw(int_exprs(scope))})"
    other = draw(vectors(scope, depth - 1))
    op = {"add": "+", "sub": "-", "mul": "*"}[kind]
    return f"({e}) {op} ({other})"


@st.composite
def conditions(draw, scope, depth=1):
    """A scalar bool condition: traced (h, s, n, a, rows), static or either (c and
    counters are Python ints until a traced statement assigns them)."""
    if depth > 0 and draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(("not", "and", "or")))
        left = draw(conditions(scope, depth - 1))
        if kind == "not":
            return f"not ({left})"
        return f"({left}) {kind} ({draw(conditions(scope, depth - 1))})"
    atoms = ["sum", "max", "s", "c_mod", "c_lt", "n", "a", "chain"]
    if scope["counters"]:
        atoms += ["counter", "counter"]
    atom = draw(st.sampled_from(atoms))
    threshold = draw(st.sampled_from(THRESHOLDS))
    if atom == "sum":
        return f"enp.sum({draw(vectors(scope, 1))}) > {threshold}"
    if atom == "max":
        return f"enp.max({draw(vectors(scope, 1))}) < {threshold}"
    if atom == "s":
        return f"s > {threshold}"
    if atom == "chain":
        return f"-0.5 < enp.sum({draw(vectors(scope, 1))}) < 1.0"
    if atom == "c_mod":
        return "c % 2 == 0"
    if atom == "c_lt":
        return f"c < {draw(st.integers(1, 4))}"
    if atom == "n":
        return f"n > {draw(st.integers(0, 2))}"
    if atom == "a":
        return f"a > {threshold}"
    counter = draw(st.sampled_from(scope["counters"]))
    return draw(st.sampled_from((f"{counter} % 2 == 0", f"{counter} < 1", f"{counter} + c >= 2")))


def _nested(scope, **changes):
    new = dict(scope)
    for key, value in changes.items():
        new[key] = value
    return new


@st.composite
def statements(draw, scope, names: Names, depth: int, last: bool):
    """One statement. `depth` is how many compound statements may still nest;
    `last` whether it ends its block (an unconditional return may go there)."""
    simple = ["assign_h", "assign_h", "mix_h", "acc_s", "inc_c", "ternary"]
    compound = ["if", "if", "if_elif", "branch_tmp", "while", "for_static", "for_traced", "for_rows"]
    jumps = ["return"]
    if scope["in_loop"]:
        jumps += ["break", "continue"]
    kinds = simple + (compound if depth > 0 else []) + jumps
    kind = draw(st.sampled_from(kinds))
    if kind == "assign_h":
        return ("line", f"h = enp.tanh({draw(vectors(scope))})")
    if kind == "mix_h":
        return ("line", f"h = 0.5 * h + 0.5 * enp.tanh({draw(vectors(scope))})")
    if kind == "ternary":
        return ("line", f"h = enp.tanh({draw(vectors(scope))}) if {draw(conditions(scope))} else h * 0.5")
    if kind == "acc_s":
        if draw(st.booleans()):  # (never `h += ...`: numpy would update x in place through h = x)
            return ("line", f"s += 0.1 * enp.sum(enp.tanh({draw(vectors(scope))}))")
        return ("line", f"s = 0.5 * s + enp.sum(enp.tanh({draw(vectors(scope))}))")
    if kind == "inc_c":
        return ("line", draw(st.sampled_from(("c = c + 1", "c += 1"))))
    if kind in ("break", "continue"):
        if draw(st.integers(0, 4)) == 0 and last:
            return ("line", kind)  # unconditional, at the end of its block
        return ("if", [(draw(conditions(scope)), [("line", kind)])], None)
    if kind == "return":
        value = f"return enp.tanh({draw(vectors(scope))}), s, c"
        if last and scope["in_branch"] and draw(st.booleans()):
            return ("line", value)
        return ("if", [(draw(conditions(scope)), [("line", value)])], None)
    inner = depth - 1
    if kind in ("if", "if_elif"):
        arms = [(draw(conditions(scope)), draw(blocks(_nested(scope, in_branch=True), names, inner)))]
        if kind == "if_elif":
            arms.append((draw(conditions(scope)), draw(blocks(_nested(scope, in_branch=True), names, inner))))
        otherwise = draw(st.one_of(st.none(), blocks(_nested(scope, in_branch=True), names, inner)))
        return ("if", arms, otherwise)
    if kind == "branch_tmp":  # first assigned in both branches, used after the if
        tmp = names.fresh("t")
        then = [("line", f"{tmp} = {draw(vectors(scope))}")]
        otherwise = [("line", f"{tmp} = {draw(vectors(scope))}")]
        return ("block", [("if", [(draw(conditions(scope)), then)], otherwise),
                          ("line", f"h = enp.tanh(h + {tmp})")])
    if kind == "while":
        w = names.fresh("w")
        bound = draw(st.integers(1, 3))
        cond = draw(conditions(scope))
        # `w < bound` alone is a static condition: the loop stays Python until a traced
        # break or return inside it makes the test traced
        test = draw(st.sampled_from((f"({cond}) and {w} < {bound}", f"{w} < {bound} and ({cond})", f"{w} < {bound}")))
        body = draw(blocks(_nested(scope, in_loop=True, counters=scope["counters"] + [w]), names, inner))
        after = [("line", f"c = c + {w}")] if draw(st.booleans()) else []
        return ("block", [("line", f"{w} = 0"), ("while", test, [("line", f"{w} += 1")] + body)] + after)
    if kind in ("for_static", "for_traced"):
        i = names.fresh("i")
        if kind == "for_static":
            bounds = f"{draw(st.integers(1, 3))}"
        else:
            bounds = draw(st.sampled_from(("n", "n + 1", "1, n + 1", "n, 3", "c, n + 1")))
        body = draw(blocks(_nested(scope, in_loop=True, counters=scope["counters"] + [i]), names, inner))
        return ("for", i, f"range({bounds})", body)
    # for_rows
    r = names.fresh("r")
    body_scope = _nested(scope, in_loop=True, rows=scope["rows"] + [r])
    body = draw(blocks(body_scope, names, inner))
    if draw(st.booleans()):  # first assigned in the loop (before any jump), used after it
        last_name = names.fresh("last")
        body = [("line", f"{last_name} = {r} * 1.0")] + body
        return ("block", [("for", r, "xs", body), ("line", f"h = enp.tanh(h + {last_name})")])
    return ("for", r, "xs", body)


@st.composite
def blocks(draw, scope, names: Names, depth: int, min_size: int = 1, max_size: int = 3):
    size = draw(st.integers(min_size, max_size))
    return [draw(statements(scope, names, depth, last=(k == size - 1))) for k in range(size)]


G_SOURCE = [
    "def g(v):",
    "    if enp.sum(v) > 0.0:",
    "        return enp.tanh(v) * 0.9",
    "    return v * 0.5 + a",
]


@st.composite
def programs(draw):
    """The source text of a random `f(x, xs, n, a)`."""
    has_g = draw(st.booleans())
    scope = {"counters": [], "rows": [], "in_loop": False, "in_branch": False, "has_g": has_g}
    body = draw(blocks(scope, Names(), MAX_DEPTH, min_size=2, max_size=4))
    return render(body, has_g)


def render(body, has_g: bool) -> str:
    lines = ["import numpy as np", "import egad.numpy as enp", "", "", "def f(x, xs, n, a):"]
    if has_g:
        lines += ["    " + line for line in G_SOURCE]
    lines += ["    h = x", "    s = 0.0", "    c = 0"]
    _render_block(body, 1, lines)
    lines.append("    return h, s, c")
    return "\n".join(lines) + "\n"


def _render_block(block, indent: int, lines: list) -> None:
    for statement in block:
        _render_statement(statement, indent, lines)


def _render_statement(statement, indent: int, lines: list) -> None:
    pad = "    " * indent
    kind = statement[0]
    if kind == "line":
        lines.append(pad + statement[1])
    elif kind == "block":
        _render_block(statement[1], indent, lines)
    elif kind == "if":
        _, arms, otherwise = statement
        for k, (cond, body) in enumerate(arms):
            lines.append(f"{pad}{'if' if k == 0 else 'elif'} {cond}:")
            _render_block(body, indent + 1, lines)
        if otherwise is not None:
            lines.append(f"{pad}else:")
            _render_block(otherwise, indent + 1, lines)
    elif kind == "while":
        _, test, body = statement
        lines.append(f"{pad}while {test}:")
        _render_block(body, indent + 1, lines)
    elif kind == "for":
        _, target, iterable, body = statement
        lines.append(f"{pad}for {target} in {iterable}:")
        _render_block(body, indent + 1, lines)
    else:  # pragma: no cover
        raise AssertionError(statement)


def load(source: str):
    """Write `source` to a fresh .py file, import it, return its `f` (undecorated)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    module_name = f"egad_random_program_{digest}"
    path = os.path.join(_SOURCE_DIR, module_name + ".py")
    if module_name in sys.modules:
        return sys.modules[module_name].f
    with open(path, "w") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module.f


@st.composite
def arguments(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(2)
    xs = rng.standard_normal((T, 2))
    n = np.int64(draw(st.integers(0, N_MAX)))
    a = np.float64(rng.uniform(-1.0, 1.0))
    return x, xs, n, a


def argument_sets(seed: int) -> list[tuple]:
    """Arguments of one shape and dtype signature: every n with one draw of the data,
    then the same with `a` negated, then two fresh draws."""
    rng = np.random.default_rng(seed)
    x, xs, a = rng.standard_normal(2), rng.standard_normal((T, 2)), np.float64(rng.uniform(-1.0, 1.0))
    sets = [(x, xs, np.int64(n), a) for n in range(N_MAX + 1)]
    sets += [(x, xs, np.int64(n), -a) for n in range(N_MAX + 1)]
    for _ in range(2):
        sets.append((rng.standard_normal(2), rng.standard_normal((T, 2)), np.int64(rng.integers(0, N_MAX + 1)),
                     np.float64(rng.uniform(-1.0, 1.0))))
    return sets


def assert_same_outputs(got, want, context: str):
    """Equal to running the source directly; an int output (a Python int counter) must stay an int."""
    assert_trees_close(got, want, 1e-9, context, atol=1e-12)
    for k, (g, w) in enumerate(zip(flatten(got)[0], flatten(want)[0])):
        if np.asarray(w).dtype.kind in "iu":
            assert np.asarray(g).dtype.kind in "iu", f"{context}: output {k} dtype {np.asarray(g).dtype}, expected an int"


def assert_located_in_source(program, f, source: str) -> None:
    """Every binding's location is a line of the generated file (never generated code).
    Exempt: constants for Python-scalar *outputs* (`return h, 0.0, c`), which
    `egad.trace` materializes at its own call site, converted or not."""
    from egad.ir import walk_bindings

    path, count = f.__code__.co_filename, source.count("\n")
    stray = {(b.op, str(b.loc)) for b in walk_bindings(program.region)
             if (b.loc.file != path or not 1 <= b.loc.line <= count)
             and not (b.op == "const" and b.loc.file == os.path.abspath(__file__))}
    assert not stray, f"bindings located outside {os.path.basename(path)}: {sorted(stray)[:5]}"


def constructs(source: str, program) -> list[str]:
    """What a program exercised (for `--hypothesis-show-statistics`)."""
    from egad.ir import walk_bindings

    ops = {b.op for b in walk_bindings(program.region)}
    found = [f"traced {op}" for op in ("if", "while", "for") if op in ops]
    for word in ("break", "continue", "return enp", "elif", "while", "in xs", "range(n", "def g", "last"):
        if word in source:
            found.append(f"source has {word!r}")
    return found


# --- the tests --------------------------------------------------------------------------


def test_the_generator_renders_valid_python_that_runs():
    """A fixed program with every construct, rendered and run both ways."""
    body = [
        ("block", [("line", "w1 = 0"), ("while", "(enp.sum(h) > 0.0) and w1 < 3",
                                        [("line", "w1 += 1"), ("line", "h = enp.tanh(h * 2.0)"),
                                         ("if", [("c % 2 == 0", [("line", "continue")])], None),
                                         ("line", "c = c + 1")])]),
        ("for", "i2", "range(n + 1)", [("line", "h = enp.tanh(h + xs[(i2 + c) % 3])"),
                                       ("if", [("s > 1.0", [("line", "break")])], None),
                                       ("line", "s = 0.5 * s + enp.sum(enp.tanh(h))")]),
        ("for", "r3", "xs", [("if", [("enp.max(r3) < -0.5", [("line", "return enp.tanh(r3), s, c")])],
                                     [("line", "h = g(h - r3)")])]),
    ]
    source = render(body, has_g=True)
    f = load(source)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        args = (rng.standard_normal(2), rng.standard_normal((T, 2)), np.int64(seed % 4), np.float64(0.3))
        program = egad.trace(egad.function(f), *args)
        assert_same_outputs(egad.interpret(program, *args), f(*args), f"seed {seed}\n{source}")


# Hand-written programs for corners the generator reaches rarely (and minimal repros of
# bugs it found). Each is the body of `f(x, xs, n, a)` returning `h, s, c`.
FIXED_PROGRAMS = {
    "return_inside_traced_while": """
    c = 0
    while c < n:
        c += 1
        if c == 2:
            return x + 1.0, 0.0, c
    return x, 0.0, c
""",
    "returns_pruned_by_static_conditions_in_both_branches": """
    debug = False
    if a > 0.0:
        if debug:
            return x + 1.0, 0.0, 0
    else:
        if debug:
            return x * 3.0, 0.0, 0
    return x, 0.0, 0
""",
    "return_from_for_rows_inside_a_while": """
    c = 0
    h = x
    while c < 3 and enp.sum(h) < 5.0:
        c += 1
        for r in xs:
            h = h + enp.abs(r)
            if enp.max(h) > 2.5:
                return h, 1.0, c
    return h, 0.0, c
""",
    "return_from_for_rows_in_one_branch": """
    if a > 0.0:
        for r in xs:
            if enp.sum(r) > 0.5:
                return r * 2.0, 1.0, 1
    else:
        x = x * 3.0
    return x, 0.0, 0
""",
    "break_out_of_nested_loops": """
    h = x
    for r in xs:
        for i in range(n):
            if enp.sum(h) > 1.0:
                break
            h = h + r * 0.5
        if enp.max(h) > 2.0:
            break
    return h, 0.0, 0
""",
    "continue_in_a_traced_while": """
    c = 0
    h = x
    while c < n:
        c += 1
        if c % 2 == 0:
            continue
        h = enp.tanh(h + xs[c % 3])
    return h, 0.0, c
""",
    "while_true_with_a_traced_break": """
    h = x
    k = 0
    while True:
        h = enp.tanh(h * 1.3 + 0.2)
        k = k + 1
        if enp.sum(h) > 1.0 or k >= 6:
            break
    return h, 0.0, k
""",
    "while_condition_static_first_then_traced": """
    c = 0
    h = x
    while c < 3:
        if enp.sum(h) > 0.0:
            c = c + 2
        else:
            c = c + 1
        h = enp.tanh(h * 1.5 + 0.1)
    return h, 0.0, c
""",
    "loop_carried_pytree_in_a_while": """
    state = {"h": x, "k": 0, "acc": [0.0, x * 0.0]}
    while enp.sum(state["h"]) < 3.0 and state["k"] < 5:
        state = {"h": state["h"] + 1.0, "k": state["k"] + 1,
                 "acc": [state["acc"][0] + 1.0, state["acc"][1] + state["h"]]}
    return state["h"] + state["acc"][1], state["acc"][0], state["k"]
""",
    "ternary_and_chained_comparison": """
    h = x * 2.0 if enp.sum(x) > 0 else x - 1.0
    if -0.5 < enp.sum(h) < 0.5:
        h = h * 10.0
    s = 1.0 if a > 0.0 and not (n > 1) else 2.0
    return h, s, 0
""",
    "range_with_a_static_step_and_traced_bounds": """
    h = x
    c = 0
    for i in range(1, n + 3, 2):
        h = enp.tanh(h + 0.1 * i)
        c = c + i
    return h, 0.0, c
""",
    "function_defined_inside_a_traced_loop": """
    h = x
    for r in xs:
        def step(v):
            if enp.sum(v) > 0:
                return enp.tanh(v + r)
            return v - r
        h = step(h)
    return h, 0.0, 0
""",
    "variable_first_assigned_in_a_loop_used_after": """
    h = x
    for r in xs:
        last = r * a
        if enp.sum(last) > 0.0:
            continue
        h = h + last
    return h + last, 0.0, 0
""",
    "early_return_in_nested_def_inside_a_branch": """
    def clip(v):
        if enp.max(v) > 1.0:
            return v / enp.max(v)
        elif enp.min(v) < -1.0:
            return -v / enp.min(v)
        return v
    if n > 1:
        h = clip(x * 3.0)
    else:
        h = clip(xs[0] * a)
    return h, 0.0, 0
""",
}


def fixed_source(body: str) -> str:
    return "import numpy as np\nimport egad.numpy as enp\n\n\ndef f(x, xs, n, a):" + body


def fixed_arguments():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, xs, a = rng.standard_normal(2), rng.standard_normal((T, 2)), np.float64(rng.uniform(-1.0, 1.0))
        for n in range(N_MAX + 1):
            yield x, xs, np.int64(n), a


@pytest.mark.parametrize("name", sorted(FIXED_PROGRAMS))
def test_fixed_programs_match_running_them_directly(name):
    source = fixed_source(FIXED_PROGRAMS[name])
    f = load(source)
    for args in fixed_arguments():
        want = f(*args)
        program = egad.trace(egad.function(f), *args)
        assert_same_outputs(egad.interpret(program, *args), want, f"{name} with n={args[2]}, a={args[3]:.3f}\n{source}")
        assert_located_in_source(program, f, source)


@pytest.mark.parametrize("name", sorted(FIXED_PROGRAMS))
def test_fixed_programs_gradients_match_finite_differences(name):
    source = fixed_source(FIXED_PROGRAMS[name])
    f = load(source)
    compared = 0
    for k, args in enumerate(fixed_arguments()):
        if k % 3:
            continue  # a third of the points keeps this test fast
        try:
            result = check_gradients(scalar_loss(egad.function(f), k), args, wrt=(0, 1, 3))
        except NotComparable:
            continue
        compared += 1
        assert result.error <= 1e-6, f"{name} at n={args[2]}: {result.describe()}\n{source}"
    assert compared, f"{name}: no point kept its control path under perturbation"


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(source=programs(), seed=st.integers(0, 2**32 - 1))
def test_random_plain_python_programs_match_running_them_directly(source, seed):
    """One trace, run on several argument sets (every n, both signs of a, fresh data),
    so that the paths a program takes (early returns, breaks, trip counts) vary."""
    note(source)
    f = load(source)
    sets = argument_sets(seed)
    program = egad.trace(egad.function(f), *sets[0])
    assert_located_in_source(program, f, source)
    for args in sets:
        want = f(*args)  # the same source, plain Python on numpy values
        got = egad.interpret(program, *args)
        assert_same_outputs(got, want, f"traced egad.function vs plain Python at args = {args!r}")
    for construct in constructs(source, program):
        event(construct)


@settings(max_examples=max(EXAMPLES // 5, 20), **SETTINGS)
@given(source=programs(), args=arguments(), weights_seed=st.integers(0, 100))
def test_random_plain_python_gradients_match_finite_differences(source, args, weights_seed):
    note(source)
    note(f"args = {args!r}")
    f = load(source)
    loss = scalar_loss(egad.function(f), weights_seed)
    try:
        result = check_gradients(loss, args, wrt=(0, 1, 3))
    except NotComparable:
        event("gradient: not comparable (control path changes under the step)")
        return  # too many entries change their control path under a step of 1e-6
    event("gradient: compared 5+ entries" if result.compared >= 5 else "gradient: compared < 5 entries")
    assert result.error <= 1e-6, f"gradient does not match central differences: {result.describe()}\n{source}"
