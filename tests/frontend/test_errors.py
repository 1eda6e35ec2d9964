"""Every user-facing error: an EgadError subclass that names what was wrong, the
user's source line, and what to do instead (issue 2, item 6)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import egad
import egad.numpy as enp

X = np.arange(6, dtype=np.float32).reshape(2, 3)
THIS_FILE = __file__.rsplit("/", 1)[-1]


def _line_of(marker: str) -> int:
    """The line in this file holding `marker` (so tests don't hard-code line numbers)."""
    source = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, line in enumerate(source) if marker in line and "_line_of" not in line)


def _assert_names_line(error: Exception, marker: str):
    assert f"{THIS_FILE}:{_line_of(marker)}" in str(error), str(error)


def test_python_if_on_traced_value_suggests_cond():
    def f(x):
        if x.sum() > 0:  # MARK-if
            return x
        return -x

    with pytest.raises(egad.TracerConversionError) as info:
        egad.trace(f, X)
    assert "egad.cond" in str(info.value)
    _assert_names_line(info.value, "# MARK-if")


def test_python_while_on_traced_value_suggests_while_loop():
    def f(x):
        while x.sum() < 100:  # MARK-while
            x = x * 2
        return x

    with pytest.raises(egad.TracerConversionError) as info:
        egad.trace(f, X)
    assert "egad.while_loop" in str(info.value)
    _assert_names_line(info.value, "# MARK-while")


def test_bool_and_int_of_traced_value():
    with pytest.raises(egad.TracerConversionError, match="egad.cond"):
        egad.trace(lambda x: bool(x[0, 0]), X)
    with pytest.raises(egad.TracerConversionError, match="static_argnums"):
        egad.trace(lambda x: range(int(x[0, 0])), X)
    with pytest.raises(egad.EgadError):
        egad.trace(lambda x: x.sum() > 0 and x, X)


def test_loop_body_state_structure_mismatch_names_the_structures():
    def f(x):
        return egad.fori_loop(0, 3, lambda i, s: (s[0],), (x, x))  # MARK-structure

    with pytest.raises(egad.LoopStateError) as info:
        egad.trace(f, X)
    assert "structure" in str(info.value)
    _assert_names_line(info.value, "# MARK-structure")


def test_loop_body_shape_change_names_the_leaf():
    def f(x):
        return egad.fori_loop(0, 3, lambda i, s: {"h": s["h"][:1], "c": s["c"]}, {"h": x, "c": x})

    with pytest.raises(egad.LoopStateError) as info:
        egad.trace(f, X)
    assert "['h']" in str(info.value) and "float32[1, 3]" in str(info.value)


def test_loop_body_dtype_change_names_the_leaf():
    def f(x):
        return egad.while_loop(lambda s: s[1] < 3, lambda s: (s[0].astype("int64"), s[1] + 1), (x, 0))

    with pytest.raises(egad.LoopStateError) as info:
        egad.trace(f, X)
    assert "state[0]" in str(info.value) and "int64" in str(info.value) and "astype" in str(info.value)


def test_scan_carry_mismatch():
    with pytest.raises(egad.LoopStateError, match="carry"):
        egad.trace(lambda xs: egad.scan(lambda c, x: (c[:1] + x[0], x), enp.zeros(3), xs), X)


def test_branches_that_disagree():
    with pytest.raises(egad.BranchMismatchError, match="shape"):
        egad.trace(lambda x: egad.cond(x.sum() > 0, lambda x: x, lambda x: x[0], x), X)
    with pytest.raises(egad.BranchMismatchError, match="dtype"):
        egad.trace(lambda x: egad.cond(x.sum() > 0, lambda x: x, lambda x: x.astype("float64"), x), X)
    with pytest.raises(egad.BranchMismatchError, match="structure"):
        egad.trace(lambda x: egad.switch(0 * x[0, 0].astype("int64"), [lambda x: (x, x), lambda x: x], x), X)


def test_shape_mismatch_in_an_op_names_op_and_line():
    def f(x):
        return x @ x  # MARK-matmul

    with pytest.raises(egad.ShapeError) as info:
        egad.trace(f, X)
    assert "matmul" in str(info.value)
    _assert_names_line(info.value, "# MARK-matmul")
    with pytest.raises(egad.ShapeError, match="broadcast"):
        egad.trace(lambda x: x + enp.ones((4,)), X)


def test_out_of_range_traced_index_at_interpret_time():
    def f(x, i):
        return x[i]  # MARK-index

    program = egad.trace(f, X, 0)
    assert egad.interpret(program, X, -2).tolist() == X[0].tolist()  # negative indices wrap
    with pytest.raises(egad.IndexOutOfRangeError) as info:
        egad.interpret(program, X, 2)
    _assert_names_line(info.value, "# MARK-index")
    with pytest.raises(egad.IndexOutOfRangeError):
        egad.interpret(program, X, -3)


def test_out_of_range_index_inside_a_loop():
    def f(xs, n):
        return egad.fori_loop(0, n, lambda t, acc: acc + xs[t], enp.zeros(3, "float32"))

    program = egad.trace(f, X, 2)
    np.testing.assert_allclose(egad.interpret(program, X, 2), X.sum(0))
    with pytest.raises(egad.IndexOutOfRangeError, match="out of range"):
        egad.interpret(program, X, 3)


def test_static_out_of_range_index_at_trace_time():
    with pytest.raises(egad.IndexOutOfRangeError):
        egad.trace(lambda x: x[5], X)


def test_interpret_wrong_number_of_arguments():
    program = egad.trace(lambda x, y: x + y, X, X)
    with pytest.raises(egad.ArgumentError, match="takes 2 positional arguments, got 1"):
        egad.interpret(program, X)


def test_interpret_wrong_dtype_and_shape():
    program = egad.trace(lambda x: x * 2, X)
    with pytest.raises(egad.ArgumentError, match="float64.*float32"):
        egad.interpret(program, X.astype(np.float64))
    with pytest.raises(egad.ArgumentError, match="shape"):
        egad.interpret(program, X[:1])
    with pytest.raises(egad.ArgumentError, match="not an array"):
        egad.interpret(program, "hello")


def test_interpret_wrong_structure_and_static_value():
    program = egad.trace(lambda p, k: p["a"] * k, {"a": X}, 3, static_argnums=(1,))
    with pytest.raises(egad.ArgumentError, match="structure"):
        egad.interpret(program, {"b": X}, 3)
    with pytest.raises(egad.ArgumentError, match="static"):
        egad.interpret(program, {"a": X}, 4)
    with pytest.raises(egad.ArgumentError):
        egad.interpret(lambda x: x, X)


def test_symbolic_dims_must_agree():
    program = egad.trace(lambda x, y: x + y, egad.Spec(("T", 3)), egad.Spec(("T", 3)))
    with pytest.raises(egad.ArgumentError, match="symbol T"):
        egad.interpret(program, X, np.zeros((3, 3), np.float32))


def test_numpy_function_on_tracer_points_to_enp():
    with pytest.raises(egad.NumpyInteropError, match="enp.tanh"):
        egad.trace(lambda x: np.tanh(x), X)
    with pytest.raises(egad.NumpyInteropError, match="enp.sum"):
        egad.trace(lambda x: np.sum(x), X)
    with pytest.raises(egad.NumpyInteropError, match="enp"):
        egad.trace(lambda x: np.asarray(x), X)


def test_leaked_tracer_is_reported():
    leaked = []

    def f(x):
        def body(i, h):
            leaked.append(h)
            return h * 2

        out = egad.fori_loop(0, 2, body, x)
        return out + leaked[0]

    with pytest.raises(egad.TracerLeakError, match="return the value"):
        egad.trace(f, X)


def test_predicate_must_be_scalar_bool_or_int():
    with pytest.raises(egad.ShapeError, match="scalar"):
        egad.trace(lambda x: egad.cond(x > 0, lambda: x, lambda: -x), X)
    with pytest.raises(egad.ShapeError, match="bool"):
        egad.trace(lambda x: egad.cond(x[0, 0], lambda: x, lambda: -x), X)


@pytest.mark.parametrize("make", [
    lambda x: egad.while_loop(lambda s: (s.sum() < 10, s.sum() < 3), lambda s: s + 1, x),
    lambda x: egad.cond((x.sum() > 0,), lambda a: a, lambda a: -a, x),
    lambda x: egad.switch([x.sum().astype("int64")], [lambda a: a, lambda a: -a], x),
], ids=["while_loop", "cond", "switch"])
def test_a_predicate_or_index_given_as_a_tuple_is_refused_as_such(make):
    """It was read as an array through numpy, and the error blamed numpy. Found by fuzzing."""
    with pytest.raises(egad.ShapeError, match=r"must be one scalar, got a (tuple|list) of \d.*\n  at .*test_errors"):
        egad.trace(make, np.ones(3))


def test_item_assignment_suggests_at_set():
    def f(x):
        x[0] = 1.0
        return x

    with pytest.raises(egad.UnsupportedError, match=r"\.at\["):
        egad.trace(f, X)


def test_every_error_is_an_egad_error():
    for name in ["ArgumentError", "BranchMismatchError", "IndexOutOfRangeError", "LoopStateError",
                 "NumpyInteropError", "ShapeError", "TracerConversionError", "TracerLeakError",
                 "UnsupportedError", "VerifyError"]:
        assert issubclass(getattr(egad, name), egad.EgadError)
