"""`Compiled.profile` / `Optimized.profile` (tvm_bridge/profile.py): every call the VM
makes is counted where it ran (main, or the loop it ran in, nested loops included),
with the trips each loop made, and profiling neither changes results nor accepts bad
input silently."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge import profile as profile_module
from egad.tvm_bridge.profile import Profile

T, INNER, B, H = 7, 4, 4, 16


def _arguments(seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((T, B, H)).astype("float32")
    w = (rng.standard_normal((H, H)) / np.sqrt(H)).astype("float32")
    h0 = rng.standard_normal((B, H)).astype("float32")
    return xs, w, h0


def _rnn(xs, w, h0):
    def step(t, h):
        return enp.tanh(h @ w + xs[t])

    return enp.sum(egad.fori_loop(0, xs.shape[0], step, h0) ** 2)


def _nested(xs, w, h0):
    def outer(t, h):
        def inner(k, g):
            return enp.tanh(g @ w) + xs[t]

        return egad.fori_loop(0, INNER, inner, h)

    return egad.fori_loop(0, xs.shape[0], outer, h0)


def _halving(x):
    return egad.while_loop(lambda v: enp.max(enp.abs(v)) > 1.0, lambda v: v * 0.5, x)


def _profile_of(fn, args, calls: int = 2) -> tuple[Profile, object]:
    compiled = build(egad.trace(fn, *args), "llvm", BuildCache(None))
    return compiled.profile(*args, calls=calls), compiled


def _kernel_rows(profile: Profile, where: str) -> list:
    return [row for row in profile.rows if row.where == where and row.kind == "kernel"]


def test_a_loop_bodys_kernels_are_counted_once_a_trip_under_the_loops_label():
    args = _arguments()
    profile, compiled = _profile_of(_rnn, args)
    (loop,) = profile.loops
    assert (loop.label, loop.driver, loop.where, loop.entered, loop.trips) == \
        ("loop 1", "egad.for_loop", "main", 1, T)
    in_loop = _kernel_rows(profile, "loop 1")
    assert in_loop and all(row.calls % T == 0 for row in in_loop)
    assert any(row.name.startswith(("matmul", "fused_matmul")) for row in in_loop)
    assert _kernel_rows(profile, "main"), "the loss's sum runs after the loop, in main"
    (driver,) = [row for row in profile.rows if row.kind == "loop driver"]
    assert (driver.name, driver.where, driver.calls) == ("egad.for_loop", "main", 1)
    assert all(row.seconds >= 0 and row.calls > 0 for row in profile.rows)
    assert 0 < sum(row.seconds for row in profile.rows) <= profile.profiled_seconds
    assert profile.call_seconds > 0 and profile.calls == 2
    assert list(profile.rows) == sorted(profile.rows, key=lambda row: -row.seconds)
    # profiling ran the same build: its results are still the interpreter's
    np.testing.assert_allclose(compiled(*args), egad.interpret(egad.trace(_rnn, *args), *args), rtol=1e-5)


def test_a_loop_inside_a_loop_body_is_labelled_under_it_with_every_entry_counted():
    profile, _ = _profile_of(_nested, _arguments())
    loops = {loop.label: loop for loop in profile.loops}
    assert set(loops) == {"loop 1", "loop 1.1"}
    assert (loops["loop 1"].entered, loops["loop 1"].trips, loops["loop 1"].where) == (1, T, "main")
    assert (loops["loop 1.1"].entered, loops["loop 1.1"].trips, loops["loop 1.1"].where) == (T, T * INNER, "loop 1")
    inner = _kernel_rows(profile, "loop 1.1")
    assert inner and all(row.calls % (T * INNER) == 0 for row in inner)
    drivers = {row.where: row.calls for row in profile.rows if row.kind == "loop driver"}
    assert drivers == {"main": 1, "loop 1": T}


def test_a_while_loop_is_labelled_without_a_trip_count():
    x = np.full((3, 8), 40.0, "float32")  # 6 halvings to reach 0.625
    profile, _ = _profile_of(_halving, (x,))
    (loop,) = profile.loops
    assert (loop.driver, loop.entered, loop.trips) == ("egad.while_loop", 1, None)
    body = _kernel_rows(profile, "loop 1")
    assert body and max(row.calls for row in body) >= 6
    assert "egad.while_loop in main, entered 1x a call\n" in str(profile) + "\n"


def _branching(v):
    return egad.cond(enp.sum(v) > 0, lambda u: enp.tanh(u) * 2, lambda u: u - 1, v)


def test_a_branch_is_a_function_whose_calls_have_rows_of_their_own():
    x = np.full((4, 8), 2.0, "float32")
    profile, compiled = _profile_of(_branching, (x,))
    kinds = {row.name: row.kind for row in profile.rows}
    branches = [name for name, kind in kinds.items() if kind == "function"]
    assert branches, "the taken branch, a Relax function the VM calls"
    assert any(kind == "kernel" and "tanh" in name for name, kind in kinds.items()), "the branch's kernel"
    assert profile.loops == ()
    np.testing.assert_allclose(compiled(x), egad.interpret(egad.trace(_branching, x), x), rtol=1e-6)


def test_optimize_profiles_the_gradient_its_calls_run_forward_and_reverse_loops_included():
    args = _arguments(1)
    optimized = egad.optimize(egad.trace(_rnn, *args), wrt=(1,), rules=())
    profile = optimized.profile(*args, calls=1)
    assert [(loop.label, loop.trips) for loop in profile.loops] == [("loop 1", T), ("loop 2", T)]
    assert _kernel_rows(profile, "loop 2"), "the reverse loop's kernels"
    text = str(profile)
    assert text.startswith("a call: ") and "ms/call" in text and "loop 2: egad.for_loop in main" in text
    assert set(profile.seconds_by_kind()) <= {"kernel", "function", "loop driver", "runtime", "vm"}


def test_profile_says_what_is_wrong_with_its_arguments():
    args = _arguments()
    optimized = egad.optimize(egad.trace(_rnn, *args), wrt=(1,), rules=())
    for calls in (0, -1, 2.5, True):
        with pytest.raises(egad.ArgumentError, match="calls must be a positive int"):
            optimized.profile(*args, calls=calls)
    with pytest.raises(egad.EgadError):  # as a call with them would
        optimized.profile(args[0], args[1])


class _Clock:
    """The recorder's clock in a test: time moves only when told."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Body:
    """A loop body closure as the hook sees it: known by its handle."""

    def __chandle__(self) -> int:
        return 1


def test_self_times_and_the_share_of_the_hooks_unseen_cost_add_up(monkeypatch):
    """A loop driver that ran 10 s with two 2 s kernel calls inside: self times 6 and 4.
    A profiled call 6 s longer than a plain one, the hook having timed none of itself:
    1 s for each of its 6 entries, taken off the rows the entries fell in (the kernel's
    two calls, 1 s after each; the driver's own call, and the two before its kernels)."""
    clock = _Clock()
    monkeypatch.setattr(profile_module, "_now", clock)
    recorder = profile_module.Recorder()
    for at, symbol, before, args in [(0, "egad.for_loop", True, (None, _Body(), 0, 2)), (1, "k", True, ()),
                                     (3, "k", False, ()), (4, "k", True, ()), (6, "k", False, ()),
                                     (10, "egad.for_loop", False, ())]:
        clock.now = at
        recorder(None, symbol, before, None, *args)
    plain = recorder.profile(calls=1, call_seconds=10.0, profiled_seconds=10.0)
    assert {(row.where, row.name): (row.calls, row.seconds) for row in plain.rows} == \
        {("main", "egad.for_loop"): (1, 6.0), ("loop 1", "k"): (2, 4.0)}
    shared = recorder.profile(calls=1, call_seconds=10.0, profiled_seconds=16.0)
    assert shared.unseen_hook_seconds == 1.0
    assert {(row.where, row.name): row.seconds for row in shared.rows} == \
        {("main", "egad.for_loop"): 3.0, ("loop 1", "k"): 2.0}
    (loop,) = shared.loops
    assert (loop.label, loop.trips, loop.entered) == ("loop 1", 2, 1)


@pytest.mark.gpu
def test_a_cuda_profile_counts_the_same_calls_as_a_cpu_one():
    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA device")
    args = _arguments()
    program = egad.trace(_rnn, *args)
    on_gpu = build(program, "cuda", BuildCache(None)).profile(*args, calls=1)
    assert [(loop.label, loop.trips) for loop in on_gpu.loops] == [("loop 1", T)]
    assert _kernel_rows(on_gpu, "loop 1") and all(row.calls % T == 0 for row in _kernel_rows(on_gpu, "loop 1"))
