"""Random straight-line programs of the ops whose kernels egad's schedule rules shape
(tvm_bridge/schedule.py): products with epilogues, elementwise chains, reductions,
column slices put back together, selects, with values read by several ops (FuseOps
puts such a diamond in one kernel). Built, each agrees with the interpreter, and so
does its gradient's build; as a `scan` body, so does the gradient `egad.optimize`
builds with the default rules and with none. The random control-flow programs of
test_random_compiled.py have few of these shapes. A product read by two epilogue chains (`tanh(y)` and
`sigmoid(y)` of one `y = x @ W + b`) failed to build: the last test, written as a
description of this generator."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import egad
import egad.nn as enn
import egad.numpy as enp
from egad.pytree import flatten
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache

DEPTH = 24  # the products' depth: x is (rows, DEPTH)

UNARY = {"tanh": enp.tanh, "sigmoid": enn.sigmoid, "neg": lambda v: -v, "abs": enp.abs,
         "relu": lambda v: enp.maximum(v, 0.0)}
# every op keeps values near the inputs' scale (no product of two unbounded values): float32
# sums of a few terms, compared at a relative 1e-4
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * enp.tanh(b), "sub": lambda a, b: a - b,
          "max": enp.maximum}
# op -> how many values it reads; each reads and makes (rows, columns) values
# (a "diamond" reads its value in two unary chains that one binary op joins: FuseOps puts
# all of it, and the product or reduction before it, in one kernel)
ARITY = {"product": 0, "product of": 1, "bias": 1, "row sum": 1, "column sum": 1, "halves": 1,
         "select": 2, "diamond": 1, **{name: 1 for name in UNARY}, **{name: 2 for name in BINARY}}


@st.composite
def descriptions(draw):
    """(rows, columns, steps, outputs): each step an op and the earlier values it reads,
    by index from the newest (0), which is read half the time: chains, and often one
    value read twice; the program returns the last `outputs` values (with two, the
    one before the last is read outside its kernel too, and FuseOps fuses less)."""
    rows = draw(st.sampled_from([8, 33, 64]))
    columns = draw(st.sampled_from([16, 40]))
    steps = []
    for k in range(draw(st.integers(2, 7))):
        op = draw(st.sampled_from(sorted(ARITY)))
        # k + 1 values exist (y and k steps); the newest is read half the time
        reads = [draw(st.one_of(st.just(0), st.integers(0, k))) for _ in range(ARITY[op])]
        if op == "diamond":  # its two chains and the op joining them
            op = ("diamond", *draw(st.lists(st.sampled_from(sorted(UNARY)), min_size=2, max_size=2)),
                  draw(st.sampled_from(sorted(BINARY))))
        steps.append((op, tuple(reads)))
    return rows, columns, tuple(steps), draw(st.sampled_from([1, 2]))


def values_of(description, x, W, V, b, y) -> list:
    """The values of the steps, y first: `x @ W` is a product, `v @ V` a product of a value."""
    _, columns, steps, _ = description
    mask = np.arange(columns) % 3 == 0
    values = [y]
    for op, reads in steps:
        operands = [values[-1 - k] for k in reads]
        if op == "product":
            value = x @ W
        elif op == "product of":
            value = operands[0] @ V
        elif op == "bias":
            value = operands[0] + b
        elif op == "row sum":
            value = operands[0] * enp.tanh(enp.sum(operands[0], axis=1, keepdims=True) / columns)
        elif op == "column sum":
            value = operands[0] - enp.sum(operands[0], axis=0, keepdims=True) / operands[0].shape[0]
        elif op == "halves":  # each half its own op, put back together
            half = columns // 2
            value = enp.concatenate([enp.tanh(operands[0][:, :half]), operands[0][:, half:] * 0.5], axis=1)
        elif isinstance(op, tuple):  # ("diamond", its first chain, its second, the join)
            _, first, second, join = op
            value = BINARY[join](UNARY[first](operands[0]), UNARY[second](operands[0]))
        elif op == "select":
            value = enp.where(mask, operands[0], operands[1])
        elif op in UNARY:
            value = UNARY[op](operands[0])
        else:
            value = BINARY[op](*operands)
        values.append(value)
    return values


def program_of(description):
    """fn(x, W, V, b, y) computing the steps, returning the last `outputs` values."""
    outputs = description[3]
    return lambda x, W, V, b, y: tuple(values_of(description, x, W, V, b, y)[-outputs:])


def loop_program_of(description):
    """fn(xs, W, V, b, h0): the steps as a scan body, h = tanh(last value) carried and,
    with two outputs, the value before the last stacked."""
    outputs = description[3]

    def fn(xs, W, V, b, h0):
        def body(h, x):
            values = values_of(description, x, W, V, b, h)
            return enp.tanh(values[-1]), tuple(values[-2:-1] if outputs == 2 else ())

        return egad.scan(body, h0, xs)

    return fn


def arguments(description, seed: int, trips: int | None = None) -> tuple:
    """x (or, with `trips`, xs stacking that many), W, V, b, y."""
    rows, columns = description[:2]
    rng = np.random.default_rng(seed)
    x_shape = (rows, DEPTH) if trips is None else (trips, rows, DEPTH)
    return (rng.standard_normal(x_shape).astype(np.float32),
            (rng.standard_normal((DEPTH, columns)) / np.sqrt(DEPTH)).astype(np.float32),
            (rng.standard_normal((columns, columns)) / np.sqrt(columns)).astype(np.float32),
            rng.standard_normal(columns).astype(np.float32),
            rng.standard_normal((rows, columns)).astype(np.float32))


WRT = (0, 1, 2, 3, 4)  # every argument


def _loss_of(fn):
    """A scalar of all of fn's results (a stacked output included), each weighted differently."""
    def loss(*args):
        return sum(enp.sum(value * value) * (k + 1) for k, value in enumerate(flatten(fn(*args))[0]))

    return loss


def _check(description, seed: int):
    fn = program_of(description)
    args = arguments(description, seed)
    program = egad.trace(fn, *args)
    _assert_close(build(program, cache=BuildCache(None))(*args), egad.interpret(program, *args),
                  "the built random program")

    gradient = egad.value_and_grad(egad.trace(_loss_of(fn), *args), wrt=WRT)
    _assert_close(build(gradient, cache=BuildCache(None))(*args), egad.interpret(gradient, *args),
                  "the built gradient of the random program")


def _check_loop(description, seed: int):
    """The steps as a loop body: the gradient `egad.optimize` builds with the default
    rule families (batching, fusion, stacked rows written in place) and with none."""
    args = arguments(description, seed, trips=4)
    primal = egad.trace(_loss_of(loop_program_of(description)), *args)
    expected = egad.interpret(egad.value_and_grad(primal, wrt=WRT), *args)
    for rules in (None, ()):
        _assert_close(egad.optimize(primal, wrt=WRT, rules=rules)(*args), expected,
                      f"the optimized gradient of the random loop (rules={rules})", rtol=1e-3)


def _assert_close(got, want, context: str, rtol: float = 1e-4):
    """Each leaf close to a relative `rtol` of its largest element: kernels sum in another
    order, and the compiled tanh differs from numpy's by an ulp near +-1, where the
    gradient's 1 - tanh(x)**2 is all rounding (0 against 1.2e-7, times a large sum)."""
    got_leaves, want_leaves = flatten(got)[0], flatten(want)[0]
    assert len(got_leaves) == len(want_leaves), context
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=f"{context}, leaf {k}")


def drawn(check, examples: int):
    """A Hypothesis test of `check(description, seed)` over `examples` draws."""
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(description=descriptions(), seed=st.integers(0, 3))
    def test(description, seed):
        note(f"rows, columns, steps: {description}")
        check(description, seed)

    return test


test_built_random_dataflow_matches_interpreter = drawn(_check, 10)
test_built_random_dataflow_matches_interpreter_many = pytest.mark.slow(drawn(_check, 150))
test_optimized_random_loop_body_matches_interpreter = drawn(_check_loop, 3)
test_optimized_random_loop_body_matches_interpreter_many = pytest.mark.slow(drawn(_check_loop, 40))


def test_a_product_read_by_two_epilogue_chains_builds():
    """`tanh` and `sigmoid` of one biased product, selected by column (the generator draws
    such programs, rarely: 150 draws missed it)."""
    description = (8, 16, (("product", ()), ("bias", (0,)), ("tanh", (0,)), ("sigmoid", (1,)), ("select", (0, 1))), 1)
    _check(description, 0)
