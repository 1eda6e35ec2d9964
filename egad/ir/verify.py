"""The IR verifier: run after every transformation (tests do).

Checks, for the whole program:
- SSA: every Var is defined once (as a param or a binding output);
- scoping: a binding's inputs and a region's results are params of that region or
  outputs of its earlier bindings; a region never reads an outer value directly;
- types: each op's shape rule reproduces its outputs' declared types;
- control ops: region params match the operands, branches agree, loop state keeps
  its type across iterations, `while` conditions are scalar bool.
"""
from __future__ import annotations

from ..errors import EgadError, VerifyError
from . import ops
from .program import Binding, Program, Region, Var
from .types import TensorType, is_int


def verify(program: Program) -> Program:
    """Raise VerifyError on the first ill-formed construct; return the program."""
    _check_region(program.region, defined=set())
    return program


def _fail(text: str, binding: Binding | None = None, region: Region | None = None):
    where = []
    if binding is not None:
        where.append(f"op {binding.op!r} at {binding.loc}")
    if region is not None:
        where.append(f"region {region.name!r}")
    raise VerifyError(f"ill-formed IR: {text}" + (f" ({', '.join(where)})" if where else ""))


def _define(var: Var, defined: set[int], scope: set[int], region: Region, binding=None):
    if var.uid in defined:
        _fail(f"{var} is defined twice", binding, region)
    defined.add(var.uid)
    scope.add(var.uid)


def _check_region(region: Region, defined: set[int]):
    scope: set[int] = set()
    for param in region.params:
        _define(param, defined, scope, region)
    for binding in region.bindings:
        for var in binding.inputs:
            if var.uid not in scope:
                _fail(f"input {var} is not in scope (a region sees only its own params)", binding, region)
        for sub in binding.regions:
            _check_region(sub, defined)
        expected = _expected_output_types(binding, region)
        actual = [v.type for v in binding.outputs]
        if len(expected) != len(actual) or not all(a.same_as(e) for a, e in zip(actual, expected)):
            _fail(f"outputs typed {_show(actual)} but the op gives {_show(expected)}", binding, region)
        for var in binding.outputs:
            _define(var, defined, scope, region, binding)
    for var in region.results:
        if var.uid not in scope:
            _fail(f"result {var} is not in scope", None, region)


def _show(types) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _expected_output_types(binding: Binding, region: Region) -> list[TensorType]:
    op = ops.OPS.get(binding.op)
    if op is None:
        _fail(f"unknown op {binding.op!r}", binding, region)
    in_types = [v.type for v in binding.inputs]
    if op.family == "control":
        return control_result_types(binding)
    if binding.regions:
        _fail("only control ops carry regions", binding, region)
    if op.num_inputs is not None and len(in_types) != op.num_inputs:
        _fail(f"takes {op.num_inputs} inputs, got {len(in_types)}", binding, region)
    try:
        return op.shape_rule(in_types, binding.attrs)
    except EgadError as error:
        _fail(str(error), binding, region)


def _same_types(got: list[TensorType], want: list[TensorType]) -> bool:
    return len(got) == len(want) and all(g.same_as(w) for g, w in zip(got, want))


def _strong(t):
    """The type without its weak flag (tapes have none)."""
    return TensorType(t.shape, t.dtype) if isinstance(t, TensorType) else t


def _is_scalar(t: TensorType, kind: str) -> bool:
    return isinstance(t, TensorType) and t.ndim == 0 and (t.dtype == "bool" if kind == "bool" else is_int(t.dtype))


def control_result_types(binding: Binding) -> list[TensorType]:
    """Output types of a control op, after checking its regions' signatures."""
    name, types, regions = binding.op, [v.type for v in binding.inputs], binding.regions

    def need(condition: bool, text):  # text: a str, or a function making one (only on failure)
        if not condition:
            _fail(text() if callable(text) else text, binding)

    if name in ("if", "switch"):
        need(len(types) >= 1, "needs a predicate or index")
        need(_is_scalar(types[0], "bool" if name == "if" else "int"),
             f"{'predicate must be a bool' if name == 'if' else 'index must be an int'} scalar, got {types[0]}")
        need(len(regions) == 2 if name == "if" else len(regions) >= 1, f"wrong number of branches: {len(regions)}")
        operand_types = types[1:]
        outs = regions[0].result_types
        for branch in regions:
            need(_same_types(branch.param_types, operand_types),
                 lambda: f"branch {branch.name!r} params {_show(branch.param_types)} "
                         f"differ from operands {_show(operand_types)}")
            need(_same_types(branch.result_types, outs),
                 lambda: f"branch {branch.name!r} returns {_show(branch.result_types)}, another returns {_show(outs)}")
        return [_strong(t) for t in outs]

    if name == "for":
        n_state = binding.attrs["n_state"]
        need(len(types) >= 2 + n_state and len(regions) == 1, "malformed for")
        need(_is_scalar(types[0], "int") and _is_scalar(types[1], "int"), f"bounds must be int scalars: {types[:2]}")
        state, invariants = types[2:2 + n_state], types[2 + n_state:]
        (body,) = regions
        need(len(body.params) >= 1 and _is_scalar(body.params[0].type, "int"), "body's first param must be the int counter")
        need(_same_types(body.param_types[1:], state + invariants),
             lambda: f"body params {_show(body.param_types[1:])} "
                     f"differ from state+invariants {_show(state + invariants)}")
        need(_same_types(body.result_types[:n_state], state),
             lambda: f"loop state changes type: in {_show(state)}, out {_show(body.result_types[:n_state])}")
        trip_dim = binding.attrs["trip_dim"]
        ys = [TensorType((trip_dim,) + t.shape, t.dtype) for t in body.result_types[n_state:]]
        return [_strong(t) for t in state] + ys

    if name == "while":
        n_state = binding.attrs["n_state"]
        need(len(types) >= n_state and len(regions) == 2, "malformed while")
        state = types[:n_state]
        cond, body = regions
        for region in regions:
            need(_same_types(region.param_types, types),
                 lambda: f"{region.name} params {_show(region.param_types)} "
                         f"differ from state+invariants {_show(types)}")
        need(len(cond.results) == 1 and _is_scalar(cond.results[0].type, "bool"),
             lambda: f"while condition must return one bool scalar, got {_show(cond.result_types)}")
        need(_same_types(body.result_types, state),
             lambda: f"loop state changes type: in {_show(state)}, out {_show(body.result_types)}")
        return [_strong(t) for t in state]

    _fail(f"unknown control op {name!r}", binding)
