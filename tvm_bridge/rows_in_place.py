"""Stacked rows written in place: a `for` body's kernels write the rows the loop stacks
(its per-trip outputs, `ys`) straight into the loop's stacks, at the trip's row.

Without this, the loop driver (runtime.py `egad.for_loop`) copies each row into its
stack after the trip, from a buffer the VM allocated for it: an allocation, a copy and
a Python call per row and trip (an LSTM's T=64 gradient: 8 rows a trip pair, 23 MB a
step). Here:

- lower.py gives a body whose rows all qualify (`can_write_in_place`) two more kinds of
  parameter (`stack_params`): the stacks, one per row, each `[trips + 1, *row]`, which
  the driver allocates before the first trip, and `row_offsets`, a shape holding the
  trip's byte offset into each stack, then (a loop running forward) the next trip's;
- after fusion, `write_rows_in_place` rewrites each row a kernel makes (`call_tir`)
  into that kernel writing a view of its stack at the offset (`call_tir_inplace`). The
  view is re-based (`R.memory.ensure_zero_offset`): TVM's kernels address a tensor
  from its data pointer, and `R.memory.view` keeps the offset in byte_offset. Where the
  device has no pointer arithmetic, ensure_zero_offset copies instead, the kernel
  writes the copy, and the driver copies that row as before;
- a row that is a state the trip started from (an RNN stacks h_{t-1} for its
  gradient) is the previous trip's result: in a loop running forward, the kernel
  making that state writes it at the next trip's row (the last trip's, into the
  stack's spare last row), so only the first trip's row, the loop's initial state, is
  copied;
- the body still returns its rows; the driver copies those not already in place (a
  parameter passed through, a row some other op made).

Rows qualify when each has a static shape and a size that is a multiple of 64 bytes:
TVM's kernels assume 64-byte aligned buffers, and row k starts k row sizes into a
64-byte aligned stack.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm import tirx as tir

from egad.ir.types import TensorType

ATTR = "egad.rows_from"  # on a body taking stacks: the position of its first stacked result
AHEAD_ATTR = "egad.rows_ahead"  # 1: it also takes the next trip's row offsets (a loop running forward)
ALIGNMENT = 64
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def can_write_in_place(rows) -> bool:
    """Whether a body with stacked rows of these IR types takes stacks to write them into."""
    return bool(rows) and all(isinstance(t, TensorType) and t.is_static and t.dtype != "bool"
                              and _row_bytes(t) % ALIGNMENT == 0 and _row_bytes(t) > 0 for t in rows)


def _row_bytes(t: TensorType) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize


def stack_params(rows, ahead: bool) -> list:
    """The extra parameters of a body whose rows are `rows`: a stack per row, then the
    trip's byte offsets into them, then (`ahead`) the next trip's."""
    stacks = [relax.Var(f"stack_{k}", relax.TensorType(ndim=len(t.shape) + 1, dtype=t.dtype))
              for k, t in enumerate(rows)]
    offsets = [tir.Var(f"row_offset_{k}", "int64") for k in range(len(rows))]
    if ahead:
        offsets += [tir.Var(f"next_row_offset_{k}", "int64") for k in range(len(rows))]
    return [*stacks, relax.Var("row_offsets", relax.ShapeType(offsets))]


@tvm.transform.module_pass(opt_level=0, name="egad.WriteRowsInPlace")
def write_rows_in_place(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """Run after fusion and kernel scheduling, before CallTIRRewrite: every row a body
    taking stacks computes with a kernel is written by that kernel into its stack, and
    the driver calls running such a body say which rows (`_tell_the_drivers`)."""
    rewritten, kernels, in_place = {}, {}, {}
    for global_var, func in mod.functions_items():
        if isinstance(func, relax.Function) and func.attrs is not None and ATTR in func.attrs:
            written = _write_in_place(func, mod, kernels)
            if written is not None:
                rewritten[global_var], in_place[global_var.name_hint] = written
    if not rewritten:
        return mod
    for global_var, func in [*kernels.values(), *rewritten.items()]:
        mod[global_var] = func
    for global_var, func in list(mod.functions_items()):
        told = _tell_the_drivers(func, in_place) if isinstance(func, relax.Function) else None
        if told is not None:
            mod[global_var] = told
    return relax.transform.Normalize()(mod)


# A driver call's `rows_in_place` argument (runtime.py `egad.for_loop`): 0 where the body
# takes no stacks, else 1 + 2 x a mask of the rows its kernels write in place on every
# trip but the first (bit k: row k). The driver does not fetch those from the body's
# results (a trip's results are fetched one FFI call each, ~0.5-1 us). At most this
# many rows in the mask (an int64 argument).
MAX_MASKED_ROWS = 62
_FOR_LOOP = "egad.for_loop"
# where `rows_in_place` is among the driver call's arguments (lower.py `_for`: invoke,
# body, lo, hi, reverse, n_state, the rows' layout, rows_in_place, the values)
DRIVER_ROWS_ARGUMENT = 7


def _tell_the_drivers(func: relax.Function, in_place: dict) -> relax.Function | None:
    """`func` with each `egad.for_loop` call running a body of `in_place` ({body name:
    mask}) passing that mask; None where it calls none."""
    if not isinstance(func.body, relax.SeqExpr):
        return None
    blocks, changed = [], False
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            call = binding.value
            if (isinstance(call, relax.Call) and isinstance(call.op, relax.ExternFunc)
                    and str(call.op.global_symbol) == _FOR_LOOP and isinstance(call.args[1], relax.GlobalVar)
                    and in_place.get(call.args[1].name_hint)):
                args = list(call.args)
                args[DRIVER_ROWS_ARGUMENT] = relax.prim_value(1 + 2 * in_place[call.args[1].name_hint])
                binding = relax.VarBinding(binding.var, relax.Call(call.op, args, call.attrs, call.ty_args,
                                                                   call.span), binding.span)
                changed = True
            bindings.append(binding)
        blocks.append(type(block)(bindings, block.span))
    if not changed:
        return None
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body, func.body.span), func.ret_ty,
                          func.is_pure, func.attrs, func.span)


def _write_in_place(func: relax.Function, mod: tvm.IRModule, kernels_made: dict) -> tuple | None:
    """(`func` with its rows written in place, the mask of those written so on every
    trip but the first), or None where it writes none."""
    if not isinstance(func.body, relax.SeqExpr) or not isinstance(func.body.body, relax.Tuple):
        return None
    offsets = list(func.params[-1].ty.values)
    ahead = bool(int(func.attrs[AHEAD_ATTR]))
    count = len(offsets) // 2 if ahead else len(offsets)
    stacks = func.params[-1 - count:-1]
    results = func.body.body.fields
    n_state = int(func.attrs[ATTR])  # the results: the state, the rows, the next counter
    rows = results[n_state:n_state + count]
    calls = {binding.var: binding.value for block in func.body.blocks for binding in block.bindings
             if isinstance(binding, relax.VarBinding)}
    # what a kernel makes: its one output, or an output of a kernel making several (tvm_bridge/output_fusion.py)
    kernels = {var for var, value in calls.items() if len(_kernel_outputs(value)) == 1}
    kernels |= {var for var, value in calls.items() if isinstance(value, relax.TupleGetItem)
                and len(_kernel_outputs(calls.get(value.tuple_value))) > 1}
    targets = {}  # a var a kernel makes -> (its stack, the offset it goes at); a var stacked twice: the first
    mask = 0  # the rows so written on every trip (but the first, for a state the trip before made)
    for k, row in enumerate(rows):
        if row in kernels and row not in targets:
            targets[row] = (stacks[k], offsets[k])
            mask |= 1 << k
    if ahead:  # a state the trip started from: the previous trip made it (params: invoke, counter, state, ...)
        states = {param: j for j, param in enumerate(func.params[2:2 + n_state])}
        for k, row in enumerate(rows):
            made = results[states[row]] if row in states else None
            if made in kernels and made not in targets:
                targets[made] = (stacks[k], offsets[count + k])
                mask |= 1 << k
    # for each kernel call making rows: which of its outputs go where
    outputs_of = {}
    for var, target in targets.items():
        value = calls[var]
        if isinstance(value, relax.TupleGetItem):
            outputs_of.setdefault(value.tuple_value, {})[value.index] = target
        else:
            outputs_of[var] = {0: target}
    blocks, changed = [], False
    for block in func.body.blocks:
        bindings = []
        dataflow = isinstance(block, relax.DataflowBlock)
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding) and binding.var in outputs_of:
                bindings.extend(_into_stacks(binding, outputs_of[binding.var], dataflow, mod, kernels_made))
                changed = True
            else:
                bindings.append(binding)
        blocks.append(type(block)(bindings, block.span))
    if not changed:
        return None
    body = relax.SeqExpr(blocks, func.body.body, func.body.span)
    return (relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span),
            mask if count <= MAX_MASKED_ROWS else 0)


def _kernel_outputs(value) -> list:
    """The output types of a `call_tir` with no symbolic-shape arguments whose outputs
    all have static shapes: one tensor, or a tuple of two or more; [] for any other value."""
    if not (isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR) and len(value.args) == 2
            and isinstance(value.args[1], relax.Tuple)):
        return []
    outputs = list(value.ty_args)
    if len(outputs) == 1 and isinstance(outputs[0], relax.TupleType):
        outputs = list(outputs[0].fields) if len(outputs[0].fields) > 1 else []
    static = all(isinstance(out, relax.TensorType) and isinstance(out.shape, relax.ShapeExpr) for out in outputs)
    return outputs if static else []


def _row_view(name: str, out, stack: relax.Var, offset, dataflow: bool) -> list:
    """A view of `stack` at `offset` holding one `out`, re-based: (its bindings)."""
    var = relax.DataflowVar if dataflow else relax.Var
    view = var(f"{name}_row", out)
    rebased = var(f"{name}_in_stack", out)
    return [relax.VarBinding(view, relax.op.memory.view(stack, out.shape, out.dtype, relax.prim_value(offset))),
            relax.VarBinding(rebased, relax.op.memory.ensure_zero_offset(view))]


def _into_stacks(binding: relax.VarBinding, targets: dict, dataflow: bool, mod: tvm.IRModule,
                 kernels_made: dict) -> list:
    """`values = kernel(args)`, some of its outputs rows (`targets`: an output's index ->
    (its stack, its offset)), as: a view of each row's stack at its offset, re-based, and
    the kernel writing those views in place (`call_tir_inplace`). call_tir_inplace passes
    the outputs written in place as arguments and the others after all arguments, so a
    kernel making several has its output parameters put in that order: those written in
    place, then the others."""
    call = binding.value
    outs = _kernel_outputs(call)
    args = list(call.args[1].fields)
    in_place = sorted(targets)
    fresh = [k for k in range(len(outs)) if k not in targets]
    bindings = []
    for k in in_place:
        name = binding.var.name if len(outs) == 1 else f"{binding.var.name}_{k}"
        bindings += _row_view(name, outs[k], *targets[k], dataflow)
    rebased = [view.var for view in bindings[1::2]]
    order = in_place + fresh
    callee = call.args[0] if order == sorted(order) else _outputs_reordered(call.args[0], len(args), order, mod,
                                                                             kernels_made)
    indices = [len(args) + in_place.index(k) if k in targets else -1 for k in range(len(outs))]
    return [*bindings, relax.VarBinding(binding.var, relax.call_tir_inplace(
        callee, relax.Tuple([*args, *rebased]), indices, outs))]


def _outputs_reordered(global_var, n_inputs: int, order: list, mod: tvm.IRModule, kernels_made: dict):
    """A copy of a PrimFunc whose output parameters come in `order` (output indices)."""
    key = (global_var.name_hint, tuple(order))
    if key not in kernels_made:
        func = mod[global_var]
        params = list(func.params)
        outputs = params[n_inputs:]
        name = f"{global_var.name_hint}_rows_first{len(kernels_made) or ''}"
        reordered = tir.PrimFunc(params[:n_inputs] + [outputs[k] for k in order], func.body, func.ret_type,
                                 func.attrs)
        if "global_symbol" in (func.attrs or {}):
            reordered = reordered.with_attr("global_symbol", name)
        new_var = relax.GlobalVar(name)
        relax.expr._update_type(new_var, reordered.ty)  # noqa: SLF001 - a GlobalVar's type is set by its maker
        kernels_made[key] = (new_var, reordered)
    return kernels_made[key][0]
