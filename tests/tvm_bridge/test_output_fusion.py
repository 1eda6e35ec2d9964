"""Kernels whose results leave their block, fused into the kernels that read them
(tvm_bridge/output_fusion.py): a loop body that hands out every value it computes (an
LSTM's forward, stacking its gates for the reverse) runs its elementwise work as one
kernel with several outputs, not one kernel a value; what is merged, and where it goes
in its block, keeps every result the interpreter's."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax, tirx

import egad
import egad.nn as enn
import egad.numpy as enp
from egad.tvm_bridge import build, output_fusion
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_module

RNG = np.random.default_rng(0)
T, B, H = 4, 8, 16
XS = RNG.standard_normal((T, B, 4 * H)).astype(np.float32)
U = (RNG.standard_normal((H, 4 * H)) * 0.3).astype(np.float32)
H0 = RNG.standard_normal((B, H)).astype(np.float32)
X = RNG.standard_normal((B, H)).astype(np.float32)
W = (RNG.standard_normal((H, H)) * 0.3).astype(np.float32)


def lstm_stacking_its_gates(xs, u, h0):
    """An LSTM whose every gate, cell and tanh(cell) is a stacked row: all read by later ops."""
    def step(carry, x):
        h, c = carry
        z = x + h @ u
        i, f, g, o = (enn.sigmoid(z[:, :H]), enn.sigmoid(z[:, H:2 * H]), enp.tanh(z[:, 2 * H:3 * H]),
                      enn.sigmoid(z[:, 3 * H:]))
        c = f * c + i * g
        tanh_c = enp.tanh(c)
        h = o * tanh_c
        return (h, c), (i, f, g, o, tanh_c)

    (h, c), rows = egad.scan(step, (h0, h0 * 0.5), xs)
    return enp.sum(h * h) + enp.sum(c), rows


def lstm_loss(xs, u, h0):
    return lstm_stacking_its_gates(xs, u, h0)[0]


def returned_and_summed(x, w):
    y = enp.tanh(x)  # returned, and read by an elementwise op and a sum
    return y, y * x + 1.0, enp.sum(y * y)


def producer_moves_down(x, w):
    a = enp.exp(x * 0.1)  # returned; the product between does not read it
    m = x @ w
    return a, m, a * 3.0 + 1.0


def reader_moves_up(x, w):
    a = enp.exp(x * 0.1)  # returned; the product between reads it, the reader's inputs are all older
    m = a @ w
    return a, m, a * 3.0 + x


def neither_moves(x, w):
    a = enp.exp(x * 0.1)  # the product between reads it, and the reader reads the product
    m = a @ w
    return a, m, a * 3.0 + m


def product_read_by_an_activation(x, w):
    y = x @ w  # returned: a contraction's result is never merged into its reader
    return y, enp.tanh(y) * 2.0


CASES = [(lstm_stacking_its_gates, (XS, U, H0)), (returned_and_summed, (X, W)), (producer_moves_down, (X, W)),
         (reader_moves_up, (X, W)), (neither_moves, (X, W)), (product_read_by_an_activation, (X, W))]


def without_the_pass(monkeypatch):
    monkeypatch.setattr(output_fusion, "fuse_outputs_into_readers", tvm.transform.module_pass(
        lambda mod, _context: mod, opt_level=0, name="unchanged"))


def kernel_calls(module, function: str) -> list[str]:
    """The kernels a Relax function of the built module calls, in order."""
    kernels = {gv for gv, func in module.functions_items() if isinstance(func, tirx.PrimFunc)}
    names = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, relax.GlobalVar) and expr.op in kernels:
            names.append(expr.op.name_hint)

    relax.analysis.post_order_visit(module[function].body, visit)
    return names


def body_of(module) -> str:
    (name,) = [gv.name_hint for gv, _ in module.functions_items() if gv.name_hint.startswith("body")]
    return name


def test_an_lstm_body_runs_its_elementwise_work_as_one_kernel(monkeypatch):
    program = egad.trace(lstm_stacking_its_gates, XS, U, H0)
    module = pipeline_module(program)
    fused = kernel_calls(module, body_of(module))
    without_the_pass(monkeypatch)
    module = pipeline_module(program)
    unfused = kernel_calls(module, body_of(module))
    # the row of xs the product's epilogue adds, the product, every gate, c, tanh(c) and h in one
    # kernel, the trip counter's add
    assert len(fused) == 4, fused
    assert len(unfused) >= len(fused) + 6, unfused


@pytest.mark.parametrize("fn, args", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_merged_kernels_compute_what_the_interpreter_does(fn, args):
    program = egad.trace(fn, *args)
    assert_trees_close(build(program, cache=BuildCache(None))(*args), egad.interpret(program, *args), 1e-5,
                       program.name)


def test_the_gradient_of_an_lstm_stacking_its_gates_matches_the_interpreter():
    program = egad.value_and_grad(egad.trace(lstm_loss, XS, U, H0), wrt=(0, 1, 2))
    assert_trees_close(build(program, cache=BuildCache(None))(XS, U, H0), egad.interpret(program, XS, U, H0), 1e-4,
                       program.name)


@pytest.mark.parametrize("fn, merged", [(returned_and_summed, 2), (producer_moves_down, 1), (reader_moves_up, 1),
                                        (neither_moves, 0), (product_read_by_an_activation, 0)])
def test_which_pairs_merge(monkeypatch, fn, merged):
    """`merged`: how many kernel calls fewer the pass leaves in `fn`'s main."""
    program = egad.trace(fn, X, W)
    fused = kernel_calls(pipeline_module(program), "main")
    without_the_pass(monkeypatch)
    unfused = kernel_calls(pipeline_module(program), "main")
    assert len(unfused) - len(fused) == merged, (fused, unfused)
