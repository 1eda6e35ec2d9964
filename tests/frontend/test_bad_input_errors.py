"""Bad input raises an `egad.EgadError` subclass that says what was wrong, the user's
line and what to do instead, never a raw Python exception from inside egad (found
by fuzzing): unsupported argument dtypes, malformed `egad.Spec`s, non-function
branches of `cond`/`switch`, axes of the wrong type, out of range or repeated,
`.at[...]` updates egad cannot do, and joins of no arrays.

A line of this file that an error must name ends with a `# at: <tag>` marker.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import egad
import egad.numpy as enp

HERE = os.path.abspath(__file__)
BASENAME = os.path.basename(__file__)
W = np.ones((3, 3), np.float32)


def marked_line(tag: str) -> int:
    with open(HERE) as source:
        hits = [k + 1 for k, text in enumerate(source) if text.rstrip().endswith(f"# at: {tag}")]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return hits[0]


def names_the_line(info, tag: str) -> bool:
    """Whether the error names this file's line marked `tag`, once, and says what to do instead."""
    text = str(info.value)
    return f"{BASENAME}:{marked_line(tag)}" in text and text.count("\n  at ") == 1 and "\n  instead: " in text


# --- arguments and Specs ---------------------------------------------------------------------


@pytest.mark.parametrize("array", [np.ones(3, np.float16), np.ones(3, np.complex64), np.ones(3, np.uint8),
                                   np.array([object()], dtype=object)], ids=lambda a: str(a.dtype))
def test_an_argument_of_an_unsupported_dtype_is_refused(array):
    with pytest.raises(egad.ArgumentError, match=r"argument 0 .*dtype \w+ is not supported; egad supports") as info:
        egad.trace(lambda a: a * 2, array)  # at: unsupported-dtype
    assert names_the_line(info, "unsupported-dtype"), info.value


# "T-1" is egad's name for the length of x[1:] and "n#1" one it makes up: a user's dim of that
# name was taken for it (x[1:] * y with y of Spec(("T-1",)) broadcast)
@pytest.mark.parametrize("shape", [(-1, 3), (None, 3), ("", 3), (2.0, 3), (True, 3), ("T-1",), ("n#1", 2)], ids=str)
def test_a_spec_with_an_invalid_dim_is_refused_where_it_is_written(shape):
    with pytest.raises(egad.ArgumentError, match="egad.Spec's shape .* has an invalid dim") as info:
        egad.trace(lambda a: a, egad.Spec(shape, "float32"))  # at: invalid-dim
    assert names_the_line(info, "invalid-dim"), info.value


def test_a_spec_with_a_misspelled_dtype_is_refused():
    with pytest.raises(egad.ArgumentError, match="egad.Spec's dtype 'floot32'") as info:
        egad.Spec((3, 3), "floot32")  # at: dtype-typo
    assert names_the_line(info, "dtype-typo"), info.value


def test_a_spec_with_an_unsupported_dtype_is_refused():
    with pytest.raises(egad.ArgumentError, match="egad.Spec's dtype 'float16'.*is not supported"):
        egad.Spec((3,), "float16")


def test_a_spec_whose_shape_is_not_a_tuple_is_refused():
    with pytest.raises(egad.ArgumentError, match="shape must be a tuple of dims, got 3") as info:
        egad.Spec(3, "float32")  # at: int-shape
    assert names_the_line(info, "int-shape"), info.value


def test_a_spec_accepts_a_list_shape_and_numpy_int_dims():
    spec = egad.Spec([np.int64(3), "T"], np.float32)
    assert spec == egad.Spec((3, "T"), "float32")
    assert isinstance(spec.shape[0], int) and spec.type.shape == (3, "T")


# --- cond / switch ---------------------------------------------------------------------------


def test_cond_with_a_value_for_a_branch_is_refused():
    def branch_is_a_value(a):
        return egad.cond(enp.sum(a) > 0, a, lambda a: -a, a)  # at: cond-value

    with pytest.raises(egad.ArgumentError, match="cond's true_fun must be a function, got Tracer") as info:
        egad.trace(branch_is_a_value, W)
    assert names_the_line(info, "cond-value"), info.value


def test_switch_with_one_function_instead_of_a_list_is_refused():
    with pytest.raises(egad.ArgumentError, match="switch's branches must be a list of functions, got function") as info:
        egad.trace(lambda a, i: egad.switch(i, lambda a: a, a), W, 0)  # at: switch-function
    assert names_the_line(info, "switch-function"), info.value


def test_switch_with_a_value_among_its_branches_is_refused():
    with pytest.raises(egad.ArgumentError, match="switch's branch 1 must be a function") as info:
        egad.trace(lambda a, i: egad.switch(i, [lambda a: a, a], a), W, 0)  # at: switch-value
    assert names_the_line(info, "switch-value"), info.value


def test_switch_with_no_branches_is_refused():
    with pytest.raises(egad.ArgumentError, match="switch needs at least one branch"):
        egad.trace(lambda a, i: egad.switch(i, [], a), W, 0)


# --- axes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda a: egad.nn.softmax(a, axis=(0, 1)),
    lambda a: enp.concatenate([a, a], axis=None),
    lambda a: enp.sum(a, axis=1.0),
    lambda a: enp.sum(a, axis=(0, "1")),
    lambda a: enp.cumsum(a, axis=(0, 1)),
], ids=["softmax-tuple", "concatenate-None", "sum-float", "sum-str-in-tuple", "cumsum-tuple"])
def test_an_axis_that_is_not_an_int_is_refused(call):
    with pytest.raises(egad.ArgumentError, match="axis must be an int, got"):
        egad.trace(call, W)


def test_an_axis_of_the_wrong_type_names_the_line():
    with pytest.raises(egad.ArgumentError, match=r"axis must be an int, got \(0, 1\)") as info:
        egad.trace(lambda a: egad.nn.softmax(a, axis=(0, 1)), W)  # at: axis-type
    assert names_the_line(info, "axis-type"), info.value


def test_an_axis_out_of_range_names_the_line_and_the_valid_axes():
    with pytest.raises(egad.ShapeError, match="axis 2 is out of range for an array of rank 2") as info:
        egad.trace(lambda a: enp.sum(a, axis=2), W)  # at: axis-range
    assert names_the_line(info, "axis-range"), info.value
    assert "from -2 to 1" in str(info.value)


@pytest.mark.parametrize("axis", [2, -3])
def test_a_cumsum_axis_out_of_range_names_the_line_and_the_valid_axes(axis):
    with pytest.raises(egad.ShapeError, match=f"axis {axis} is out of range for an array of rank 2") as info:
        egad.trace(lambda a: enp.cumsum(a, axis=axis), W)  # at: cumsum-axis-range
    assert names_the_line(info, "cumsum-axis-range"), info.value
    assert "from -2 to 1" in str(info.value)


def test_a_repeated_axis_names_the_line():
    with pytest.raises(egad.ShapeError, match=r"repeated axis in \(0, 0\)") as info:
        egad.trace(lambda a: enp.sum(a, axis=(0, 0)), W)  # at: axis-repeated
    assert names_the_line(info, "axis-repeated"), info.value


def test_axis_errors_on_concrete_arrays_name_the_line_and_stay_value_errors():
    with pytest.raises(ValueError, match="axis -3 is out of range") as info:
        enp.sum(W, axis=-3)  # at: axis-eager
    assert isinstance(info.value, egad.ShapeError) and names_the_line(info, "axis-eager"), info.value


def test_numpy_integer_axes_still_work():
    program = egad.trace(lambda a: enp.sum(a, axis=np.int64(1)), W)
    assert egad.interpret(program, W).shape == (3,)


# --- .at[] updates (egad/frontend/numpy_api.py _IndexUpdate) -----------------------------------


def test_at_set_with_a_mode_is_refused_as_unsupported():
    with pytest.raises(egad.UnsupportedError, match="mode='drop'"):
        egad.trace(lambda a: a.at[0].set(1.0, mode="drop"), W)


def test_at_multiply_at_an_index_array_is_refused_as_unsupported():
    """A read-modify-write at repeated indices would apply once where JAX applies each."""
    with pytest.raises(egad.UnsupportedError, match="multiply with an index array"):
        egad.trace(lambda a: a.at[[0, 0]].multiply(2.0), W)


def test_at_with_a_slice_or_an_unknown_keyword_is_refused():
    with pytest.raises(egad.UnsupportedError, match=r"\.at\[0:1\] is not an index egad can update"):
        egad.trace(lambda a: a.at[0:1].set(1.0), W)
    # `1:` was shown as `1`, the form egad does update (found by fuzzing)
    for index, shown in (((slice(1, None),), r"1:"), ((slice(None), slice(1, None)), r":, 1:"),
                         ((slice(None, None, 2),), r"::2")):
        with pytest.raises(egad.UnsupportedError, match=rf"\.at\[{shown}\] is not an index"):
            egad.trace(lambda a: a.at[index].set(1.0), W)
    with pytest.raises(egad.ArgumentError, match="unexpected keyword"):
        egad.trace(lambda a: a.at[0].add(1.0, wrong=True), W)


def test_joining_no_arrays_is_refused():
    with pytest.raises(egad.ArgumentError, match="concatenate needs at least one array"):
        egad.trace(lambda a: enp.concatenate([]), W)
    with pytest.raises(egad.ArgumentError, match="stack needs at least one array"):
        egad.trace(lambda a: enp.stack([]), W)


def test_a_numpy_constant_of_an_unsupported_dtype_is_refused():
    with pytest.raises(egad.EgadError, match="float16 is not supported"):
        egad.trace(lambda a: a * np.ones(W.shape, np.float16), W)


@pytest.mark.parametrize("fn, what, tag", [
    (lambda a: enp.prod(a), "enp.prod is not in egad.numpy", "prod"),  # at: prod
    (lambda a: a.argmin(), r"x.argmin\(\) is not in egad.numpy", "argmin"),  # at: argmin
    (lambda a: a << 1, "<< .a bit shift. is not supported", "lshift"),  # at: lshift
    (lambda a: 1 >> a, ">> .a bit shift. is not supported", "rshift"),  # at: rshift
], ids=["prod", "argmin", "lshift", "rshift"])
def test_a_numpy_name_egad_lacks_is_an_egad_error_naming_it(fn, what, tag):
    """They were bare AttributeErrors and TypeErrors, with no line. Found by fuzzing."""
    with pytest.raises(egad.UnsupportedError, match=what) as info:
        egad.trace(fn, np.arange(4))
    assert names_the_line(info, tag), info.value


def test_a_missing_name_is_still_an_attribute_error_for_hasattr():
    assert not hasattr(enp, "prod") and not hasattr(enp, "no_such_function") and hasattr(enp, "sum")
    with pytest.raises(AttributeError):
        enp.prod


def test_reshape_with_a_traced_dim_infers_its_minus_one():
    """`dims.count(-1)` compared a traced dim with -1: a TracerConversionError about an
    `if` the user never wrote. Found by fuzzing."""
    program = egad.trace(lambda x: enp.reshape(x, (x.shape[0], 2, -1)), egad.Spec(("T", 4), "float64"))
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(egad.interpret(program, x), x.reshape(3, 2, 2))


def test_a_matmul_of_bools_says_bools_are_the_matter():
    """It said "needs numeric operands of one dtype" of two bool operands. Found by fuzzing."""
    a = np.ones((2, 3), bool)
    with pytest.raises(egad.ShapeError, match="matmul of bool operands .* cast them to int or float"):
        egad.trace(lambda x, y: x @ y, a, a.T)


def nested_loops(depth):
    def loss(x):
        def level(d, x):
            if d == depth:
                return x * 1.01
            return egad.fori_loop(0, 1, lambda i, a: level(d + 1, a), x)

        return enp.sum(level(0, x))

    return loss


def test_nesting_past_pythons_recursion_limit_is_an_egad_error_and_tracing_goes_on():
    """150 nested loops raised a bare RecursionError from deep inside the tracer. Found by fuzzing."""
    with pytest.raises(egad.UnsupportedError, match="recursion limit .* nest too deep") as raised:
        egad.trace(nested_loops(300), np.ones(2))
    assert "sys.setrecursionlimit" in str(raised.value) and "test_bad_input_errors.py" in str(raised.value)
    program = egad.trace(nested_loops(20), np.ones(2))  # nothing of the failed trace is left behind
    np.testing.assert_allclose(egad.interpret(program, np.ones(2)), 2 * 1.01)


def test_wrt_of_a_bool_and_keyword_arguments_to_an_optimized_program_are_refused():
    """wrt=True was taken as argument 1, and keyword arguments to what egad.optimize
    returns raised Python's own TypeError. Found by fuzzing."""
    program = egad.trace(lambda x, y: enp.sum(x * y), np.ones(3), np.ones(3))
    for wrt in (True, (0, True)):
        with pytest.raises(egad.ArgumentError, match="wrt="):
            egad.grad(program, wrt=wrt)
    with pytest.raises(egad.ArgumentError, match="positions, 0 to 1"):
        egad.grad(program, wrt=2)
    optimized = egad.Optimized(program, (0,), "llvm", False, ())  # (nothing is built before the refusal)
    with pytest.raises(egad.ArgumentError, match=r"keyword arguments \(y\).*by position"):
        optimized(np.ones(3), y=np.ones(3))


@pytest.mark.parametrize("fn, what, hint", [
    (lambda x: len(x), "len\\(\\) of", "x.shape\\[0\\]"),
    (lambda x: [row for row in x], "iterating over", "egad.fori_loop"),
    (lambda x: list(reversed(x)), "reversed\\(\\) of", "x\\[::-1\\]")], ids=["len", "iter", "reversed"])
def test_len_iteration_and_reversed_of_a_symbolic_axis_each_say_what_to_use(fn, what, hint):
    """reversed(x) and `for row in x` said "len() of a traced value", which the user had
    not written (Python asks for len() first). Found by fuzzing."""
    with pytest.raises(egad.TracerConversionError, match=rf"(?s){what} a traced value of type f32\[T,3\] needs a "
                                                         rf"static first dim.*test_bad_input_errors.py.*{hint}"):
        egad.trace(fn, egad.Spec(("T", 3), "float32"))


def test_reversed_of_a_static_axis_reverses_its_rows():
    program = egad.trace(lambda x: enp.stack(list(reversed(x))), np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(egad.interpret(program, np.arange(6.0).reshape(3, 2)), [[4, 5], [2, 3], [0, 1]])
