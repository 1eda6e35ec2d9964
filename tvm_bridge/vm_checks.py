"""The VM's parameter checks, kept where a caller can pass anything and dropped where
only egad's own code calls.

Relax's VMShapeLower makes every function check its tensor parameters on entry: a
`vm.builtin.check_tensor_info` (rank and dtype) and a `vm.builtin.match_shape` (the
dims) each, ~0.1-0.2 us apiece. `main` is what outside code calls, and keeps them.
The other functions are the ones tvm_bridge/lower.py makes for regions (loop bodies,
loop conditions, branches): only the loop drivers (tvm_bridge/runtime.py) and Relax's
If call them, with the values the function's own program made (a body's state is
what the body returned, typed by the lowering and checked by Relax at build time), so
their checks never fire, and a loop body pays them on every trip (an LSTM's T=64
gradient: ~2,500 checks a call). Dropped there: check_tensor_info of a parameter,
check_shape_info of a shape parameter (the row offsets of a body writing its rows in
place, tvm_bridge/rows_in_place.py), and match_shape of a parameter that only
compares dims with constants. A match_shape that stores a symbolic dim (the function
reads it later: the row offsets are all symbolic) stays, as does every check of a
value the function did not receive (a driver's results, bound by match_cast).
"""
from __future__ import annotations

import tvm
from tvm import relax

_CHECK_TENSOR_INFO = "vm.builtin.check_tensor_info"
_CHECK_SHAPE_INFO = "vm.builtin.check_shape_info"  # a shape parameter's rank (a body's row offsets)
_MATCH_SHAPE = "vm.builtin.match_shape"
_ASSERT_EQUAL_TO_IMM = 0  # TVM's MatchShapeCode: compare a dim with the constant after it


@tvm.transform.module_pass(opt_level=0, name="egad.DropRegionParameterChecks")
def drop_region_parameter_checks(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """Run after VMShapeLower: the parameter checks of every Relax function but `main`
    removed (the module docstring says which, and why)."""
    for global_var, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function) or global_var.name_hint == "main" \
                or not isinstance(func.body, relax.SeqExpr):
            continue
        params = set(func.params)
        blocks = [relax.BindingBlock([b for b in block.bindings if not _checks_a_parameter(b.value, params)],
                                     block.span) for block in func.body.blocks]
        if sum(len(b.bindings) for b in blocks) != sum(len(b.bindings) for b in func.body.blocks):
            body = relax.SeqExpr(blocks, func.body.body, func.body.span)
            mod[global_var] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    return mod


def _checks_a_parameter(value, params: set) -> bool:
    if not (isinstance(value, relax.Call) and isinstance(value.op, relax.ExternFunc)
            and value.args and value.args[0] in params):
        return False
    name = str(value.op.global_symbol)
    if name in (_CHECK_TENSOR_INFO, _CHECK_SHAPE_INFO):
        return True
    if name != _MATCH_SHAPE:
        return False
    # match_shape(value, shape_heap, ndim, code_0, value_0, ..., error_context)
    ndim = int(value.args[2].value)
    return all(int(value.args[3 + 2 * k].value) == _ASSERT_EQUAL_TO_IMM for k in range(ndim))
