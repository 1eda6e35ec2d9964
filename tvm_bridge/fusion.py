"""Relax fusion for egad's lowered modules: TVM's FuseOps/FuseTIR, plus the passes
that make them safe on what tvm_bridge/lower.py emits. tvm_bridge/schedule.py puts
them in its pipeline, before the PrimFuncs they produce are scheduled.

lower.py emits plain binding blocks (FuseOps fuses only inside dataflow blocks),
loop bodies as private functions handed to the loop driver (fusion rewrites private
signatures), and shapes computed at run time and bound by match_cast (FuseOps can
move a use of such a dimension above its definition). Each pass below says which.
"""
from __future__ import annotations

import tvm
from tvm import relax, te, tirx, topi
from tvm.relax.backend.utils import BackendDispatcher
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from . import output_fusion
from .relax_exprs import is_static_tensor, substitute
from .tir_blocks import is_pure_read


def fusion_passes(target, backend=cpu_generic) -> list:
    """The passes from egad's lowered module to fused PrimFuncs called by Relax:
    dataflow blocks, transpose-into-matmul fusion, the backend's dispatch and
    legalization (without FoldConstant, and without scheduling: the caller schedules),
    FuseOps, FuseTIR, and the fix-ups. `backend`: a module of TVM's Relax backends
    (cpu_generic, cuda, gpu_generic...)."""
    return ([keep_function_signatures, relax.transform.ConvertToDataflow(min_size=1), fuse_transpose_matmul]
            + backend.library_dispatch_passes(target)
            + legalize_and_fuse(target, backend)
            + [order_after_shape_definitions])


def legalize_and_fuse(target, backend=cpu_generic) -> list:
    """The backend's legalization passes without FoldConstant, which compiles and runs
    a TIR function for every constant expression (19 of the 27 s that 20 corpus
    gradients took to build) to save scalar arithmetic the compiled code does in
    nanoseconds (DESIGN §7 also warns that folding a taped constant corrupts it), and
    without a GPU backend's dlight scheduling, which egad applies itself
    (tvm_bridge/gpu.py)."""
    passes, limit = [], target.attrs.get("max_function_args")
    tvm_scatters_on_cpu = not BackendDispatcher.is_gpu_target(target)  # TVM's own test for topi's CPU scatter
    for pass_ in backend.legalize_passes(target):
        if pass_.info.name == "LegalizeOps" and tvm_scatters_on_cpu:
            pass_ = relax.transform.LegalizeOps(customize_legalize_map={"relax.scatter_elements": _cpu_scatter})
        if pass_.info.name not in ("FoldConstant", "ApplyDefaultSchedule"):
            passes.append(pass_)
        if pass_.info.name == "AnnotateTIROpPattern":
            # unread bindings (a traced program is not pruned; FuseTransposeMatmul leaves
            # transposes behind) go first: FuseOps warns of each fused group nothing reads
            passes += [relax.transform.DeadCodeElimination(), read_where_used]
        if pass_.info.name == "FuseOps" and limit is not None:
            passes.append(limit_kernel_buffers(int(limit)))
        if pass_.info.name == "FuseOps" and target.kind.name == "llvm":
            passes.append(output_fusion.fuse_outputs_into_readers)
    return passes


def _cpu_scatter(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """relax.scatter_elements on a CPU: TVM's own (topi.scatter_elements) without the
    `pragma_scope "seq"` attribute its statements are wrapped in, which no CPU code
    generator knows: LLVM's warned "Unknown pragma pragma_scope" at every build of a
    program with a scatter (an embedding's or a gather's gradient), in the demo's output
    too. The statements inside run in order with or without it."""
    def scatter(data, indices, updates, axis, reduction):
        op = topi.scatter_elements(data, indices, updates, axis, reduction).op
        body = op.body
        if isinstance(body, tirx.AttrStmt) and body.attr_key == "pragma_scope":
            body = body.body
        return te.ExternOp(op.name, op.tag, op.attrs, op.inputs, op.input_placeholders, op.output_placeholders,
                           body).output(0)

    return bb.call_te(scatter, *call.args, call.attrs.axis, call.attrs.reduction, primfunc_name_hint="scatter_elements")


def limit_kernel_buffers(limit: int):
    """A pass after FuseOps for devices that bind at most `limit` arguments to a kernel
    (Metal: 31 buffers; TVM's target sets max_function_args, which Relax's FuseOps
    does not read): a fused group with more is split back into its ops and fused again
    to half the depth, until every group fits. An op that alone has more (a
    concatenation of many operands) is split where it is lowered (tvm_bridge/shape.py)."""
    @tvm.transform.module_pass(opt_level=0, name="egad.LimitKernelBuffers")
    def limit_kernel_buffers_pass(mod: tvm.IRModule, context) -> tvm.IRModule:
        depth = int(context.config.get("relax.FuseOps.max_depth", 256))
        while True:
            wide = {global_var: func for global_var, func in mod.functions_items()
                    if isinstance(func, relax.Function) and (func.attrs or {}).get("Primitive")
                    and _kernel_buffers(func) > limit}
            if not wide:
                return mod
            for global_var, func in list(mod.functions_items()):
                if isinstance(func, relax.Function) and global_var not in wide:
                    mod[global_var] = func.inline_functions(wide)
            for global_var in wide:
                del mod[global_var]
            if depth <= 1:
                return mod
            depth //= 2
            with tvm.transform.PassContext(opt_level=3, config={**context.config, "relax.FuseOps.max_depth": depth}):
                mod = relax.transform.FuseOps()(mod)

    return limit_kernel_buffers_pass


def _kernel_buffers(func: relax.Function) -> int:
    """The buffers a fused group's kernel binds: its tensors in and out, and one for its
    scalar arguments (symbolic sizes)."""
    return sum(_tensors_in(param.ty) for param in func.params) + _tensors_in(func.ret_ty) + 1


def _tensors_in(ty) -> int:
    if isinstance(ty, relax.TupleType):
        return sum(_tensors_in(field) for field in ty.fields)
    return 1 if isinstance(ty, relax.TensorType) else 0


@tvm.transform.module_pass(opt_level=0, name="egad.FuseTransposeMatmul")
def fuse_transpose_matmul(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """x @ W^T as one contraction reading W in place (the matmul schedule packs W's
    panels anyway) instead of a transpose of W first, for the products that
    tvm_bridge/linalg.py leaves to `R.matmul` (a vector times W^T). linalg.py gives
    each such product a transpose of its own: TVM's pass fails on a transpose that
    other ops read too. Should it fail otherwise, the module is left as it was."""
    try:
        return relax.transform.FuseTransposeMatmul()(mod)
    except Exception:  # noqa: BLE001 - its failure surfaces as whatever Python raised inside it
        return mod


@tvm.transform.module_pass(opt_level=0, name="egad.KeepFunctionSignatures")
def keep_function_signatures(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """Make every Relax function public. Loop bodies are private functions the loop
    driver calls with a fixed argument list; fusion drops the parameters a private
    function does not use (a body's `invoke` when it has no inner loop)."""
    exposed = {global_var: func.with_attr("global_symbol", global_var.name_hint)
               for global_var, func in mod.functions_items()
               if isinstance(func, relax.Function) and "global_symbol" not in (func.attrs or {})}
    for global_var, func in exposed.items():
        mod[global_var] = func
    return mod


@tvm.transform.module_pass(opt_level=0, name="egad.OrderAfterShapeDefinitions")
def order_after_shape_definitions(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """Reorder each dataflow block so that a binding comes after the match_cast
    defining the symbolic dimensions it uses. FuseOps orders bindings by data
    dependence only and can move a binding whose shape uses a dimension (an output
    `(d1,)`) above the match_cast defining `d1`; VMShapeLower then fails with
    "d1 has not been computed". Dataflow bindings are pure, so any order that
    respects both kinds of dependence computes the same values."""
    reordered = {global_var: _reorder_function(func) for global_var, func in mod.functions_items()
                 if isinstance(func, relax.Function)}
    for global_var, func in reordered.items():
        mod[global_var] = func
    return mod


def _reorder_function(func: relax.Function) -> relax.Function:
    known = {dim for param in func.params for dim in relax.analysis.definable_tir_vars_in_type(param.ty)}
    return relax.Function(func.params, _reorder_seq(func.body, known), func.ret_ty, func.is_pure, func.attrs,
                          func.span)


def _reorder_seq(expr, known: set):
    """`known`: the symbolic dimensions defined before `expr` (by the function's
    parameters or earlier blocks)."""
    if not isinstance(expr, relax.SeqExpr):
        return expr
    known = set(known)
    blocks = []
    for block in expr.blocks:
        bindings = [_reorder_branches(binding, known) for binding in block.bindings]
        if isinstance(block, relax.DataflowBlock):
            blocks.append(relax.DataflowBlock(_dependence_order(bindings, known), block.span))
        else:
            blocks.append(relax.BindingBlock(bindings, block.span))
        known |= {dim for binding in bindings if isinstance(binding, relax.MatchCast)
                  for dim in relax.analysis.definable_tir_vars_in_type(binding.ty)}
    return relax.SeqExpr(blocks, expr.body, expr.span)


def _reorder_branches(binding, known: set):
    value = binding.value
    if isinstance(binding, relax.VarBinding) and isinstance(value, relax.If):
        branches = (_reorder_seq(value.true_branch, known), _reorder_seq(value.false_branch, known))
        return relax.VarBinding(binding.var, relax.If(value.cond, *branches, value.span), binding.span)
    return binding


def _dependence_order(bindings: list, known: set = frozenset()) -> list:
    """`bindings` stably sorted so each comes after the bindings defining the Relax
    variables and symbolic dimensions it uses (variables hash by identity). A
    match_cast of a dimension in `known` (defined before the block, e.g. by a
    parameter's shape) only checks it: it defines nothing, and what reads the
    dimension need not wait for it."""
    defined_at = {}
    for index, binding in enumerate(bindings):
        defined_at[binding.var] = index
        if isinstance(binding, relax.MatchCast):
            for dimension in relax.analysis.definable_tir_vars_in_type(binding.ty):
                if dimension not in known:
                    defined_at.setdefault(dimension, index)
    needs = []
    for index, binding in enumerate(bindings):
        used = (list(relax.analysis.free_vars(binding.value)) + list(relax.analysis.free_symbolic_vars(binding.value))
                + list(relax.analysis.tir_vars_in_type(binding.var.ty)))
        needs.append({defined_at[var] for var in used if var in defined_at and defined_at[var] != index})
    placed, order = set(), []
    while len(order) < len(bindings):
        index = next((i for i in range(len(bindings)) if i not in placed and needs[i] <= placed), None)
        if index is None:  # a fused group both defines and uses a dimension: nothing to gain by moving
            return bindings
        placed.add(index)
        order.append(index)
    return [bindings[index] for index in order]


@tvm.transform.module_pass(opt_level=0, name="egad.ReadWhereUsed")
def read_where_used(mod: tvm.IRModule, _context) -> tvm.IRModule:
    """Fuse pure reads (a row taken from a tensor, a slice, a transpose: kernels that
    only move values) into the elementwise kernels that use them, each consumer with a
    copy of the read of its own. FuseOps fuses a producer into one consumer only, and
    never a `take` (AnnotateTIROpPattern calls a load at a computed index opaque): a
    loop body's `take(tape, i)` read by three products ran as a kernel of its own that
    copied the row (2-9 us a trip on a 2-core CPU), then each product read the copy.
    A fused copy reads the tensor in place and copies nothing. Runs after
    AnnotateTIROpPattern, whose op_pattern attributes FuseOps reads.

    Only reads of static shapes are copied, and only takes from the function's own
    parameters (a loop body's tapes and invariants) are fused: FuseTIR fails
    ("VarRemapGet(source) == nullptr") on fused groups that also take symbolic sizes
    as PrimValues, as the shape arithmetic of a symbolic slice's gradient does."""
    reads = _Reads(mod)
    rewritten = {}
    for global_var, func in mod.functions_items():
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
            body = _read_where_used(reads, set(func.params), func.body)
            if body is not func.body:
                rewritten[global_var] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs,
                                                       func.span)
    if not rewritten:
        return mod
    for global_var, func in [*reads.twins.items(), *rewritten.items()]:
        mod[global_var] = func
    return relax.transform.Normalize()(mod)  # the new calls' types


_INJECTIVE = 2  # TVM's OpPatternKind: elementwise 0, broadcast 1, injective 2, ..., opaque 8


class _Reads:
    """The module's pure-read kernels, and an injective twin of each opaque one (a
    take), made when first asked for."""

    def __init__(self, mod: tvm.IRModule):
        self.mod = mod
        self.pure = {global_var for global_var, func in mod.functions_items() if is_pure_read(func)}
        self.twin_of: dict = {}  # an opaque read -> its twin
        self.twins: dict = {}  # a twin -> its PrimFunc

    def is_read(self, global_var) -> bool:
        return global_var in self.pure or global_var in self.twins

    def op_pattern(self, global_var) -> int:
        func = self.twins.get(global_var) or (self.mod.functions.get(global_var) if global_var is not None else None)
        return int((func.attrs or {}).get("op_pattern", 1 << 30)) if isinstance(func, tirx.PrimFunc) else 1 << 30

    def twin(self, global_var) -> relax.GlobalVar:
        if global_var not in self.twin_of:
            twin = relax.GlobalVar(f"{global_var.name_hint}_in_place")
            relax.expr._update_type(twin, global_var.ty)  # noqa: SLF001 - a GlobalVar's type is set by its maker
            self.twin_of[global_var] = twin
            self.twins[twin] = self.mod[global_var].with_attr("op_pattern", _INJECTIVE)
        return self.twin_of[global_var]


def _read_where_used(reads: _Reads, params: set, seq: relax.SeqExpr) -> relax.SeqExpr:
    blocks, changed = [], False
    for block in seq.blocks:
        if isinstance(block, relax.DataflowBlock):
            bindings = _copy_reads(reads, [_fusable(reads, params, binding) for binding in block.bindings])
            changed |= any(new is not old for new, old in zip(bindings, block.bindings)) \
                or len(bindings) != len(block.bindings)
            block = relax.DataflowBlock(bindings, block.span)
        blocks.append(block)
    return relax.SeqExpr(blocks, seq.body, seq.span) if changed else seq


def _fusable(reads: _Reads, params: set, binding):
    """`binding` calling the injective twin of its read when it takes from the
    function's parameters, else as it is."""
    callee = _callee(binding)
    if (callee not in reads.pure or reads.op_pattern(callee) <= _INJECTIVE or not _static_tensors(binding)
            or not all(arg in params or isinstance(arg, tvm.ir.Constant) for arg in binding.value.args[1].fields)):
        return binding
    call = binding.value
    return relax.VarBinding(binding.var, relax.Call(call.op, [reads.twin(callee), *call.args[1:]], call.attrs,
                                                    call.ty_args, call.span), binding.span)


def _copy_reads(reads: _Reads, bindings: list) -> list:
    """`bindings` with a copy of each injective pure read before each injective binding
    using it (but one, which keeps the read, when nothing else uses it)."""
    users: dict = {}
    for index, binding in enumerate(bindings):
        for var in relax.analysis.free_vars(binding.value):
            users.setdefault(var, []).append(index)
    copies: dict[int, list] = {}  # user's index -> [(read's var, the copy's binding)]
    for binding in bindings:
        callee = _callee(binding)
        if not reads.is_read(callee) or reads.op_pattern(callee) > _INJECTIVE or not _static_tensors(binding):
            continue
        using = users.get(binding.var, [])
        fusable = [index for index in using if reads.op_pattern(_callee(bindings[index])) <= _INJECTIVE]
        kept = len(using) > len(fusable) or not isinstance(binding.var, relax.DataflowVar)  # an output stays
        for index in fusable[0 if kept else 1:]:
            copy = relax.DataflowVar(binding.var.name, binding.var.ty)
            read = substitute(binding.value, {})  # a call of its own
            copies.setdefault(index, []).append((binding.var, relax.VarBinding(copy, read)))
    if not copies:
        return bindings
    result = []
    for index, binding in enumerate(bindings):
        replace = {}
        for read, copy in copies.get(index, []):
            result.append(copy)
            replace[read] = copy.var
        result.append(relax.VarBinding(binding.var, substitute(binding.value, replace), binding.span)
                      if replace else binding)
    return result


def _callee(binding) -> relax.GlobalVar | None:
    """The function a `call_tir` binding calls."""
    call = binding.value if isinstance(binding, relax.VarBinding) else None
    if isinstance(call, relax.Call) and call.op == tvm.ir.Op.get("relax.call_tir"):
        return call.args[0]
    return None


def _static_tensors(binding) -> bool:
    """Whether a call_tir binding reads and writes tensors of static shapes only. FuseTIR
    fails ("VarRemapGet(source) == nullptr") on two copies of a read of a tensor of
    symbolic shape, its size passed as a PrimValue, in one fused group."""
    values = [binding.var, *binding.value.args[1].fields, *binding.value.args[2:]]
    return all(isinstance(value, relax.Expr) and is_static_tensor(value) for value in values)
