"""Random well-typed control-flow programs: their gradients against central differences.

Hypothesis draws a *program description*, a small tree of statements and
expressions, and `build_program` turns it into an ordinary Python closure written
with egad's combinators and `egad.numpy`. The same closure runs two ways:

- eagerly on numpy arguments (the combinators and `enp` run in plain Python), and
- traced with `egad.trace` and run by `egad.interpret`,

which must agree (the sanity test); then `egad.grad` of a scalar loss of it must
match central differences (the gradient test, see `tests/ad/gradcheck.py`).

Every program has the signature `f(x, params, xs, k)`:
`x` a float64 vector (n,), `params = {"M": (n, n), "a": ()}` a pytree, `xs` a
sequence (T, n), `k` an int64 scalar used as a traced loop bound. Gradients are
taken w.r.t. x, params and xs.

Statements (nesting up to depth 3): `fori_loop` with static or traced bounds,
`while_loop` whose trip count depends on the data (an int counter bounded by
`k + c` and a float condition), `cond`, `switch` (indices from argmax or a loop
counter, out of range ones clamped), `scan` (with ys, forward or reverse).
Expressions: tanh, sin, cos, exp of bounded values, + - *, `x * x`, @ with M (both
sides), sums, means, `enp.where` on comparisons, `enp.maximum`, gathers `xs[i % T]`
with a loop counter, row writes `xs.at[i % T].set(v)` / `.add(v)` (the `update` and
`index_add` ops), scaling by the traced scalar `a`, and closures over every
enclosing state (`h0`, `h1`, ... are the states of the enclosing levels, `i1`, ...
their counters, `r1`, ... their scanned rows). Loop states are squashed with tanh
each iteration, so values stay bounded and trip counts stay at most 6.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

import egad
import egad.numpy as enp
from egad.pytree import flatten

from .gradcheck import NotComparable, assert_gradients_match, scalar_loss

MAX_DEPTH = 3
WRT = (0, 1, 2)
K_MAX = 3  # the traced bound k is drawn in [0, K_MAX]

# --- expressions --------------------------------------------------------------------
# An expression is a nested tuple ("op", *children); every expression is a float64
# vector of shape (n,). `scope` is what names exist: vectors (states, rows, x) and int
# counters.

UNARY = ("tanh", "sin", "cos", "exp_tanh", "square", "matvec", "matvec_t", "center", "scale_a")
BINARY = ("add", "sub", "mul", "maximum", "scale_by_sum")


@st.composite
def expressions(draw, scope: dict, depth: int = 2):
    vectors, counters = scope["vectors"], scope["counters"]
    leaves = [("var", name) for name in vectors]
    if counters:
        leaves += [("gather", name, offset) for name in counters for offset in (0, 1)]
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))
    kinds = ("unary", "unary", "binary", "binary", "where", "const") + (("row_write",) if counters else ())
    kind = draw(st.sampled_from(kinds))
    if kind == "unary":
        return (draw(st.sampled_from(UNARY)), draw(expressions(scope, depth - 1)))
    if kind == "binary":
        op, left, right = draw(st.sampled_from(BINARY)), draw(expressions(scope, depth - 1)), \
            draw(expressions(scope, depth - 1))
        if op == "sub" and left == right:
            op = "add"  # h - h is identically zero: a program with nothing to differentiate
        return (op, left, right)
    if kind == "where":
        return ("where", draw(expressions(scope, depth - 1)), draw(st.sampled_from((-0.3, 0.0, 0.4))),
                draw(expressions(scope, depth - 1)), draw(expressions(scope, depth - 1)))
    if kind == "row_write":
        return (draw(st.sampled_from(("overwrite", "accumulate"))), draw(st.sampled_from(counters)),
                draw(expressions(scope, depth - 1)))
    return ("const", draw(st.sampled_from((-1.5, -0.5, 0.5, 2.0))), draw(expressions(scope, depth - 1)))


def write_row(xs, row: int, value, accumulate: bool):
    """`xs` with `value` written to (or added into) one row: `.at[row]` when traced,
    numpy's item assignment on a copy when eager (the sanity test compares the two)."""
    if isinstance(xs, np.ndarray):
        out = xs.copy()
        if accumulate:
            out[row] += value
        else:
            out[row] = value
        return out
    return xs.at[row].add(value) if accumulate else xs.at[row].set(value)


def evaluate(e, env: dict, T: int):
    """The value of expression `e` (traced or numpy, whichever `env` holds)."""
    op, args = e[0], e[1:]
    if op == "var":
        return env[args[0]]
    if op == "gather":
        name, offset = args
        return env["xs"][(env[name] + offset) % T]
    if op == "const":
        return args[0] * evaluate(args[1], env, T)
    if op == "where":
        test, threshold, then, other = args
        return enp.where(evaluate(test, env, T) > threshold, evaluate(then, env, T), evaluate(other, env, T))
    if op == "overwrite":  # functional row update (the `update` op): the old row gets no gradient
        buffer = write_row(env["xs"], (env[args[0]] + 1) % T, evaluate(args[1], env, T), accumulate=False)
        return enp.mean(buffer * env["xs"], axis=0)
    if op == "accumulate":  # scatter-add (the `index_add` op)
        buffer = write_row(env["xs"], env[args[0]] % T, evaluate(args[1], env, T), accumulate=True)
        return enp.mean(buffer * buffer, axis=0)
    values = [evaluate(a, env, T) for a in args]
    M, a = env["params"]["M"], env["params"]["a"]
    if op == "tanh":
        return enp.tanh(values[0])
    if op == "sin":
        return enp.sin(values[0])
    if op == "cos":
        return enp.cos(values[0])
    if op == "exp_tanh":
        return enp.exp(enp.tanh(values[0]))
    if op == "square":
        return values[0] * values[0]
    if op == "matvec":
        return values[0] @ M
    if op == "matvec_t":
        return enp.matmul(M, values[0])
    if op == "center":
        return values[0] - enp.mean(values[0])
    if op == "scale_a":
        return a * values[0]
    if op == "add":
        return values[0] + values[1]
    if op == "sub":
        return values[0] - values[1]
    if op == "mul":
        return values[0] * values[1]
    if op == "maximum":
        return enp.maximum(values[0], values[1])
    if op == "scale_by_sum":
        return values[0] * enp.tanh(enp.sum(values[1]))
    raise AssertionError(f"unknown expression {op}")


def show(e) -> str:
    op, args = e[0], e[1:]
    if op == "var":
        return args[0]
    if op == "gather":
        return f"xs[({args[0]} + {args[1]}) % T]"
    if op == "const":
        return f"{args[0]} * {show(args[1])}"
    if op == "where":
        return f"where({show(args[0])} > {args[1]}, {show(args[2])}, {show(args[3])})"
    if op == "overwrite":
        return f"mean(xs.at[({args[0]} + 1) % T].set({show(args[1])}) * xs, axis=0)"
    if op == "accumulate":
        return f"mean(xs.at[{args[0]} % T].add({show(args[1])}) ** 2, axis=0)"
    inner = [show(a) for a in args]
    forms = {
        "tanh": "tanh({0})", "sin": "sin({0})", "cos": "cos({0})", "exp_tanh": "exp(tanh({0}))",
        "square": "({0}) * ({0})", "matvec": "({0}) @ M", "matvec_t": "M @ ({0})", "center": "center({0})",
        "scale_a": "a * ({0})", "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
        "maximum": "maximum({0}, {1})", "scale_by_sum": "({0}) * tanh(sum({1}))",
    }
    return forms[op].format(*inner)


# --- statements ---------------------------------------------------------------------
# A block is a tuple of statements; each statement replaces the state `h{level}`.
#   ("assign", e)                                h = tanh(e)
#   ("fori", lo, hi, update, block)              hi: an int or "k" (the traced bound)
#   ("while", extra_trips, threshold, update, block)
#   ("cond", predicate, then_block, else_block)
#   ("switch", index, blocks)                    index: ("argmax", e) or ("counter", name)
#   ("scan", reverse, update, y, block)
# `update` combines the loop state with the block's result: "tanh" or "mix".


def _inner_scope(scope: dict, level: int, counter: bool = False, row: bool = False) -> dict:
    vectors = list(scope["vectors"]) + [f"h{level}"]
    counters = list(scope["counters"])
    if counter:
        counters.append(f"i{level}")
    if row:
        vectors.append(f"r{level}")
    return {"vectors": vectors, "counters": counters}


@st.composite
def blocks(draw, scope: dict, level: int, depth: int):
    count = draw(st.integers(1, 2))
    return tuple(draw(statements(scope, level, depth)) for _ in range(count))


@st.composite
def statements(draw, scope: dict, level: int, depth: int):
    kinds = ["assign"] + (["fori", "while", "cond", "switch", "scan"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    inner = level + 1
    if kind == "assign":
        return ("assign", draw(expressions(scope, 2)))
    update = draw(st.sampled_from(("tanh", "mix")))
    if kind == "fori":
        lo = draw(st.integers(0, 1))
        hi = draw(st.sampled_from((0, 2, 3, "k", "k")))
        body = draw(blocks(_inner_scope(scope, inner, counter=True), inner, depth - 1))
        return ("fori", lo, hi, update, body)
    if kind == "while":
        body = draw(blocks(_inner_scope(scope, inner, counter=True), inner, depth - 1))
        return ("while", draw(st.integers(0, 2)), draw(st.sampled_from((0.3, 1.0, 2.5))), update, body)
    if kind == "cond":
        branch_scope = _inner_scope(scope, inner)
        # sum(center(x)) is zero up to rounding: the branch would be a coin flip that
        # compiled code (another summation order) may call the other way
        predicate = draw(expressions(scope, 1).filter(lambda e: not _sums_to_zero(e)))
        return ("cond", predicate, draw(blocks(branch_scope, inner, depth - 1)),
                draw(blocks(branch_scope, inner, depth - 1)))
    if kind == "switch":
        index_kinds = [("argmax", draw(expressions(scope, 1)))]
        index_kinds += [("counter", name) for name in scope["counters"]]
        index = draw(st.sampled_from(index_kinds))
        n_branches = draw(st.integers(2, 3))
        branch_scope = _inner_scope(scope, inner)
        return ("switch", index, tuple(draw(blocks(branch_scope, inner, depth - 1)) for _ in range(n_branches)))
    body_scope = _inner_scope(scope, inner, row=True)
    body = draw(blocks(body_scope, inner, depth - 1))
    return ("scan", draw(st.booleans()), update, draw(expressions(body_scope, 1)), body)


def _sums_to_zero(expression) -> bool:
    return expression[0] == "center" or (expression[0] == "scale_a" and _sums_to_zero(expression[1]))


def _update(kind: str, state, result):
    if kind == "tanh":
        return enp.tanh(result)
    return 0.5 * state + 0.5 * enp.tanh(result)


def run_block(block, env: dict, level: int, T: int) -> dict:
    name = f"h{level}"
    for statement in block:
        env = dict(env)
        env[name] = run_statement(statement, env, level, T)
    return env


def run_statement(statement, env: dict, level: int, T: int):
    kind, state, inner = statement[0], env[f"h{level}"], level + 1
    h_inner, i_inner = f"h{inner}", f"i{inner}"
    if kind == "assign":
        return enp.tanh(evaluate(statement[1], env, T))
    if kind == "fori":
        _, lo, hi, update, body = statement
        upper = env["k"] if hi == "k" else hi

        def fori_body(i, h):
            out = run_block(body, {**env, h_inner: h, i_inner: i}, inner, T)
            return _update(update, h, out[h_inner])

        return egad.fori_loop(lo, upper, fori_body, state)
    if kind == "while":
        _, extra_trips, threshold, update, body = statement

        def keep_going(carry):
            h, count = carry
            return enp.logical_and(count < env["k"] + extra_trips, enp.sum(h * h) < threshold * h.shape[0])

        def while_body(carry):
            h, count = carry
            out = run_block(body, {**env, h_inner: h, i_inner: count}, inner, T)
            return _update(update, h, out[h_inner]), count + 1

        h, _ = egad.while_loop(keep_going, while_body, (state, 0))
        return h
    if kind == "cond":
        _, predicate, then_block, else_block = statement

        def branch(block):
            return lambda h: run_block(block, {**env, h_inner: h}, inner, T)[h_inner]

        return egad.cond(enp.sum(evaluate(predicate, env, T)) > 0, branch(then_block), branch(else_block), state)
    if kind == "switch":
        _, index, branch_blocks = statement
        if index[0] == "argmax":
            selector = enp.argmax(evaluate(index[1], env, T))
        else:
            selector = env[index[1]] - 1  # -1 is clamped to branch 0

        def branch(block):
            return lambda h: run_block(block, {**env, h_inner: h}, inner, T)[h_inner]

        return egad.switch(selector, [branch(b) for b in branch_blocks], state)
    if kind == "scan":
        _, reverse, update, y_expr, body = statement

        def step(h, row):
            out = run_block(body, {**env, h_inner: h, f"r{inner}": row}, inner, T)
            return _update(update, h, out[h_inner]), enp.tanh(evaluate(y_expr, out, T))

        h, ys = egad.scan(step, state, env["xs"], reverse=reverse)
        return h + 0.25 * enp.mean(ys, axis=0)
    raise AssertionError(f"unknown statement {kind}")


def build_program(description):
    """The Python closure `f(x, params, xs, k)` a description stands for."""
    start, block = description

    def f(x, params, xs, k):
        T = xs.shape[0]
        env = {"x": x, "params": params, "xs": xs, "k": k}
        env["h0"] = enp.tanh(evaluate(start, env, T))
        out = run_block(block, env, 0, T)
        h = out["h0"]
        return h, enp.sum(h * h)

    return f


def show_block(block, level: int, indent: str = "    ") -> list[str]:
    h, inner = f"h{level}", level + 1
    lines = []
    for statement in block:
        kind = statement[0]
        if kind == "assign":
            lines.append(f"{indent}{h} = tanh({show(statement[1])})")
        elif kind == "fori":
            _, lo, hi, update, body = statement
            lines.append(f"{indent}{h} = fori_loop({lo}, {hi}) with (i{inner}, h{inner}), update={update}:")
            lines += show_block(body, inner, indent + "    ")
        elif kind == "while":
            _, extra, threshold, update, body = statement
            lines.append(f"{indent}{h} = while (i{inner} < k + {extra} and sum(h{inner}**2) < {threshold} * n) "
                         f"with (h{inner}, i{inner}), update={update}:")
            lines += show_block(body, inner, indent + "    ")
        elif kind == "cond":
            _, predicate, then_block, else_block = statement
            lines.append(f"{indent}{h} = cond(sum({show(predicate)}) > 0, operand h{inner}):")
            lines += show_block(then_block, inner, indent + "    ")
            lines.append(f"{indent}  else:")
            lines += show_block(else_block, inner, indent + "    ")
        elif kind == "switch":
            _, index, branch_blocks = statement
            selector = f"argmax({show(index[1])})" if index[0] == "argmax" else f"{index[1]} - 1"
            lines.append(f"{indent}{h} = switch({selector}, operand h{inner}):")
            for k, b in enumerate(branch_blocks):
                lines.append(f"{indent}  branch {k}:")
                lines += show_block(b, inner, indent + "    ")
        else:
            _, reverse, update, y_expr, body = statement
            lines.append(f"{indent}{h} = scan over xs (reverse={reverse}) with (h{inner}, r{inner}), "
                         f"update={update}, y = tanh({show(y_expr)}); then + 0.25 * mean(ys):")
            lines += show_block(body, inner, indent + "    ")
    return lines


def show_program(description) -> str:
    start, block = description
    lines = ["def f(x, params={M, a}, xs, k):", f"    h0 = tanh({show(start)})"]
    lines += show_block(block, 0)
    lines.append("    return h0, sum(h0 * h0)")
    return "\n".join(lines)


TOP_SCOPE = {"vectors": ["x"], "counters": []}


@st.composite
def program_descriptions(draw):
    start = draw(expressions(TOP_SCOPE, 1))
    top_scope = _inner_scope(TOP_SCOPE, 0)
    block = draw(blocks(top_scope, 0, MAX_DEPTH))
    return start, block


@st.composite
def arguments(draw):
    n = draw(st.integers(2, 3))
    T = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    params = {"M": 0.6 * rng.standard_normal((n, n)) / np.sqrt(n), "a": np.asarray(rng.uniform(0.5, 1.5))}
    xs = rng.standard_normal((T, n))
    k = np.int64(draw(st.integers(0, K_MAX)))
    return x, params, xs, k


def _assert_same_values(got, want, context: str):
    got_leaves, got_tree = flatten(got)
    want_leaves, want_tree = flatten(want)
    assert got_tree == want_tree, context
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{context}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=context)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments())
def test_traced_program_matches_eager_run(description, args):
    note(show_program(description))
    f = build_program(description)
    program = egad.trace(f, *args)
    _assert_same_values(egad.interpret(program, *args), f(*args), "interpret(trace(f)) vs f run eagerly")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(description=program_descriptions(), args=arguments(), loss_seed=st.integers(0, 3))
def test_gradient_matches_central_differences(description, args, loss_seed):
    note(show_program(description))
    f = build_program(description)
    loss = scalar_loss(f, loss_seed)
    primal = egad.trace(loss, *args)
    if not np.isfinite(egad.interpret(primal, *args)):
        reject()
    try:
        result = assert_gradients_match(loss, args, WRT, primal=primal, context="the random program above")
    except NotComparable:
        reject()
    note(result.describe())
