"""Reshapes a function returns, made views instead of copies.

Relax's RewriteDataflowReshape turns a reshape kernel (a `call_tir` of a PrimFunc that
only reshapes) into `R.reshape`, which the VM runs as a view of the same memory, but
only where its result stays inside the dataflow block: a result the function returns
keeps its copy. egad's loop bodies return such reshapes: the packed matmul of a reverse
loop's step (tvm_bridge/pack_weights.py) writes its product tile by tile, in a layout
whose row-major order is already the result's, and the body returns the product as the
next trip's state (an LSTM's dh: a 32 x 256 copy, a kernel call and an allocation on
every trip).

`reshape_outputs_as_views` binds each such reshape to a fresh dataflow variable first
and the returned variable to that one, so RewriteDataflowReshape makes it a view. Only
where the reshaped tensor is made in the same block and read by nothing else: the view
is then the only holder of its memory, so no argument and no other result shares it.
Run before the backend's dataflow lowering (which starts with RewriteDataflowReshape).
"""
from __future__ import annotations

import tvm
from tvm import relax

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@tvm.transform.module_pass(opt_level=0, name="egad.ReshapeOutputsAsViews")
def reshape_outputs_as_views(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """Each Relax function with its returned reshapes made views (module docstring)."""
    rewritten = {}
    for global_var, func in mod.functions_items():
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
            blocks = [_split_returned_reshapes(mod, block) for block in func.body.blocks]
            if any(new is not old for new, old in zip(blocks, func.body.blocks)):
                body = relax.SeqExpr(blocks, func.body.body, func.body.span)
                rewritten[global_var] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs,
                                                       func.span)
    for global_var, func in rewritten.items():
        mod[global_var] = func
    return mod


def _split_returned_reshapes(mod: tvm.IRModule, block):
    """`block` with `out = reshape(x)` as `view = reshape(x); out = view` where `out`
    leaves the block and `x` is a block-local tensor nothing else reads; `block`
    itself when there is none."""
    if not isinstance(block, relax.DataflowBlock):
        return block
    readers = {}
    for binding in block.bindings:
        for var in relax.analysis.free_vars(binding.value):
            readers[var] = readers.get(var, 0) + 1
    bindings, split = [], False
    for binding in block.bindings:
        if _is_returned_reshape(mod, binding) and readers.get(binding.value.args[1].fields[0]) == 1:
            view = relax.DataflowVar(f"{binding.var.name}_view", binding.var.ty)
            bindings += [relax.VarBinding(view, binding.value), relax.VarBinding(binding.var, view)]
            split = True
        else:
            bindings.append(binding)
    return relax.DataflowBlock(bindings, block.span) if split else block


def _is_returned_reshape(mod: tvm.IRModule, binding) -> bool:
    """Whether `binding` gives a variable leaving its block the result of a reshape
    kernel of one block-local tensor."""
    value = binding.value
    if (isinstance(binding.var, relax.DataflowVar) or not isinstance(value, relax.Call)
            or not value.op.same_as(_CALL_TIR)
            or not isinstance(value.args[1], relax.Tuple) or len(value.args[1].fields) != 1
            or not isinstance(value.args[1].fields[0], relax.DataflowVar)):
        return False
    callee = mod[value.args[0]]
    return isinstance(callee, tvm.tirx.PrimFunc) and relax.analysis.has_reshape_pattern(callee)
