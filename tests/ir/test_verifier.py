"""The verifier rejects every kind of ill-formed IR a transformation could produce,
and accepts what the tracer builds."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import egad
import egad.numpy as enp
from egad.ir import Binding, Region, TensorType, Var, verify, walk_bindings
from tests.programs import all_programs

F32 = TensorType((2, 3), "float32")


def _loop_program():
    def f(x, n):
        return egad.fori_loop(0, n, lambda i, h: enp.tanh(h) * x.sum(), x)

    return egad.trace(f, np.ones((2, 3), np.float32), 3)


def test_every_corpus_program_verifies():
    for program in all_programs():
        args = program.make_args(np.random.default_rng(0))
        verify(egad.trace(program.fn, *args, static_argnums=program.static_argnums))


def test_rejects_a_value_used_out_of_scope():
    program = _loop_program()
    loop = next(b for b in program.region.bindings if b.op == "for")
    body = loop.regions[0]
    outer_value = program.params[0]
    # make the body read the program's param directly instead of its own captured param
    tanh = next(b for b in body.bindings if b.op == "tanh")
    tanh.inputs = (outer_value,)
    with pytest.raises(egad.VerifyError, match="not in scope"):
        verify(program)


def test_rejects_a_binding_whose_declared_type_is_wrong():
    program = _loop_program()
    binding = next(b for b in walk_bindings(program.region) if b.op == "tanh")
    binding.outputs[0].type = TensorType((3, 2), "float32")
    with pytest.raises(egad.VerifyError, match="tanh"):
        verify(program)


def test_rejects_loop_state_that_changes_type():
    program = _loop_program()
    loop = next(b for b in program.region.bindings if b.op == "for")
    body = loop.regions[0]
    cast = Var(TensorType((2, 3), "float64"))
    body.bindings.append(Binding((cast,), "cast", (body.results[0],), {"dtype": "float64"}))
    body.results = (cast,)
    with pytest.raises(egad.VerifyError, match="loop state changes type"):
        verify(program)


def test_rejects_a_value_defined_twice():
    x = Var(F32)
    region = Region((x,), [Binding((x,), "neg", (x,))], (x,))
    program = copy.copy(_loop_program())
    program.region = region
    with pytest.raises(egad.VerifyError, match="defined twice"):
        verify(program)


def test_rejects_branches_that_disagree():
    program = egad.trace(lambda x: egad.cond(x.sum() > 0, lambda x: x, lambda x: -x, x), np.ones((2, 3), np.float32))
    branch = next(b for b in program.region.bindings if b.op == "if").regions[1]
    first = Var(TensorType((3,), "float32"))
    branch.bindings.append(Binding((first,), "take", (branch.results[0], _int_const(branch)), {"axis": 0}))
    branch.results = (first,)
    with pytest.raises(egad.VerifyError, match="branch"):
        verify(program)


def _int_const(region: Region) -> Var:
    index = Var(TensorType((), "int64"))
    region.bindings.append(Binding((index,), "const", (), {"value": np.asarray(0, "int64")}))
    return index


def test_rejects_a_non_bool_while_condition():
    program = egad.trace(lambda x: egad.while_loop(lambda s: s < 3, lambda s: s + 1, 0), np.ones(2))
    loop = next(b for b in program.region.bindings if b.op == "while")
    cond = loop.regions[0]
    cond.results = (cond.params[0],)
    with pytest.raises(egad.VerifyError, match="bool"):
        verify(program)


def test_rejects_unknown_ops_and_wrong_arity():
    x = Var(F32)
    y = Var(F32)
    program = _loop_program()
    program.region = Region((x,), [Binding((y,), "frobnicate", (x,))], (y,))
    with pytest.raises(egad.VerifyError, match="unknown op"):
        verify(program)
    program.region = Region((x,), [Binding((y,), "add", (x,))], (y,))
    with pytest.raises(egad.VerifyError, match="takes 2 inputs"):
        verify(program)
