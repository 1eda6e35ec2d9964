"""Slices along a symbolic axis (`egad.Spec(("T", ...))`): a whole axis reversed keeps
its length T, and slices that drop k elements from the ends (`x[1:]`, `x[:-1]`,
`x[2:-3]`) all have length `T-k` (egad/ir/shapes.py slice_dim), so they broadcast
with each other; their gradients, and those of any other slice along a symbolic axis
(`x[:5]`, `x[::2]`), are compiled."""
from __future__ import annotations

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close

RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def built(program):
    return build(program, cache=BuildCache(None))


def sliced_shapes(program) -> set:
    return {b.outputs[0].type.shape for b in program.region.bindings if b.op == "slice"}


def backward_rnn(xs, W):
    """A backward encoder written as a scan over the reversed sequence, its states
    reversed back into time order (as GNMT's bidirectional encoder)."""
    def step(h, x):
        h = enp.tanh(x + h @ W)
        return h, h

    _, hs = egad.scan(step, enp.zeros_like(xs[0]), xs[::-1])
    return enp.sum(hs[::-1] * xs[:, :, ::-1])


def backward_rnn_in_numpy(xs, W):
    h, hs = np.zeros_like(xs[0]), []
    for x in xs[::-1]:
        h = np.tanh(x + h @ W)
        hs.append(h)
    return np.sum(np.stack(hs)[::-1] * xs[:, :, ::-1])


def test_an_axis_of_symbolic_length_reversed_keeps_its_length_and_gradient():
    """Lowered as a flip (TVM's strided_slice infers no symbolic length); the
    adjoint flips the cotangent back."""
    W = f32(8, 8) * 0.3
    program = egad.trace(backward_rnn, egad.Spec(("T", 2, 8), "float32"), W)
    assert sliced_shapes(program) == {("T", 2, 8)}
    gradient = egad.value_and_grad(program, wrt=(0, 1))
    compiled = built(gradient)
    for length in (1, 6):
        xs = f32(length, 2, 8)
        assert_trees_close(compiled(xs, W), egad.interpret(gradient, xs, W), 1e-4, f"T={length}")
        value, (dxs, _) = egad.interpret(gradient, xs, W)
        assert dxs.shape == xs.shape
        assert np.isclose(value, backward_rnn_in_numpy(xs, W), rtol=1e-5)


def differences(x, w):
    step = x[1:] - x[:-1]  # both T-1 long
    inner = x[2:-1]  # T-3
    return (enp.sum(enp.tanh(step @ w) * enp.sum(inner[:, ::-1]))
            + enp.sum(x[1:-1] * step[1:])  # T-2 and (T-1)-1
            + enp.sum(x[1:, 1:] ** 2))


def differences_in_numpy(x, w):
    step = x[1:] - x[:-1]
    return (np.sum(np.tanh(step @ w) * np.sum(x[2:-1][:, ::-1])) + np.sum(x[1:-1] * step[1:])
            + np.sum(x[1:, 1:] ** 2))


def finite_differences(fn, x, w, eps=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[index] += eps
        down[index] -= eps
        grad[index] = (fn(up, w) - fn(down, w)) / (2 * eps)
    return grad


def test_slices_dropping_ends_of_a_symbolic_axis_broadcast_and_have_gradients():
    w = f32(3, 3)
    program = egad.trace(differences, egad.Spec(("T", 3), "float64"), w.astype(np.float64))
    assert sliced_shapes(program) == {("T-1", 3), ("T-2", 3), ("T-3", 3), ("T-1", 2)}
    gradient = egad.value_and_grad(program, wrt=0)
    compiled = built(gradient)
    for length in (0, 1, 2, 3, 7):  # shorter than what a slice drops too: numpy's empty slices
        x = RNG.standard_normal((length, 3))
        value, dx = egad.interpret(gradient, x, w.astype(np.float64))
        assert np.isclose(value, differences_in_numpy(x, w))
        np.testing.assert_allclose(dx, finite_differences(differences_in_numpy, x, w), atol=1e-6)
        assert_trees_close(compiled(x, w.astype(np.float64)), (value, dx), 1e-9, f"T={length}")


def test_the_optimizer_keeps_slices_dropping_ends_of_a_symbolic_axis():
    """A language model's shifted targets: the states of tokens[:-1] predict tokens[1:]."""
    def next_step_loss(xs, W):
        def step(h, x):
            h = enp.tanh(x + h @ W)
            return h, h

        _, hs = egad.scan(step, enp.zeros_like(xs[0]), xs[:-1])
        return enp.mean((hs - xs[1:]) ** 2)

    W = f32(4, 4) * 0.5
    xs = f32(9, 2, 4)
    optimized = egad.optimize(egad.trace(next_step_loss, egad.Spec(("T", 2, 4), "float32"), W), wrt=(0, 1))
    gradient = egad.value_and_grad(egad.trace(next_step_loss, egad.Spec(("T", 2, 4), "float32"), W), wrt=(0, 1))
    for length in (9, 2):
        assert_trees_close(optimized(xs[:length], W), egad.interpret(gradient, xs[:length], W), 1e-4, f"T={length}")


@pytest.mark.parametrize("index", [
    (slice(None, 5),), (slice(None, None, 2),), (slice(-3, None),), (slice(1, None, 2),), (slice(None, None, -2),),
    (slice(2, -1, 2),), (slice(4, 0, -1),), (slice(None, 3), slice(None, None, 2)),
], ids=["head", "even", "last3", "odd", "reversed-even", "strided-inner", "reversed-part", "head-then-columns"])
def test_any_slice_of_a_symbolic_axis_has_a_gradient(index):
    """The cotangent is written back at the rows iota(T)[index] (once refused for
    slices other than x[k:], x[:-k], x[::-1]); the slice's dim (`T[:5]`) is the length
    Relax infers for it, so the forward slice and those rows are one shape."""
    def sliced_loss(x, w):
        return enp.sum(enp.sin(x[index] @ w[:x[index].shape[1]]) ** 2)

    w = RNG.standard_normal((3, 3))
    program = egad.trace(sliced_loss, egad.Spec(("T", 3), "float64"), w)
    gradient = egad.value_and_grad(program, wrt=0)
    compiled = built(gradient)
    for length in (0, 1, 2, 6):
        x = RNG.standard_normal((length, 3))
        value, dx = egad.interpret(gradient, x, w)
        assert np.isclose(value, sliced_loss(x, w))  # the same function on numpy arrays
        np.testing.assert_allclose(dx, finite_differences(sliced_loss, x, w), atol=1e-6)
        assert_trees_close(compiled(x, w), (value, dx), 1e-9, f"T={length}")


def sliced_in_branches(x, p):
    taken = egad.cond(p > 0, lambda a: a[1:] * 2.0, lambda a: a[1:] + 1.0, x)
    switched = egad.switch(p.astype("int64"), [lambda a: a[:-2], lambda a: a[2:] * a[2:]], x)
    return enp.sum(taken) + enp.sum(switched * 3.0)


def test_a_branch_returning_a_slice_of_a_symbolic_axis_compiles():
    """The If's result type lost the slice's `T-1` (a branch function's return type keeps
    only the dims its parameters bind), so the sum reading it was never lowered: a raw
    TVM InternalError. Found by fuzzing."""
    program = egad.trace(sliced_in_branches, egad.Spec(("T",), "float64"), egad.Spec((), "float64"))
    compiled = build(program, cache=BuildCache(None))
    gradient = egad.value_and_grad(program, wrt=(0,))
    compiled_gradient = build(gradient, cache=BuildCache(None))
    for T in (0, 1, 2, 5):
        for p in (0.0, 1.0):
            x = np.arange(T, dtype=np.float64) + 0.5
            np.testing.assert_allclose(compiled(x, p), egad.interpret(program, x, p), rtol=1e-12)
            got, want = compiled_gradient(x, p), egad.interpret(gradient, x, p)
            np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-12)


def test_a_reversal_written_from_the_last_element_keeps_the_symbolic_length():
    """x[-1::-1] is x[::-1]: it was named `T[-1::-1]`, so `x[-1::-1] * x` was refused. Found by fuzzing."""
    program = egad.trace(lambda x: enp.sum(x[-1::-1] * x * enp.arange(x.shape[0])), egad.Spec(("T",), "float64"))
    gradient = egad.value_and_grad(program, wrt=(0,))
    compiled = build(gradient, cache=BuildCache(None))
    for T in (0, 1, 4):
        x = np.arange(T) + 1.0
        assert egad.interpret(program, x) == np.sum(x[::-1] * x * np.arange(T))
        assert_trees_close(compiled(x), egad.interpret(gradient, x), 1e-12)


@pytest.mark.parametrize("index", [slice(5, 1), slice(-3, -1, -1), slice(5, -5, 2), slice(1, -1, 3),
                                   slice(None, -2, 2), slice(4, 1, -1), slice(-1, None, -2), slice(-2, -6, -2),
                                   slice(5, None, -2), slice(None, 0, -1)], ids=str)
def test_a_slice_of_a_symbolic_axis_empty_for_some_lengths_compiles(index):
    """TVM's strided_slice gives a symbolic slice a negative length where it is empty
    (x[5:-5:2] at T < 10): the compiled code raised std::bad_alloc. A slice empty for
    every length (x[5:1]) is 0 long; x[a:-b:s] is x[a:-b] then [::s]; a reversed slice
    is the axis flipped, then sliced forward (x[-1::-2] failed to build: its open stop
    overflowed TVM's length arithmetic). Found by fuzzing."""
    program = egad.trace(lambda x: x[index] * 2.0, egad.Spec(("T", 3), "float64"))
    gradient = egad.value_and_grad(egad.trace(lambda x: enp.sum(enp.sin(x[index])), egad.Spec(("T", 3), "float64")))
    compiled, compiled_gradient = build(program, cache=BuildCache(None)), build(gradient, cache=BuildCache(None))
    for length in (0, 1, 2, 4, 7, 12):
        x = np.arange(length * 3.0).reshape(length, 3)
        np.testing.assert_array_equal(compiled(x), x[index] * 2.0)
        assert_trees_close(compiled_gradient(x), egad.interpret(gradient, x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("index, written", [(slice(2, -3, -1), "[2:-3:-1]"), (slice(-5, 1), "[-5:1:None]")])
def test_a_slice_between_bounds_from_opposite_ends_of_a_symbolic_axis_is_refused(index, written):
    program = egad.trace(lambda x: x[index] * 2.0, egad.Spec(("T", 3), "float64"))
    with pytest.raises(egad.UnsupportedError, match=rf"(?s)slice \{written[:-1]}\] between bounds counted from "
                                                    r"opposite ends.*count both bounds from the same end"):
        build(program, cache=BuildCache(None))


@pytest.mark.parametrize("pad_first", [False, True], ids=["x-then-ones", "ones-then-x"])
@pytest.mark.parametrize("index", [slice(-4, -2), slice(-4, -1), slice(None, None, 2), slice(1, None, 3),
                                   slice(None, 4), slice(-3, None), (slice(-4, -1), slice(None, None, 2))], ids=str)
def test_a_slice_of_a_concatenations_axis_has_its_value_and_gradient(index, pad_first):
    """A slice of a `T+3` axis reaching into its symbolic part: TVM's kernel for
    strided_slice computes its length by another formula than Relax inferred
    (min(max(T + 1, 0), T + 3) - min(max(T - 1, 0), T + 3) for min(1, T) + 1), so the
    gradient's product of the slice and its broadcast cotangent lost its shape and
    failed to build, and x[::2] did not build at all. Found by fuzzing."""
    def loss(x):
        padded = enp.concatenate([enp.ones((3, 3)), x] if pad_first else [x, enp.ones((3, 3))], axis=0)
        return enp.sum(enp.sin(padded[index]) ** 2)

    program = egad.trace(loss, egad.Spec(("T", 3), "float64"))
    gradient = egad.value_and_grad(program)
    compiled, compiled_gradient = built(program), built(gradient)
    for length in (0, 1, 2, 5):
        x = RNG.standard_normal((length, 3))
        assert np.isclose(compiled(x), loss(x))  # the same function on numpy arrays
        assert_trees_close(compiled_gradient(x), egad.interpret(gradient, x), 1e-12, f"T={length}")


def test_a_concatenation_of_an_axis_and_its_slice_sliced_again_has_its_gradient():
    """concat([x, x[:2]])[1:] * 1.3: its axis is T + T[:2]; with T[:2] written as the
    expression Relax inferred (min(2, T)), TVM's FuseTIR recursed without end on the
    fused kernel's shapes (a segmentation fault). A slice's new dim is bound to its length
    at run time instead. Found by fuzzing."""
    def loss(x):
        return enp.sum(enp.concatenate([x, x[:2]], axis=0)[1:] * 1.3)

    gradient = egad.value_and_grad(egad.trace(loss, egad.Spec(("T", 3), "float64")))
    compiled = built(gradient)
    for length in (0, 1, 2, 4):
        x = RNG.standard_normal((length, 3))
        assert_trees_close(compiled(x), egad.interpret(gradient, x), 1e-12, f"T={length}")


@pytest.mark.parametrize("index", [(slice(1, None), slice(None, 0)), (slice(None, None, 2), slice(4, None)),
                                   (slice(-2, None), slice(5, None)), (slice(None), slice(2, 1)),
                                   (slice(2, -3), slice(2, 1)), (slice(None), slice(-1, 1))], ids=str)
def test_a_static_axis_sliced_empty_beside_a_symbolic_one(index):
    """x[:, 2:1] of f64[T, 4]: TVM's strided_slice gave the static axis the negative
    length stop - start (std::bad_alloc at run time); the gradient of x[1:, :0] (a
    scatter into an empty (T, 0) array) divided by its 0 while building. Found by fuzzing."""
    program = egad.trace(lambda x: x[index] * 2.0, egad.Spec(("T", 4), "float64"))
    gradient = egad.value_and_grad(egad.trace(lambda x: enp.sum(enp.sin(x[index])), egad.Spec(("T", 4), "float64")))
    compiled, compiled_gradient = built(program), built(gradient)
    for length in (0, 1, 3, 6):
        x = RNG.standard_normal((length, 4))
        got = compiled(x)
        assert got.shape == x[index].shape
        value, (dx,) = compiled_gradient(x)
        assert value == 0.0 and dx.shape == x.shape and not dx.any()


def test_an_update_adding_nothing_still_checks_its_indices():
    """x.at[i].add(v) where every row is empty (x of shape (T, 0)) adds nothing, but an
    index out of range is still an error, as in the interpreter."""
    program = egad.trace(lambda x, i: x.at[i].add(1.0), egad.Spec(("T", 0), "float64"), egad.Spec(("K",), "int64"))
    compiled = built(program)
    x = np.zeros((3, 0))
    assert compiled(x, np.array([0, 2, -1])).shape == (3, 0)
    with pytest.raises(egad.IndexOutOfRangeError):
        egad.interpret(program, x, np.array([3]))
    with pytest.raises(egad.IndexOutOfRangeError, match="index 3 is out of range for an axis of size 3"):
        compiled(x, np.array([3]))
