"""Stacked rows written in place (tvm_bridge/rows_in_place.py): a loop's rows that a
kernel computes land in the loop's stacks with no copy by the driver, and results agree
with the interpreter for every kind of row: one a kernel makes, the state a trip
started from (written by the trip before; the first trip's copied), a state no kernel
makes (copied), a row also carried as state, a row stacked twice, reversed loops, zero
and one trips, and rows too small to be written in place (copied, as before); and that
the loop driver is told which rows its body writes in place (it fetches only the others
from the body's results from the third trip on, having checked them on the second, and
all of them where they were not in place)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tvm import relax

import egad
import egad.numpy as enp
from egad.ir.types import TensorType
from egad.tvm_bridge import build, runtime
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge.rows_in_place import DRIVER_ROWS_ARGUMENT, can_write_in_place
from tests.tvm_bridge.kernels import pipeline_module, pipeline_prim_funcs

T, B, H = 5, 4, 16  # a row of B x H float32 is 256 bytes: written in place


class _CountedCopies:
    """Stands in for runtime.ctypes: counts the driver's row copies."""

    def __init__(self):
        self.count = 0

    def memmove(self, *args):
        self.count += 1
        return ctypes.memmove(*args)


def _leaves(tree) -> list:
    return [leaf for item in tree for leaf in _leaves(item)] if isinstance(tree, (tuple, list)) else [tree]


def copies_of_a_checked_call(monkeypatch, fn, args) -> int:
    """Build `fn` traced on `args`, run it, check the results against the interpreter,
    and return how many rows the driver copied."""
    program = egad.trace(fn, *args)
    compiled = build(program, cache=BuildCache(None))
    copies = _CountedCopies()
    monkeypatch.setattr(runtime, "ctypes", copies)
    got = compiled(*args)
    for value, expected in zip(_leaves(got), _leaves(egad.interpret(program, *args))):
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-6)
    return copies.count


def _inputs(width=H):
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((width, width)) * 0.3).astype(np.float32)
    xs = rng.standard_normal((T, B, width)).astype(np.float32)
    h0 = rng.standard_normal((B, width)).astype(np.float32)
    return W, xs, h0


def rows_made_and_passed_through(W, xs, h0):
    def step(h, x):
        h_new = enp.tanh(h @ W + x)
        return h_new, (h_new * 2.0, h)  # a row a kernel makes; the state passed through

    return egad.scan(step, h0, xs)


def test_rows_a_kernel_makes_are_not_copied_and_of_the_states_only_the_initial_one_is(monkeypatch):
    copies = copies_of_a_checked_call(monkeypatch, rows_made_and_passed_through, _inputs())
    assert copies == 1  # h0, the first trip's row of the states: each later one the trip before wrote


def rows_of_a_state_no_kernel_makes(W, xs, h0):
    def step(carry, x):
        h, c = carry
        h_new = enp.tanh(h @ W + x + c)
        return (h_new, c), (h, c)  # c passes through every trip unchanged

    return egad.scan(step, (h0, h0 * 0.5), xs)


def test_a_state_no_kernel_makes_is_copied_every_trip(monkeypatch):
    copies = copies_of_a_checked_call(monkeypatch, rows_of_a_state_no_kernel_makes, _inputs())
    assert copies == 1 + T


def rows_that_are_also_state(W, xs, h0):
    def step(h, x):
        h_new = enp.tanh(h @ W + x)
        return h_new, (h_new, h_new)  # carried on, and stacked twice

    h, (first, second) = egad.scan(step, h0, xs)
    return h, first, second, h * 3.0  # h's memory must be its own: a later op reads it


def test_a_row_carried_as_state_and_stacked_twice_agrees_with_the_interpreter(monkeypatch):
    copies = copies_of_a_checked_call(monkeypatch, rows_that_are_also_state, _inputs())
    assert copies == T  # the second stack of the same row


def test_the_final_state_does_not_share_memory_with_the_stack_it_was_written_into():
    args = _inputs()
    program = egad.trace(rows_that_are_also_state, *args)
    h, first, _, _ = build(program, cache=BuildCache(None))(*args)
    assert not np.shares_memory(h, first)
    h += 1.0
    np.testing.assert_allclose(first[-1] + 1.0, h, rtol=1e-6, atol=1e-6)  # the stack kept its row


def reversed_rows(W, xs, h0):
    def step(h, x):
        h_new = enp.tanh(h @ W + x)
        return h_new, enp.exp(h_new * 0.5)

    return egad.scan(step, h0, xs, reverse=True)


def test_a_reversed_loop_writes_each_row_at_its_own_step(monkeypatch):
    copies = copies_of_a_checked_call(monkeypatch, reversed_rows, _inputs())
    assert copies == 0


@pytest.mark.parametrize("fn", [reversed_rows, rows_made_and_passed_through])
def test_rows_of_a_symbolic_number_of_trips_including_none_and_one(fn):
    W, xs, h0 = _inputs()
    program = egad.trace(fn, egad.Spec((H, H), "float32"), egad.Spec(("T", B, H), "float32"),
                         egad.Spec((B, H), "float32"))
    compiled = build(program, cache=BuildCache(None))
    for steps in (0, 1, 3):
        call = (W, xs[:steps], h0)
        for value, expected in zip(_leaves(compiled(*call)), _leaves(egad.interpret(program, *call))):
            assert value.shape == expected.shape
            np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-6)


def test_rows_too_small_to_align_are_copied(monkeypatch):
    copies = copies_of_a_checked_call(monkeypatch, rows_made_and_passed_through, _inputs(width=3))
    assert copies == 2 * T  # 4 x 3 float32 rows (48 bytes) would start off 64-byte boundaries


def a_row_made_with_a_state_by_one_kernel(W, xs, h0):
    def step(carry, x):
        h, s = carry
        s_new = s + x  # a state no row is: made by the same kernel as the row that reads it
        return (enp.tanh(h @ W + x), s_new), s_new[:, :H // 2] * 3.0  # a row of another shape

    return egad.scan(step, (h0, h0), xs)


def test_a_row_one_kernel_makes_with_other_values_is_written_in_place(monkeypatch):
    """tvm_bridge/output_fusion.py makes s_new and the row one kernel, the row its second
    output: the kernel's outputs are reordered so that the row it writes in place comes first."""
    args = _inputs()
    assert any(name.endswith("_rows_first") for name in pipeline_prim_funcs(
        egad.trace(a_row_made_with_a_state_by_one_kernel, *args)))
    assert copies_of_a_checked_call(monkeypatch, a_row_made_with_a_state_by_one_kernel, args) == 0


def test_a_compiled_lstm_gradient_agrees_with_the_interpreter_with_its_rows_in_place(monkeypatch):
    """The optimized LSTM's forward stacks its gates and states for the adjoint, which
    stacks each trip's gate gradients for the weight gradients: every row a kernel's."""
    from benchmarks.optimizer import lstm_workload

    _, program, wrt, args = lstm_workload(6)
    optimized = egad.optimize(program, wrt=wrt)
    optimized(*args)  # builds, checks and times it
    assert "fallback: none" in optimized.report()
    copies = _CountedCopies()
    monkeypatch.setattr(runtime, "ctypes", copies)
    value, grads = optimized(*args)
    assert copies.count == 2  # the forward's initial h and c
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=wrt), *args)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def driver_masks(fn, args) -> list[int]:
    """The rows each loop driver call of `fn`'s module is told its body writes in place
    (a mask, bit k: row k), from the call's `rows_in_place` argument (1 + 2 x mask)."""
    main = pipeline_module(egad.trace(fn, *args))["main"]
    found = [binding.value.args[DRIVER_ROWS_ARGUMENT] for block in main.body.blocks for binding in block.bindings
             if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, relax.ExternFunc)
             and str(binding.value.op.global_symbol) == "egad.for_loop"]
    assert found, "no loop driver call found"
    return [(int(argument.value) - 1) // 2 for argument in found]


@pytest.mark.parametrize("fn, mask", [
    (rows_made_and_passed_through, 0b11),  # a kernel's row; the state the trip before's kernel wrote
    (rows_of_a_state_no_kernel_makes, 0b01),  # c passes through: copied every trip
    (rows_that_are_also_state, 0b01),  # the second stack of the same value: copied
    (reversed_rows, 0b1),
])
def test_the_driver_is_told_which_rows_the_body_writes_in_place(fn, mask):
    assert driver_masks(fn, _inputs()) == [mask]


class _CountedFetches:
    """Stands in for runtime._ffi: counts the results the driver fetches from its body's."""

    def __init__(self):
        self.count, self._ffi = 0, runtime._ffi

    def ArrayGetItem(self, array, k):  # noqa: N802 - the FFI's name
        self.count += 1
        return self._ffi.ArrayGetItem(array, k)

    def __getattr__(self, name):
        return getattr(self._ffi, name)


@pytest.mark.parametrize("found_in_place, fetched", [
    (True, 2 * 4 + (T - 2) * 2),  # h, its two rows and the counter twice; then h and the counter
    # where ensure_zero_offset copies a view (a device without pointer arithmetic on the host) the kernels
    # write copies: the second trip finds the rows elsewhere, and the driver fetches every row from then on
    (False, T * 4),
])
def test_the_driver_fetches_only_the_rows_not_in_place_from_the_third_trip_on(monkeypatch, found_in_place, fetched):
    if not found_in_place:
        monkeypatch.setattr(runtime._StackedRows, "in_place", lambda self, k, j, value: False)
    program = egad.trace(rows_made_and_passed_through, *_inputs())
    compiled = build(program, cache=BuildCache(None))
    fetches = _CountedFetches()
    monkeypatch.setattr(runtime, "_ffi", fetches)
    got = compiled(*_inputs())
    assert fetches.count == fetched
    for value, expected in zip(_leaves(got), _leaves(egad.interpret(program, *_inputs()))):
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("row, expected", [
    (TensorType((4, 16), "float32"), True),
    (TensorType((16,), "float64"), True),
    (TensorType((4, 3), "float32"), False),  # 48 bytes
    (TensorType(("B", 16), "float32"), False),  # symbolic
    (TensorType((64,), "bool"), False),
    (TensorType((0, 16), "float32"), False),
])
def test_which_rows_are_written_in_place(row, expected):
    assert can_write_in_place([row]) is expected
    assert can_write_in_place([TensorType((4, 16), "float32"), row]) is expected
