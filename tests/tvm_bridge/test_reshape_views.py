"""Reshapes a function returns made views (tvm_bridge/reshape_views.py): which are
(a block-local tensor nothing else reads) and which are not (a parameter, a tensor
also returned itself), that the built module computes the same, and that a loop body
returning its packed step product returns it without copying it. No timing here: the
module says what the copy cost."""
from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I, relax as R, tirx as T

import egad
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from egad.tvm_bridge.pack_weights import pack_loop_invariant_operands
from egad.tvm_bridge.reshape_views import reshape_outputs_as_views
from egad.tvm_bridge.schedule import matmul_column_tile
from egad.tvm_bridge.targets import resolve
from tests.trees import assert_trees_close
from tests.tvm_bridge.kernels import pipeline_module

RNG = np.random.default_rng(0)


@I.ir_module
class DoubledThenFlattened:
    @T.prim_func(private=True, s_tir=True)
    def double(x: T.Buffer((2, 4), "float32"), y: T.Buffer((2, 4), "float32")):
        for i, j in T.grid(2, 4):
            with T.sblock("double"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = x[vi, vj] * T.float32(2)

    @T.prim_func(private=True, s_tir=True)
    def flatten(x: T.Buffer((2, 4), "float32"), y: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.sblock("flatten"):
                vi = T.axis.spatial(8, i)
                y[vi] = x[vi // 4, vi % 4]

    @R.function
    def returns_the_reshape(x: R.Tensor((2, 4), "float32")):
        cls = DoubledThenFlattened
        with R.dataflow():
            y = R.call_tir(cls.double, (x,), out_ty=R.Tensor((2, 4), "float32"))
            z = R.call_tir(cls.flatten, (y,), out_ty=R.Tensor((8,), "float32"))
            R.output(z)
        return z

    @R.function
    def returns_both(x: R.Tensor((2, 4), "float32")):
        cls = DoubledThenFlattened
        with R.dataflow():
            y = R.call_tir(cls.double, (x,), out_ty=R.Tensor((2, 4), "float32"))
            z = R.call_tir(cls.flatten, (y,), out_ty=R.Tensor((8,), "float32"))
            R.output(y, z)
        return (y, z)

    @R.function
    def reshapes_its_parameter(x: R.Tensor((2, 4), "float32")):
        cls = DoubledThenFlattened
        with R.dataflow():
            z = R.call_tir(cls.flatten, (x,), out_ty=R.Tensor((8,), "float32"))
            R.output(z)
        return z


def bindings(func) -> list:
    return [binding for block in func.body.blocks for binding in block.bindings]


def test_a_returned_reshape_of_a_tensor_made_in_the_block_becomes_a_view():
    mod = reshape_outputs_as_views(DoubledThenFlattened)
    *_, reshape, returned = bindings(mod["returns_the_reshape"])
    assert isinstance(reshape.var, relax.DataflowVar) and returned.value.same_as(reshape.var)
    lowered = relax.transform.RewriteDataflowReshape()(mod)
    assert bindings(lowered["returns_the_reshape"])[1].value.op == tvm.ir.Op.get("relax.reshape")


def test_a_reshape_of_a_parameter_or_of_a_tensor_also_returned_is_left_alone():
    mod = reshape_outputs_as_views(DoubledThenFlattened)
    for name in ("returns_both", "reshapes_its_parameter"):
        assert mod[name].same_as(DoubledThenFlattened[name]), name


def test_the_module_with_views_computes_the_same():
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(reshape_outputs_as_views(DoubledThenFlattened), "llvm"), tvm.cpu())
    np.testing.assert_array_equal(vm["returns_the_reshape"](tvm.runtime.tensor(x)).numpy(), (2 * x).reshape(8))


def test_a_loop_body_returns_its_packed_product_without_copying_it():
    def power_iteration(U, h0):  # the product itself is the next state (a reverse loop's dh = dG @ U^T)
        return egad.fori_loop(0, 4, lambda t, h: h @ U, h0)

    U = (RNG.standard_normal((64, 64)) / 8).astype(np.float32)
    h0 = RNG.standard_normal((8, 64)).astype(np.float32)
    program = egad.trace(power_iteration, U, h0)
    target = resolve("llvm").tvm_target
    module = pipeline_module(pack_loop_invariant_operands(program, lambda dtype: matmul_column_tile(target, dtype)))
    (body,) = [func for gv, func in module.functions_items()
               if isinstance(func, relax.Function) and gv.name_hint.startswith("body")]
    text = body.script()
    assert "matmul_packed" in text and "vm.builtin.reshape" in text
    assert not re.search(r"^ +reshape\w*\(", text, re.MULTILINE)  # no reshape kernel called
    assert_trees_close(build(program, cache=BuildCache(None))(U, h0), egad.interpret(program, U, h0),
                       rtol=1e-4, atol=1e-4)
    gradient = egad.value_and_grad(egad.trace(lambda U, h0: egad.numpy.sum(power_iteration(U, h0) ** 2), U, h0),
                                   wrt=(0, 1))
    assert_trees_close(build(gradient, cache=BuildCache(None))(U, h0), egad.interpret(gradient, U, h0),
                       rtol=1e-3, atol=1e-3)
