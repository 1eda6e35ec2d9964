"""Pure reads fused where they are used (tvm_bridge/fusion.py `read_where_used`): a
loop body's row of a tensor read by several elementwise ops is read in place by each
of them instead of copied by a kernel of its own first, and the compiled results stay
the interpreter's, whether the row is also a loop output or a product's operand."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import egad
import egad.numpy as enp
from egad.tvm_bridge import build, fusion, tir_blocks
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_prim_funcs

RNG = np.random.default_rng(0)
XS, H = RNG.standard_normal((5, 4, 8)), RNG.standard_normal((4, 8))
W = RNG.standard_normal((8, 8))


def row_read_three_times(xs, h):
    def body(i, h):
        row = xs[i]
        return enp.tanh(h * row + row) * row

    return egad.fori_loop(0, xs.shape[0], body, h)


def row_also_stacked_and_multiplied(xs, h, w):
    def body(h, x):
        return enp.tanh(h @ w + x * 2.0) + x, (x, x @ w)  # the row: elementwise, stacked, a product's operand

    return egad.scan(body, h, xs)


def row_gradient(xs, h):
    return enp.sum(row_read_three_times(xs, h) ** 2)


def pure_reads(program) -> list[str]:
    return [name for name, func in pipeline_prim_funcs(program).items() if tir_blocks.is_pure_read(func)]


def test_a_row_read_by_three_elementwise_ops_has_no_kernel_of_its_own(monkeypatch):
    program = egad.trace(row_read_three_times, XS, H)
    assert pure_reads(program) == []
    monkeypatch.setattr(fusion, "read_where_used", tvm.transform.module_pass(
        lambda mod, _context: mod, opt_level=0, name="unchanged"))
    assert len(pure_reads(program)) == 1  # without the pass: the take, copying the row each trip


@pytest.mark.parametrize("fn, args", [(row_read_three_times, (XS, H)), (row_also_stacked_and_multiplied, (XS, H, W)),
                                      (egad.value_and_grad(egad.trace(row_gradient, XS, H), wrt=(0, 1)), (XS, H))],
                         ids=["elementwise", "stacked-and-multiplied", "gradient"])
def test_fused_reads_compute_what_the_interpreter_does(fn, args):
    program = fn if isinstance(fn, egad.Program) else egad.trace(fn, *args)
    compiled = build(program, cache=BuildCache(None))
    assert_trees_close(compiled(*args), egad.interpret(program, *args), 1e-12, program.name)


def rnn_loss(xs, h, w, u):
    def body(i, h):
        return enp.tanh(h @ w + xs[i] @ u)

    return enp.sum(egad.fori_loop(0, xs.shape[0], body, h) ** 2)


def unread_chain(x, t):
    unread = (t + 1) * 2  # noqa: F841 - traced, never read
    return x * 2.0


@pytest.mark.parametrize("case", ["adjoint-transposes", "traced-chain"])
def test_unread_bindings_make_no_fused_group(case, capfd):
    """Bindings nothing reads (the adjoint's transposes of taped rows that
    FuseTransposeMatmul leaves behind, a traced computation never used) are dropped
    before FuseOps, which warned of dead code for each fused group they made."""
    if case == "adjoint-transposes":
        args = (XS, H, W, RNG.standard_normal((8, 8)))
        program = egad.value_and_grad(egad.trace(rnn_loss, *args), wrt=(2, 3))
    else:
        args = (H, np.int64(3))
        program = egad.trace(unread_chain, *args)
    compiled = build(program, cache=BuildCache(None))
    assert "dead codes" not in capfd.readouterr().err
    assert_trees_close(compiled(*args), egad.interpret(program, *args), 1e-12, case)
