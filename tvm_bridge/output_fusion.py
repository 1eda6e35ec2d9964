"""Kernels whose results leave their dataflow block, fused into the kernels that read them.

FuseOps never fuses a value the block hands out (a loop body's returned state or
stacked row): it marks it an external reference, and such a value ends a group. A
loop body returns most of what it computes (an LSTM's forward hands every gate, `c`,
`tanh(c)` and `h` to its reverse), so its elementwise work ran as one small kernel per
returned value: eight elementwise kernels a trip, each a VM call, an allocation and a
pass over its inputs.

`fuse_outputs_into_readers` runs after FuseOps: it merges a group whose result a later
group reads into that reader, as one group with several outputs (each value still
leaves the block, now as an output of the merged group), and repeats while any pair
merges. FuseTIR then makes one PrimFunc of each merged group, and the kernel schedules
(tvm_bridge/schedule.py `_merge_row_nests`) run its loop nests of one shape row by row
under one loop, in parallel when there is work enough. Merged alone, the LSTM gradient's
kernels ran no faster; with the rows merged, 0.8-1 ms of ~27 faster on 2 Zen 4 cores.

A pair merges when:
- both are groups of injective kernels (elementwise, broadcast, injective: TVM's
  op_pattern <= 2), or the reader is a reduction of such (a loss summed over a trip's
  values): never a contraction, whose schedule wants a kernel of its own;
- every tensor either touches has a static shape (FuseTIR failed on copies of reads of
  symbolic shapes passed as PrimValues: tvm_bridge/fusion.py `_static_tensors`);
- the merged group can sit where one of the two was: no binding between them reads
  the producer's results, or the reader's inputs are all made before the producer;
- it holds at most FuseOps' max_depth kernels (build time grows with a kernel's blocks).

CPU targets only: GPU kernels bind a bounded number of buffers and are scheduled by
dlight rules egad has not measured on kernels with several outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax, tirx

from .relax_exprs import is_static_tensor, leaves_in_order, substitute

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_INJECTIVE = 2  # TVM's OpPatternKind: elementwise 0, broadcast 1, injective 2, reduction 3, ...
_REDUCTION = 3
MAX_NAME = 120  # characters of a merged group's name (its kernels' names joined)


@dataclass
class _Group:
    """Kernels of a dataflow block that run as one: their bindings (internal variables
    fresh; the block's variables and constants they read free), for each block variable
    they define the internal variable holding its value, and the block variables they
    read. `original`: the block's binding, for a group not merged with another."""
    bindings: list
    defines: dict  # block var -> internal var
    reads: set
    pattern: int  # the highest op_pattern of its kernels
    kernels: int
    names: list
    original: relax.Binding | None = None


@tvm.transform.module_pass(opt_level=0, name="egad.FuseOutputsIntoReaders")
def fuse_outputs_into_readers(mod: tvm.IRModule, context) -> tvm.IRModule:
    """See the module's docstring. Runs between FuseOps and FuseTIR."""
    limit = int(context.config.get("relax.FuseOps.max_depth", 256))
    groups = {global_var: func for global_var, func in mod.functions_items()
              if isinstance(func, relax.Function) and (func.attrs or {}).get("Primitive")}
    made: dict = {}  # the merged groups' new functions
    taken = {global_var.name_hint for global_var in mod.get_global_vars()}
    rewritten = {}
    for global_var, func in mod.functions_items():
        if isinstance(func, relax.Function) and global_var not in groups and isinstance(func.body, relax.SeqExpr):
            body = _fuse_seq(mod, groups, func.body, limit, made, taken)
            if body is not func.body:
                rewritten[global_var] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs,
                                                       func.span)
    if not rewritten:
        return mod
    for global_var, func in [*made.items(), *rewritten.items()]:
        mod[global_var] = func
    called = {global_var.name_hint for _, func in mod.functions_items() if isinstance(func, relax.Function)
              for global_var in relax.analysis.all_global_vars(func)}
    for global_var in groups:  # merged into a new group, and called nowhere else
        if global_var.name_hint not in called:
            del mod[global_var]
    return relax.transform.Normalize()(mod)


def _fuse_seq(mod, groups, seq: relax.SeqExpr, limit: int, made: dict, taken: set) -> relax.SeqExpr:
    blocks, changed = [], False
    for block in seq.blocks:
        if isinstance(block, relax.DataflowBlock):
            bindings = _fuse_block(mod, groups, list(block.bindings), limit, made, taken)
            if bindings is not None:
                block, changed = relax.DataflowBlock(bindings, block.span), True
        blocks.append(block)
    return relax.SeqExpr(blocks, seq.body, seq.span) if changed else seq


def _fuse_block(mod, groups, bindings: list, limit: int, made: dict, taken: set) -> list | None:
    """The block's bindings with its mergeable groups merged, or None if none merge.
    Constants go first (they depend on nothing): one bound between a producer and its
    reader would otherwise keep the reader from moving up."""
    constants = [binding for binding in bindings if _binds_constant(binding)]
    items = constants + [_group_of(mod, groups, binding) or binding for binding in bindings
                         if not _binds_constant(binding)]
    merged_any = False
    while (pair := _next_pair(items, limit)) is not None:
        producer_at, reader_at, moves_down = pair
        merged = _merge(items[producer_at], items[reader_at])
        items[reader_at if moves_down else producer_at] = merged
        del items[producer_at if moves_down else reader_at]
        merged_any = True
    return _emit(items, made, taken) if merged_any else None


def _binds_constant(binding) -> bool:
    return isinstance(binding, relax.VarBinding) and isinstance(binding.value, tvm.ir.Constant)


def _group_of(mod, groups, binding) -> _Group | None:
    """`binding` as a _Group if it calls a kernel, or a group FuseOps made, that may
    merge: kernels of known op_pattern up to a reduction, static shapes, tensor or
    constant arguments; else None."""
    if not isinstance(binding, relax.VarBinding) or not isinstance(binding.value, relax.Call) \
            or not is_static_tensor(binding.var):
        return None
    call = binding.value
    if call.op.same_as(_CALL_TIR):
        inner = [(binding.var, call)]
        name = call.args[0].name_hint
        arguments = call.args[1].fields if isinstance(call.args[1], relax.Tuple) and len(call.args) == 2 else None
    elif isinstance(call.op, relax.GlobalVar) and call.op in groups:
        func = groups[call.op]
        if len(func.body.blocks) != 1 or not isinstance(func.body.body, relax.Var):
            return None
        inner = [(b.var, substitute(b.value, dict(zip(func.params, call.args))) if isinstance(b, relax.VarBinding)
                  else None) for b in func.body.blocks[0].bindings]
        name, arguments = call.op.name_hint.removeprefix("fused_"), call.args
    else:
        return None
    if arguments is None or not all(isinstance(arg, (relax.Var, tvm.ir.Constant)) and is_static_tensor(arg)
                                    for arg in arguments):
        return None
    patterns = [_pattern(mod, value) for _, value in inner]
    if None in patterns:
        return None
    fresh = {}  # each inner var a fresh dataflow var of this block's group
    bindings = []
    for var, value in inner:
        fresh[var] = relax.DataflowVar(var.name, var.ty)
        bindings.append(relax.VarBinding(fresh[var], substitute(value, fresh)))
    result = binding.var if call.op.same_as(_CALL_TIR) else groups[call.op].body.body
    reads = {leaf for _, value in inner for leaf in leaves_in_order(value) if isinstance(leaf, relax.Var)} - set(fresh)
    return _Group(bindings, {binding.var: fresh[result]}, reads, max(patterns), len(bindings), [name], binding)


def _pattern(mod, value) -> int | None:
    """The op_pattern of the PrimFunc a call_tir calls, if it is at most a reduction."""
    if not isinstance(value, relax.Call) or not value.op.same_as(_CALL_TIR) \
            or not isinstance(value.args[0], relax.GlobalVar):
        return None
    func = mod.functions.get(value.args[0])
    if not isinstance(func, tirx.PrimFunc) or "op_pattern" not in (func.attrs or {}):
        return None
    pattern = int(func.attrs["op_pattern"])
    return pattern if pattern <= _REDUCTION else None


def _next_pair(items: list, limit: int):
    """(producer's index, reader's index, whether the merged group goes where the reader
    is) for the first mergeable pair, or None."""
    defined_at = {var: index for index, item in enumerate(items) for var in _defines(item)}
    for reader_at, reader in enumerate(items):
        if not isinstance(reader, _Group):
            continue
        for var in reader.reads:
            producer_at = defined_at.get(var)
            producer = items[producer_at] if producer_at is not None else None
            if not isinstance(producer, _Group) or producer.pattern > _INJECTIVE \
                    or producer.kernels + reader.kernels > limit:
                continue
            between = items[producer_at + 1:reader_at]
            if not any(set(producer.defines) & _reads(item) for item in between):
                return producer_at, reader_at, True  # the producer moves down to the reader
            if not any(reader.reads & set(_defines(item)) for item in between):
                return producer_at, reader_at, False  # the reader moves up to the producer
    return None


def _defines(item) -> list:
    return list(item.defines) if isinstance(item, _Group) else [item.var]


def _reads(item) -> set:
    return item.reads if isinstance(item, _Group) else set(relax.analysis.free_vars(item.value))


def _merge(producer: _Group, reader: _Group) -> _Group:
    """One group: the producer's bindings, then the reader's reading the producer's
    internal variables where it read the block's."""
    bindings = producer.bindings + [relax.VarBinding(binding.var, substitute(binding.value, producer.defines))
                                    for binding in reader.bindings]
    return _Group(bindings, {**producer.defines, **reader.defines},
                  producer.reads | (reader.reads - set(producer.defines)), max(producer.pattern, reader.pattern),
                  producer.kernels + reader.kernels, producer.names + reader.names)


def _emit(items: list, made: dict, taken: set) -> list:
    """The block's bindings: each merged group as a call of a new Relax function
    (Primitive, as FuseOps makes them) returning the values read outside it, then
    each value taken out of the tuple."""
    read = set().union(*(_reads(item) for item in items))
    bindings = []
    for item in items:
        if not isinstance(item, _Group):
            bindings.append(item)
            continue
        if item.original is not None:
            bindings.append(item.original)
            continue
        # a non-dataflow var leaves the block (a returned value): it stays an output
        results = [var for var in item.defines if var in read or not isinstance(var, relax.DataflowVar)]
        arguments, func = _function(item, [item.defines[var] for var in results])
        global_var = relax.GlobalVar(_unique_name("fused_" + "_".join(item.names), taken))
        relax.expr._update_type(global_var, relax.FuncType([param.ty for param in func.params],  # noqa: SLF001
                                                           func.ret_ty))  # (a GlobalVar's type is set by its maker)
        made[global_var] = func
        call = relax.Call(global_var, arguments)
        if len(results) == 1:
            bindings.append(relax.VarBinding(results[0], call))
            continue
        values = relax.DataflowVar(results[0].name + "_and_others", func.ret_ty)
        bindings.append(relax.VarBinding(values, call))
        bindings += [relax.VarBinding(var, relax.TupleGetItem(values, k)) for k, var in enumerate(results)]
    return bindings


def _function(group: _Group, outputs: list) -> tuple[list, relax.Function]:
    """(the block variables and constants to call it with, a Primitive function
    computing `group`'s bindings and returning `outputs`). Constants are parameters, as
    FuseOps makes them: TVM fails on a tensor constant inside a Primitive function."""
    internal = {binding.var for binding in group.bindings}
    arguments = list(dict.fromkeys(leaf for binding in group.bindings for leaf in leaves_in_order(binding.value)
                                   if leaf not in internal))
    params = [relax.Var(getattr(value, "name", "constant"), value.ty) for value in arguments]
    bindings = [relax.VarBinding(binding.var, substitute(binding.value, dict(zip(arguments, params))))
                for binding in group.bindings]
    if len(outputs) == 1:  # the function's value: its binding's var made a non-dataflow one
        result = relax.Var(outputs[0].name, outputs[0].ty)
        bindings = [relax.VarBinding(result if binding.var.same_as(outputs[0]) else binding.var,
                                     substitute(binding.value, {outputs[0]: result})) for binding in bindings]
    else:
        result = relax.Var("outputs", relax.TupleType([var.ty for var in outputs]))
        bindings.append(relax.VarBinding(result, relax.Tuple(outputs)))
    func = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(bindings)], result), result.ty, True)
    return arguments, func.with_attr("Primitive", True)


def _unique_name(name: str, taken: set) -> str:
    """`name`, cut at MAX_NAME characters, with a number after it if taken."""
    name = name[:MAX_NAME]
    unique, k = name, 1
    while unique in taken:
        unique, k = f"{name}{k}", k + 1
    taken.add(unique)
    return unique
