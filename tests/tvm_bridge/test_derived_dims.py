"""Symbolic dims defined in the middle of a function: `enp.arange(1, T)` has a length
`d#1` that the program computes (max(T - 1, 0)) and the lowering binds with a
match_cast after the sizes the function's parameters define. Fusion may move
bindings; tvm_bridge/fusion.py's OrderAfterShapeDefinitions puts every use of `d#1`
back after its match_cast, and a match_cast that only re-checks a parameter's dim
(T) must not hold back the bindings that read T (they once formed a cycle, the
block stayed misordered, and TVM's VMShapeLower failed: "8 * d_1 has not been
computed")."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close


def sums_of_aranges(x):
    T = x.shape[0]
    return 0.0 + enp.sum(enp.arange(T)) + enp.sum(enp.arange(1, T)) + enp.sum(x)


def weighted_by_position(x):
    T = x.shape[0]
    return enp.sum(enp.sin(x) * enp.arange(T)) + enp.sum(enp.arange(2, T) * 0.5)


def tail_and_aranged_ramp(x):
    T = x.shape[0]
    return enp.sum(x[1:] * x[:-1]) + enp.sum(enp.cos(enp.arange(1, T) * 1.0)) * enp.sum(x)


@pytest.mark.parametrize("function", [sums_of_aranges, weighted_by_position, tail_and_aranged_ramp])
def test_a_dim_defined_mid_function_compiles_with_its_gradient(function):
    program = egad.trace(function, egad.Spec(("T",), "float64"))
    gradient = egad.value_and_grad(program)
    compiled = build(gradient, cache=BuildCache(None))
    for length in (0, 1, 2, 7):
        x = np.linspace(-1.0, 1.0, length)
        assert_trees_close(compiled(x), egad.interpret(gradient, x), rtol=1e-12, atol=1e-12)


def test_the_optimizer_builds_a_dim_defined_mid_function():
    program = egad.trace(sums_of_aranges, egad.Spec(("T",), "float64"))
    optimized = egad.optimize(program)
    x = np.linspace(-1.0, 1.0, 6)
    assert_trees_close(optimized(x), egad.interpret(egad.value_and_grad(program), x), rtol=1e-12, atol=1e-12)
    (optimization,) = optimized.optimizations
    assert "failed to build" not in (optimization.fallback or "")


def check_compiled_and_differences(function, lengths=(0, 1, 2, 7)):
    """The gradient program compiled (rules=()) against the interpreter, and the
    interpreter's gradient against central differences, at each length."""
    program = egad.trace(function, egad.Spec(("T",), "float64"))
    gradient = egad.value_and_grad(program)
    compiled = build(gradient, cache=BuildCache(None))
    for length in lengths:
        x = np.linspace(-1.0, 1.0, length)
        want = egad.interpret(gradient, x)
        assert_trees_close(compiled(x), want, rtol=1e-12, atol=1e-12, context=f"T={length}")
        eps, basis = 1e-6, np.eye(length)
        differences = [(egad.interpret(program, x + eps * e) - egad.interpret(program, x - eps * e)) / (2 * eps)
                       for e in basis]
        np.testing.assert_allclose(want[1][0], np.array(differences).reshape(length), atol=1e-6)


def test_arange_from_k_to_a_symbolic_length_is_as_long_as_the_slice_from_k():
    """enp.arange(k, T) and x[k:] are both max(T - k, 0) long: one dim, `T-k`, so they
    broadcast (a fresh dim for the arange once refused `x[1:] * enp.arange(1, T)`)."""
    program = egad.trace(lambda x: x[1:][2:] * enp.arange(3, x.shape[0]), egad.Spec(("T",), "float64"))
    assert program.region.results[0].type.shape == ("T-3",)
    check_compiled_and_differences(lambda x: enp.sum(x[1:] * enp.arange(1, x.shape[0]) * enp.sin(x[:-1])))


def test_arange_to_a_symbolic_length_less_k_is_as_long_as_the_slice_from_k():
    """enp.arange(T - k) and enp.arange(j, T - k) are as long as x[k:] and x[j + k:]
    (`x.shape[0] - 1` was a fresh dim, so `v[:-1] * enp.arange(T - 1)` was refused).
    Found by fuzzing."""
    def f(x):
        return x[:-1] * enp.arange(x.shape[0] - 1), x[3:] * enp.arange(2, x.shape[0] + 1 - 2)

    program = egad.trace(f, egad.Spec(("T",), "float64"))
    assert [r.type.shape for r in program.region.results] == [("T-1",), ("T-3",)]
    for length in (0, 1, 2, 5):
        x = np.linspace(-1.0, 1.0, length)
        assert_trees_close(egad.interpret(program, x), (x[:-1] * np.arange(length - 1),
                                                        x[3:] * np.arange(2, length - 1)), rtol=0, atol=0)
    check_compiled_and_differences(lambda x: enp.sum(x[2:] * enp.arange(x.shape[0] - 2) * enp.sin(x[:-2])))


@pytest.mark.parametrize("padded", [
    lambda x: enp.concatenate([x, enp.zeros(2)]),
    lambda x: enp.concatenate([enp.ones(1), x, enp.arange(3.0)]),
    lambda x: enp.concatenate([enp.zeros(0), x[1:], enp.ones(2), enp.zeros(0)]),
], ids=["after", "both-sides", "empty-parts"])
def test_the_gradient_of_a_symbolic_axis_padded_with_static_parts_compiles(padded):
    """A concatenation along a symbolic axis with static parts beside one symbolic
    operand (`T+2`): its gradient slices the cotangent by static bounds, the symbolic
    operand's part named by its own dim (once refused)."""
    check_compiled_and_differences(lambda x: enp.sum(enp.sin(padded(x)) * enp.cos(padded(x))))


def test_slices_of_a_padded_axis_have_the_dims_they_must():
    """On an axis `T+3` (at least 3 long), dropping up to 3 elements from the ends
    leaves `T+...`, and a slice within its first or last 3 elements is static; the
    slices build (TVM's own strided_slice, which fuses with the concatenation)."""
    def slices(x):
        padded = enp.concatenate([enp.ones(1), x, enp.zeros(2)])
        return padded[1:-2] + x, padded[1:], padded[:2], padded[-2:]

    program = egad.trace(slices, egad.Spec(("T",), "float64"))
    assert [v.type.shape for v in program.region.results] == [("T",), ("T+2",), (2,), (2,)]
    compiled = build(program, cache=BuildCache(None))
    for length in (0, 1, 5):
        x = np.linspace(-1.0, 1.0, length)
        assert_trees_close(compiled(x), egad.interpret(program, x), rtol=0, atol=0, context=f"T={length}")


def test_a_sum_of_dims_is_not_read_as_a_slice_of_their_sum():
    """`T+(U-1)` (T + max(U - 1, 0)) and `T+U-1` (max(T + U - 1, 0)) differ when U = 0:
    the concatenation's dim keeps its parts apart, so the two never broadcast."""
    def both(x, y):
        return enp.concatenate([x, y[1:]]), enp.concatenate([x, y])[1:]

    program = egad.trace(both, egad.Spec(("T",), "float64"), egad.Spec(("U",), "float64"))
    assert [v.type.shape for v in program.region.results] == [("T+(U-1)",), ("T+U-1",)]


def test_a_size_plus_a_count_is_the_dim_of_a_padded_axis():
    """`x.shape[0] + 3` is `T+3`, as a concatenation of x with three more elements is,
    so the arrays made from it broadcast with the padded axis (a fresh dim once
    refused); `(T + 1) + 2` is `T+3` too."""
    def weighted_padding(x):
        T = x.shape[0]
        padded = enp.concatenate([enp.ones(1), x, enp.zeros(2)])
        return enp.sum(padded ** 2 * enp.arange(T + 3)) + enp.sum(enp.full((T + 1) + 2, 0.5) * padded)

    program = egad.trace(weighted_padding, egad.Spec(("T",), "float64"))
    assert {b.outputs[0].type.shape for b in program.region.bindings if b.op in ("iota", "full", "concat")} == {
        ("T+3",)}
    check_compiled_and_differences(weighted_padding)


def test_a_shift_written_slice_first_is_refused_with_the_form_that_keeps_the_length():
    """enp.concatenate([first, x[:-1]]) is max(T - 1, 0) + 1 long, 1 when T is 0: the
    message says so and gives the form that is T long, which traces and compiles."""
    with pytest.raises(egad.ShapeError, match=r"T-1\+1 is max\(T - 1, 0\) \+ 1, not T when T is 0.*"
                                              r"enp.concatenate\(\[first, x\]\)\[:-1\] is T long"):
        egad.trace(lambda x: enp.sum(enp.concatenate([enp.zeros(1), x[:-1]]) * x), egad.Spec(("T",), "float64"))
    check_compiled_and_differences(lambda x: enp.sum(enp.concatenate([enp.ones(1), x])[:-1] * enp.sin(x)))


def test_two_spec_names_are_two_lengths_and_the_message_says_so():
    with pytest.raises(egad.ShapeError, match="T and U are separate names"):
        egad.trace(lambda x, y: x * y, egad.Spec(("T",), "float64"), egad.Spec(("U",), "float64"))


def _joined_rows(x, y):
    joined = enp.concatenate([enp.ones((1, 2)), x, enp.zeros((2, 2)), y[1:], enp.arange(4.0).reshape(2, 2),
                              enp.zeros((0, 2))])
    return enp.sum(enp.sin(joined) * joined ** 2) + enp.sum(joined * joined[0])


def _joined_columns(x, y):
    joined = enp.concatenate([x.T, y.T, enp.ones((2, 1))], axis=1)
    return enp.sum(enp.tanh(joined) @ enp.concatenate([y.T, x.T, enp.ones((2, 1))], axis=1).T)


@pytest.mark.parametrize("function", [_joined_rows, _joined_columns], ids=["rows", "columns"])
def test_the_gradient_of_a_concatenation_of_two_symbolic_operands_compiles(function):
    """Along `T+U`, the operands after the first symbolic one start at a run-time offset:
    their parts of the cotangent are gathered there (once refused); the dim `T+U` is
    T + U to Relax, as R.concat infers it (once a fresh var that failed to build)."""
    program = egad.trace(function, egad.Spec(("T", 2), "float64"), egad.Spec(("U", 2), "float64"))
    gradient = egad.value_and_grad(program, wrt=(0, 1))
    compiled = build(gradient, cache=BuildCache(None))
    rng = np.random.default_rng(0)
    for lengths in ((0, 0), (0, 3), (4, 0), (3, 5)):
        args = [rng.standard_normal((n, 2)) for n in lengths]
        want = egad.interpret(gradient, *args)
        assert_trees_close(compiled(*args), want, rtol=1e-12, atol=1e-12, context=f"lengths {lengths}")
        for arg, grad in zip(args, want[1]):
            eps, differences = 1e-6, np.zeros(arg.shape)
            for index in np.ndindex(arg.shape):
                saved = arg[index]
                arg[index] = saved + eps
                up = egad.interpret(program, *args)
                arg[index] = saved - eps
                differences[index] = (up - egad.interpret(program, *args)) / (2 * eps)
                arg[index] = saved
            np.testing.assert_allclose(grad, differences, atol=1e-6)


@pytest.mark.parametrize("index", [slice(None, -3), slice(1, -3), slice(3, None), slice(4, None), slice(None, -4)],
                         ids=str)
@pytest.mark.parametrize("front", [True, False], ids=["padded-before", "padded-after"])
def test_dropping_more_than_the_static_part_of_a_padded_axis(index, front):
    """`concat([ones(2), x])[:-3]` is max(T - 1, 0) long: `T-1`, not a new dim `T+2-3`,
    and it builds (the kernel reading a T + 2 buffer failed to bind T when called; the
    gradient of `[3:]` likewise). Found by fuzzing."""
    def padded(x):
        parts = [enp.ones((2, 3)), x] if front else [x, enp.ones((2, 3))]
        return enp.concatenate(parts)[index]

    program = egad.trace(lambda x: padded(x) * 2.0, egad.Spec(("T", 3), "float64"))
    assert program.region.results[0].type.shape[0] in ("T-1", "T-2", "T")
    gradient = egad.value_and_grad(egad.trace(lambda x: enp.sum(enp.sin(padded(x)) * 3.0),
                                              egad.Spec(("T", 3), "float64")))
    compiled, compiled_gradient = build(program, cache=BuildCache(None)), build(gradient, cache=BuildCache(None))
    for length in (0, 1, 2, 5):
        x = np.arange(length * 3.0).reshape(length, 3) + 1
        assert_trees_close(compiled(x), egad.interpret(program, x), rtol=0, atol=0, context=f"T={length}")
        assert_trees_close(compiled_gradient(x), egad.interpret(gradient, x), rtol=1e-12, atol=1e-12)


def test_a_symbolic_length_beside_a_static_one_is_refused_with_a_fitting_hint():
    """The hint talked about slices and aranges, which the program had none of. Found by fuzzing."""
    with pytest.raises(egad.ShapeError, match="T is a length known only at run time, so it broadcasts with 5 only "
                                              "where it is 5 or 1"):
        egad.trace(lambda v, w: v + w, egad.Spec(("T",), "float64"), egad.Spec((5,), "float64"))


def test_the_first_and_the_last_k_rows_broadcast_together():
    """`x[:k]`, `x[0:k]` and `x[-k:]` are all min(T, k) long: one dim, so their product
    traces (it was refused: 'T[:1]' and 'T[-1:]' could not be proven equal), compiles,
    and its gradient is right for T below and above k. Found by fuzzing."""
    def ends(x):
        return x[:1] * x[-1:] + x[0:1]

    def loss(x):
        return enp.sum(enp.sin(x[:2] * x[-2:]) * 3.0)

    program = egad.trace(ends, egad.Spec(("T", 3), "float64"))
    gradient = egad.value_and_grad(egad.trace(loss, egad.Spec(("T", 3), "float64")))
    compiled, compiled_gradient = build(program, cache=BuildCache(None)), build(gradient, cache=BuildCache(None))
    for length in (0, 1, 2, 5):
        x = np.arange(length * 3.0).reshape(length, 3) + 1
        np.testing.assert_array_equal(compiled(x), x[:1] * x[-1:] + x[0:1])
        value, (grad,) = compiled_gradient(x)
        assert_trees_close((value, (grad,)), egad.interpret(gradient, x), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(value, np.sum(np.sin(x[:2] * x[-2:]) * 3.0))
        eps, numeric = 1e-6, np.zeros_like(x)
        for index in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[index] += eps
            down[index] -= eps
            numeric[index] = (np.sum(np.sin(up[:2] * up[-2:])) - np.sum(np.sin(down[:2] * down[-2:]))) * 3.0 / (2 * eps)
        np.testing.assert_allclose(grad, numeric, atol=1e-6)


STEPPED_ARANGES = [(lambda x: enp.arange(0, x.shape[0], 2), lambda T, x: np.arange(0, T, 2)),
                   (lambda x: enp.arange(1, x.shape[0], 3), lambda T, x: np.arange(1, T, 3)),
                   (lambda x: enp.arange(x.shape[0], 0, -2), lambda T, x: np.arange(T, 0, -2)),
                   (lambda x: enp.sum(x[enp.arange(0, x.shape[0], 2)], axis=0),
                    lambda T, x: np.sum(x[np.arange(0, T, 2)], axis=0))]


@pytest.mark.parametrize("function, reference", STEPPED_ARANGES,
                         ids=["step-2", "from-1-step-3", "down-by-2", "even-rows"])
def test_an_arange_of_a_traced_bound_with_a_static_step_is_numpys_for_every_length(function, reference):
    """enp.arange(0, T, 2) was refused (step 1 only): its length, max(ceil((stop - start) /
    step), 0), is a fresh dim. Found by fuzzing."""
    program = egad.trace(function, egad.Spec(("T", 3), "float64"))
    compiled = build(program, cache=BuildCache(None))
    for length in range(7):
        x = np.arange(length * 3.0).reshape(length, 3)
        want = reference(length, x)
        for got in (egad.interpret(program, x), compiled(x)):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype


@pytest.mark.parametrize("function", [lambda x: enp.arange(0, x.shape[0], 0),
                                      lambda x: enp.arange(0.5, x.shape[0], 2),
                                      lambda x: enp.arange(0, x.shape[0], 1.5)],
                         ids=["zero", "float-start", "float-step"])
def test_an_arange_of_a_traced_bound_needs_int_bounds_and_a_nonzero_int_step(function):
    with pytest.raises(egad.UnsupportedError, match=r"(?s)static, non-zero int step.*test_derived_dims.py"):
        egad.trace(function, egad.Spec(("T", 3), "float64"))
