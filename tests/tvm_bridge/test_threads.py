"""egad used from several threads at once: tracing, differentiating, building, calling
and optimizing each give what they give on one thread.

Tracing kept one region stack per process (two traces at once pushed into each
other's regions), lowering shared Relax's one current BlockBuilder, the calls of one
build shared a VM, a call released the tapes of calls beside it, and an optimizer's
e-graph could be garbage-collected on another thread, which egglog refuses.
"""
from __future__ import annotations

import gc
import sys
import threading

import numpy as np

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache


def _loss(k: int):
    def loss(W, xs):
        def step(t, h):
            return enp.tanh(xs[t] @ W + h * (0.5 + 0.1 * k))

        h = egad.fori_loop(0, xs.shape[0], step, enp.zeros((2, 4)))
        return enp.sum(h * h) + k * enp.max(W[k % 4])

    return loss


RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 4))
XS = [RNG.standard_normal((3 + k, 2, 4)) for k in range(4)]


def _in_threads(work, count: int) -> list:
    """work(k) for k < count, all started together; their results, or their exceptions."""
    start = threading.Barrier(count)
    results: list = [None] * count

    def run(k):
        start.wait()
        try:
            results[k] = work(k)
        except Exception as error:  # noqa: BLE001 - reported by the test
            results[k] = error

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _assert_close(got, want):
    assert not isinstance(got, Exception), repr(got)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _long_loss(W, xs):
    def step(t, h):
        for _ in range(20):  # a long trace, which other threads interleave with
            h = enp.tanh(xs[t] @ W + h * 0.5)
        return h

    return enp.sum(egad.fori_loop(0, xs.shape[0], step, enp.zeros((2, 4))) ** 2)


def _long_gradient():
    return egad.grad(egad.trace(_long_loss, W, XS[0]))


def test_programs_traced_and_differentiated_in_threads_are_the_ones_traced_alone():
    alone = _long_gradient()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns every few bytecodes
    try:
        traced = _in_threads(lambda k: [_long_gradient() for _ in range(3)], 4)
    finally:
        sys.setswitchinterval(interval)
    for programs in traced:
        assert not isinstance(programs, Exception), repr(programs)
        for program in programs:
            assert str(program) == str(alone)
    _assert_close(egad.interpret(traced[0][0], W, XS[0]), egad.interpret(alone, W, XS[0]))


def test_programs_built_in_threads_compute_what_they_interpret():
    gradients = [egad.grad(egad.trace(_loss(k), W, XS[k])) for k in range(3)]
    compiled = _in_threads(lambda k: build(gradients[k], cache=BuildCache(None)), 3)
    for k, c in enumerate(compiled):
        assert not isinstance(c, Exception), repr(c)
        _assert_close(c(W, XS[k]), egad.interpret(gradients[k], W, XS[k]))


def test_one_build_called_in_threads_at_once_keeps_each_calls_tapes():
    gradient = egad.grad(egad.trace(_loss(1), W, egad.Spec(("T", 2, 4), "float64")))
    compiled = build(gradient)
    inputs = [RNG.standard_normal((1 + k, 2, 4)) for k in range(6)]
    want = [egad.interpret(gradient, W, xs) for xs in inputs]

    def calls(k):
        for _ in range(30):
            _assert_close(compiled(W, inputs[k]), want[k])

    assert _in_threads(calls, 6) == [None] * 6


def test_an_optimized_program_called_in_threads_specializes_once():
    program = egad.trace(_loss(2), W, egad.Spec(("T", 2, 4), "float64"))
    optimized = egad.optimize(program, check=False)
    gradient = egad.grad(program)

    def call(k):
        value, (dW,) = optimized(W, XS[k % 4])
        np.testing.assert_allclose(dW, egad.interpret(gradient, W, XS[k % 4])[0], rtol=1e-12)

    assert _in_threads(call, 4) == [None] * 4
    assert optimized.builds == 1 and len(optimized.optimizations) == 1


def test_an_optimizers_e_graph_is_not_left_for_another_threads_garbage_collection():
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda report: unraisable.append(report.exc_value)
    gc.disable()  # only the collection below, on another thread, may free what optimizing left
    try:
        egad.optimize(egad.trace(_loss(3), W, XS[1]), check=False)
        collector = threading.Thread(target=gc.collect)
        collector.start()
        collector.join()
    finally:
        gc.enable()
        sys.unraisablehook = hook
    assert not unraisable, unraisable
