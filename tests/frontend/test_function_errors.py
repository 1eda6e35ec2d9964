"""`egad.function`: the error contract, source locations, static vs traced control flow,
and eager calls (issue 8).

- Unconvertible constructs under a traced condition (`try`, `yield`, `global` and
  `nonlocal` writes) raise `egad.EgadError` naming the construct and the user's
  file:line; the same constructs outside traced control flow are fine.
- A variable assigned in only one branch of a traced `if` raises `egad.EgadError`
  when used after it (naming it); unused, or under a static `if`, it is fine.
- Errors raised inside converted code and the IR's binding locations point at the
  user's original file and lines (not at generated code).
- Static Python control flow stays Python (unrolled, pruned); traced control flow
  becomes one combinator.
- Called on numpy values outside tracing, the decorated function is the original.
"""
from __future__ import annotations

import inspect
import os
from collections import Counter

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.ir import walk_bindings

HERE = os.path.abspath(__file__)
BASENAME = os.path.basename(__file__)


def line_of(fn, marker: str) -> int:
    """The absolute line number of the (unique) line of `fn`'s source containing `marker`."""
    lines, first = inspect.getsourcelines(inspect.unwrap(fn))
    hits = [first + k for k, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__name__}"
    return hits[0]


def line_range(fn) -> range:
    lines, first = inspect.getsourcelines(inspect.unwrap(fn))
    return range(first, first + len(lines))


def names_a_line(text: str, lines) -> bool:
    """Whether the message names this file at one of `lines`."""
    return any(f"{BASENAME}:{line}" in text for line in lines)


def ops_of(program) -> Counter:
    return Counter(b.op for b in walk_bindings(program.region))


X = np.array([0.5, -0.25, 1.5])
XS = np.array([[1.0, 2.0], [-3.0, 0.5], [0.25, 0.75]])


# --- unconvertible constructs under a traced condition --------------------------------------


def try_under_traced_if(x):
    if enp.sum(x) > 0:
        try:  # MARK-try
            x = x * 2.0
        except ValueError:
            x = x - 1.0
    return x


def test_try_under_a_traced_if_raises_naming_try_and_its_line():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(try_under_traced_if), X)
    text = str(info.value)
    assert "try" in text, text
    assert names_a_line(text, [line_of(try_under_traced_if, "MARK-try")]), text


def try_under_traced_while(x):
    while enp.sum(x) < 10.0:
        try:  # MARK-try
            x = x * 2.0 + 1.0
        finally:
            pass
    return x


def test_try_under_a_traced_while_raises_naming_try_and_its_line():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(try_under_traced_while), np.abs(X))
    text = str(info.value)
    assert "try" in text, text
    assert names_a_line(text, [line_of(try_under_traced_while, "MARK-try")]), text


def try_outside_traced_control_flow(x, flag):
    try:
        y = x * 2.0
    except ValueError:
        y = x
    if flag:  # static (static_argnums)
        try:
            y = y + 1.0
        except ValueError:
            pass
    for i in range(2):  # static
        try:
            y = enp.tanh(y)
        except ValueError:
            pass
    return y


def test_try_outside_traced_control_flow_is_fine():
    f = egad.function(try_outside_traced_control_flow)
    program = egad.trace(f, X, True, static_argnums=(1,))
    np.testing.assert_allclose(egad.interpret(program, X, True), np.tanh(np.tanh(X * 2.0 + 1.0)), rtol=1e-12)


def generator_under_traced_if(x):
    if enp.sum(x) > 0:
        yield x * 2.0  # MARK-yield
    yield x


def test_yield_raises_naming_yield_and_its_line():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(generator_under_traced_if), X)
    text = str(info.value)
    assert "yield" in text, text
    assert names_a_line(text, [line_of(generator_under_traced_if, "MARK-yield")]), text


def del_under_traced_if(x):
    scratch = x * 2.0
    if enp.sum(x) > 0:
        del scratch  # MARK-del
    return x


def test_del_under_a_traced_if_raises_naming_del_and_its_line():
    """Python's `del` on one path leaves the name unbound on the other: no value to carry."""
    with pytest.raises(egad.UnsupportedError, match="`del` statement") as info:
        egad.trace(egad.function(del_under_traced_if), X)
    assert names_a_line(str(info.value), [line_of(del_under_traced_if, "MARK-del")]), str(info.value)


def assert_on_traced_value(x):
    assert x.shape[0] == 3  # static: checked while tracing
    assert enp.sum(x) > 0, "positive"  # MARK-assert
    return x * 2.0


def test_an_assert_on_a_traced_value_is_refused_naming_its_line_and_a_static_one_is_checked():
    """jax.jit refuses it too; dropping it would skip a check the user wrote."""
    with pytest.raises(egad.TracerConversionError, match="assert on a traced value") as info:
        egad.trace(egad.function(assert_on_traced_value), X)
    assert names_a_line(str(info.value), [line_of(assert_on_traced_value, "MARK-assert")]), str(info.value)
    with pytest.raises(AssertionError):
        egad.trace(egad.function(assert_on_traced_value), X[:2])
    np.testing.assert_array_equal(egad.function(assert_on_traced_value)(X), X * 2.0)  # eager: plain Python


GLOBAL_FLAG = 0


def global_write_under_traced_if(x):
    global GLOBAL_FLAG
    if enp.sum(x) > 0:
        GLOBAL_FLAG = 1  # MARK-global-write
        x = x * 2.0
    return x


def test_global_write_under_a_traced_if_raises_naming_global_and_its_line():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(global_write_under_traced_if), X)
    text = str(info.value)
    assert "global" in text, text
    lines = [line_of(global_write_under_traced_if, "MARK-global-write"),
             line_of(global_write_under_traced_if, "global GLOBAL_FLAG")]
    assert names_a_line(text, lines), text
    assert GLOBAL_FLAG == 0


def global_write_in_traced_loop(xs):
    global GLOBAL_FLAG
    total = enp.zeros(())
    for row in xs:
        GLOBAL_FLAG = GLOBAL_FLAG + 1  # MARK-global-loop
        total = total + enp.sum(row)
    return total


def test_global_write_inside_a_traced_loop_raises():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(global_write_in_traced_loop), XS)
    text = str(info.value)
    assert "global" in text, text
    lines = [line_of(global_write_in_traced_loop, "MARK-global-loop"),
             line_of(global_write_in_traced_loop, "global GLOBAL_FLAG")]
    assert names_a_line(text, lines), text


SCALE = 3.0


def global_read_under_traced_if(x):
    if enp.sum(x) > 0:
        x = x * SCALE
    else:
        x = x / SCALE
    return x


def test_reading_a_global_under_a_traced_if_is_fine():
    f = egad.function(global_read_under_traced_if)
    for x in (X, -X):
        np.testing.assert_allclose(egad.interpret(egad.trace(f, x), x), global_read_under_traced_if(x), rtol=1e-12)


def nonlocal_write_under_traced_if(x):
    count = 0

    def bump(v):
        nonlocal count
        if enp.sum(v) > 0:
            count = count + 1  # MARK-nonlocal-write
            v = v * 2.0
        return v

    return bump(x), count


def test_nonlocal_write_under_a_traced_if_raises_naming_nonlocal():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(nonlocal_write_under_traced_if), X)
    text = str(info.value)
    assert "nonlocal" in text, text
    lines = [line_of(nonlocal_write_under_traced_if, "MARK-nonlocal-write"),
             line_of(nonlocal_write_under_traced_if, "nonlocal count")]
    assert names_a_line(text, lines), text


# --- variables assigned in one branch only -------------------------------------------------


def one_branch_then_used(x):
    if enp.sum(x) > 0:  # MARK-if
        only_then = x * 2.0  # MARK-assign
    return only_then + 1.0  # MARK-use


def test_a_variable_assigned_in_one_traced_branch_raises_when_used():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(one_branch_then_used), X)
    text = str(info.value)
    assert "only_then" in text, text
    lines = [line_of(one_branch_then_used, marker) for marker in ("MARK-if", "MARK-assign", "MARK-use")]
    assert names_a_line(text, lines), text


def one_else_branch_then_used(x):
    if enp.sum(x) > 0:  # MARK-if
        x = x + 1.0
    elif enp.max(x) > 1.0:
        only_elif = x * 2.0
    else:
        x = x - 1.0
    return x * only_elif  # MARK-use


def test_a_variable_assigned_in_one_elif_branch_raises_when_used():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(one_else_branch_then_used), X)
    assert "only_elif" in str(info.value), str(info.value)


def one_branch_unused(x):
    if enp.sum(x) > 0:
        scratch = x * 2.0
        x = scratch + 1.0
    return x


def test_a_variable_assigned_in_one_traced_branch_but_not_used_after_is_fine():
    f = egad.function(one_branch_unused)
    for x in (X, -X):
        np.testing.assert_allclose(egad.interpret(egad.trace(f, x), x), one_branch_unused(x), rtol=1e-12)


def one_branch_static(x, flag):
    if flag:  # static
        only_then = x * 2.0
    return only_then + 1.0


def test_a_variable_assigned_under_a_static_if_follows_python():
    f = egad.function(one_branch_static)
    program = egad.trace(f, X, True, static_argnums=(1,))
    np.testing.assert_allclose(egad.interpret(program, X, True), X * 2.0 + 1.0, rtol=1e-12)
    with pytest.raises((NameError, egad.EgadError)):  # Python's own UnboundLocalError, or egad's
        egad.trace(f, X, False, static_argnums=(1,))


def both_branches_first_assigned(x):
    if enp.sum(x) > 0:
        y = x * 2.0
        label = enp.ones(())
    else:
        y = -x
        label = enp.zeros(())
    return y + label


def test_variables_first_assigned_in_both_branches_are_defined_after():
    f = egad.function(both_branches_first_assigned)
    for x in (X, -X):
        program = egad.trace(f, x)
        assert ops_of(program)["if"] == 1
        np.testing.assert_allclose(egad.interpret(program, x), both_branches_first_assigned(x), rtol=1e-12)


def first_assigned_in_traced_loop(xs):
    for row in xs:
        last = row * 2.0
    return last


def test_a_variable_first_assigned_in_a_traced_loop_holds_the_last_iteration():
    program = egad.trace(egad.function(first_assigned_in_traced_loop), XS)
    assert ops_of(program)["for"] == 1
    np.testing.assert_allclose(egad.interpret(program, XS), XS[-1] * 2.0, rtol=1e-12)


# --- errors inside converted code point at the user's line -----------------------------------


def shape_error_in_converted_loop(x, W):
    h = x
    while enp.sum(h) < 10.0:
        h = enp.abs(h @ W) + 1.0  # MARK-bad-matmul
    return h


def test_an_error_inside_a_converted_while_names_the_users_line():
    W = np.ones((2, 2))  # x has 3 entries: h @ W does not fit
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(shape_error_in_converted_loop), X, W)
    assert names_a_line(str(info.value), [line_of(shape_error_in_converted_loop, "MARK-bad-matmul")]), \
        str(info.value)


def numpy_call_in_converted_branch(x):
    if enp.sum(x) > 0:
        x = np.tanh(x)  # MARK-np-tanh
    return x


def test_a_numpy_call_inside_a_converted_branch_names_the_users_line():
    with pytest.raises(egad.EgadError) as info:
        egad.trace(egad.function(numpy_call_in_converted_branch), X)
    text = str(info.value)
    assert "enp.tanh" in text, text
    assert names_a_line(text, [line_of(numpy_call_in_converted_branch, "MARK-np-tanh")]), text


# --- IR source locations ------------------------------------------------------------------


def doubling(x):
    h = x
    while enp.sum(h) < 10.0:  # MARK-while
        h = h * 2  # MARK-double
    if enp.max(h) > 20.0:  # MARK-if
        h = enp.tanh(h)  # MARK-tanh
    for i in range(3):
        h = h + 1.0
    return h


def test_ir_locations_point_at_the_original_lines():
    program = egad.trace(egad.function(doubling), np.abs(X) + 0.1)
    bindings = list(walk_bindings(program.region))
    by_op = {}
    for b in bindings:
        by_op.setdefault(b.op, []).append(b)
    double_line = line_of(doubling, "MARK-double")
    muls = by_op.get("mul", [])
    assert muls and all(b.loc.file == HERE and b.loc.line == double_line for b in muls), \
        [(b.op, b.loc) for b in muls]
    (loop,) = by_op["while"]
    assert loop.loc.file == HERE and loop.loc.line == line_of(doubling, "MARK-while"), loop.loc
    (branch,) = by_op["if"]
    assert branch.loc.file == HERE and branch.loc.line == line_of(doubling, "MARK-if"), branch.loc
    (tanh,) = by_op["tanh"]
    assert tanh.loc.file == HERE and tanh.loc.line == line_of(doubling, "MARK-tanh"), tanh.loc
    # nothing is attributed to generated code or to egad's own files
    lines = line_range(doubling)
    stray = [(b.op, b.loc) for b in bindings if b.loc.file != HERE or b.loc.line not in lines]
    assert not stray, f"bindings located outside doubling's source: {stray}"
    assert f"{BASENAME}:{double_line}" in str(program)


def nested_helper(xs, n):
    def step(h, row):
        if enp.sum(row) > 0:
            return enp.tanh(h + row)  # MARK-nested-tanh
        return h * 0.5
    h = enp.zeros_like(xs[0])
    for i in range(n):
        h = step(h, xs[i])
    return h


def test_ir_locations_inside_a_converted_nested_function():
    n = np.int64(3)
    program = egad.trace(egad.function(nested_helper), XS, n)
    tanhs = [b for b in walk_bindings(program.region) if b.op == "tanh"]
    assert len(tanhs) == 1
    assert tanhs[0].loc.file == HERE and tanhs[0].loc.line == line_of(nested_helper, "MARK-nested-tanh")
    np.testing.assert_allclose(egad.interpret(program, XS, n), nested_helper(XS, n), rtol=1e-12)


# --- static control flow stays Python; traced control flow is one combinator -------------------


def repeat_tanh(x, n):
    h = x
    for i in range(n):
        h = enp.tanh(h + i)
    return h


def test_static_range_is_unrolled_and_a_traced_range_is_one_loop():
    f = egad.function(repeat_tanh)
    unrolled = egad.trace(f, X, 3, static_argnums=(1,))
    counts = ops_of(unrolled)
    assert counts["tanh"] == 3 and counts["for"] == 0 and counts["while"] == 0, unrolled
    np.testing.assert_allclose(egad.interpret(unrolled, X, 3), repeat_tanh(X, 3), rtol=1e-12)

    looped = egad.trace(f, X, np.int64(3))
    counts = ops_of(looped)
    assert counts["tanh"] == 1 and counts["for"] == 1, looped
    for n in range(4):
        np.testing.assert_allclose(egad.interpret(looped, X, np.int64(n)), repeat_tanh(X, n), rtol=1e-12)


def literal_range(x):
    h = x
    for i in range(3):
        h = enp.tanh(h)
    return h


def test_a_literal_range_is_unrolled():
    counts = ops_of(egad.trace(egad.function(literal_range), X))
    assert counts["tanh"] == 3 and counts["for"] == 0


def static_while_and_if(x, k):
    h = x
    i = 0
    while i < k:  # static
        if i % 2 == 0:  # static
            h = enp.tanh(h)
        else:
            h = enp.sin(h)
        i += 1
    return h


def test_static_while_and_if_are_unrolled_and_pruned():
    program = egad.trace(egad.function(static_while_and_if), X, 3, static_argnums=(1,))
    counts = ops_of(program)
    assert counts["tanh"] == 2 and counts["sin"] == 1, program
    assert counts["while"] == 0 and counts["if"] == 0, program
    np.testing.assert_allclose(egad.interpret(program, X, 3), static_while_and_if(X, 3), rtol=1e-12)


def static_and_traced_conditions(x, debug):
    if debug and enp.sum(x) > 0:  # debug is static: when False, the traced half is never looked at
        x = x * 10.0
    if not debug:
        x = x + 1.0
    return x


def test_and_short_circuits_on_a_static_value():
    program = egad.trace(egad.function(static_and_traced_conditions), X, False, static_argnums=(1,))
    counts = ops_of(program)
    assert counts["if"] == 0 and counts["gt"] == 0, program
    np.testing.assert_allclose(egad.interpret(program, X, False), X + 1.0)
    program = egad.trace(egad.function(static_and_traced_conditions), X, True, static_argnums=(1,))
    assert ops_of(program)["if"] == 1, program
    np.testing.assert_allclose(egad.interpret(program, X, True), X * 10.0)


def rows_loop(xs):
    total = enp.zeros(xs.shape[1:])
    for row in xs:
        total = total + enp.tanh(row)
    return total


def test_iterating_a_traced_array_is_one_loop():
    program = egad.trace(egad.function(rows_loop), XS)
    counts = ops_of(program)
    assert counts["tanh"] == 1 and counts["for"] + counts["while"] == 1, program
    np.testing.assert_allclose(egad.interpret(program, XS), np.sum(np.tanh(XS), axis=0), rtol=1e-12)


# --- eager calls ------------------------------------------------------------------------------

CALLS: list = []


def eager_side_effects(x, n):
    CALLS.append("called")
    h = x
    for i in range(n):
        CALLS.append(i)
        if np.sum(h) > 0:  # plain numpy, only valid when run eagerly
            h = enp.tanh(h) - 0.5
        else:
            h = h * 2.0
    return h


def test_an_eager_call_runs_the_original_python_function():
    f = egad.function(eager_side_effects)
    CALLS.clear()
    got = f(X, 3)
    assert CALLS == ["called", 0, 1, 2]
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, eager_side_effects(X, 3), rtol=0)


def test_an_eager_call_on_numpy_with_traced_style_code_returns_numpy():
    f = egad.function(doubling)
    got = f(np.abs(X) + 0.1)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, doubling(np.abs(X) + 0.1), rtol=0)


def test_decorating_keeps_the_name_and_is_idempotent():
    f = egad.function(doubling)
    assert f.__name__ == "doubling"
    assert egad.function(f)(X).shape == X.shape


def test_a_decorated_function_called_while_tracing_is_converted():
    inner = egad.function(doubling)

    def outer(x):  # plain, not decorated: no control flow of its own
        return enp.sum(inner(x) * 0.5)

    program = egad.trace(outer, np.abs(X) + 0.1)
    counts = ops_of(program)
    assert counts["while"] == 1 and counts["if"] == 1, program
    np.testing.assert_allclose(egad.interpret(program, np.abs(X) + 0.1), np.sum(doubling(np.abs(X) + 0.1) * 0.5))


def test_decorator_with_trace_convert_option():
    program = egad.trace(doubling, np.abs(X) + 0.1, convert=True)
    assert ops_of(program)["while"] == 1
    np.testing.assert_allclose(egad.interpret(program, np.abs(X) + 0.1), doubling(np.abs(X) + 0.1))


def test_without_conversion_a_traced_if_still_refuses():
    """Only `egad.function` / `convert=True` convert: plain `egad.trace` keeps refusing `if`."""
    with pytest.raises(egad.EgadError):
        egad.trace(doubling, X)


def test_gradient_through_converted_control_flow():
    def loss(x):
        return enp.sum(egad.function(doubling)(x))

    x = np.abs(X) + 0.1
    program = egad.trace(loss, x)
    g = egad.interpret(egad.grad(program, wrt=0), x)
    eps = 1e-6
    fd = np.array([(float(egad.interpret(program, x + eps * e)) - float(egad.interpret(program, x - eps * e)))
                   / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-6)
