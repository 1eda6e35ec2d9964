"""egad Program -> Relax IRModule (DESIGN §7).

Every region becomes a Relax function: `main` for the program, a private function
per loop body, loop condition and branch. Each function takes the VM's
`invoke_closure` as its first argument and passes it on, so loops can call their
bodies through the driver (tvm_bridge/runtime.py). Branches are Relax `If`s over
calls of the branch functions. Straight-line ops go through the per-family
lowerings registered in tvm_bridge/registry.py.
"""
from __future__ import annotations

import json
import threading

from tvm import relax
from tvm import tirx as tir

from egad.errors import UnsupportedError, message
from egad.ir import ops, shapes
from egad.ir.index_ranges import IndexPlan, hoisted_checks, index_plan, index_sites, integer_ranges
from egad.ir.program import Binding, Program, Region
from egad.ir.types import TapeType, TensorType

from . import creation, elementwise, index, linalg, nn, reduction, shape  # noqa: F401 (register lowerings)
from . import index_checks, prefetch, rows_in_place
from .creation import filled
from .host_checks import host_check_sites
from .reduction import empty_reduction
from .registry import LOWERINGS, FunctionScope, tensor_type

_HANDLE = relax.TensorType((), "int64")  # a tape, as a handle


def relax_type(t, symbols: dict[str, tir.Var]):
    return _HANDLE if isinstance(t, TapeType) else tensor_type(t, symbols)


def _loose(t):
    """A Relax type with the rank and dtype only (for loop outputs whose shapes Relax
    cannot see through the driver)."""
    return _HANDLE if isinstance(t, TapeType) else relax.TensorType(ndim=t.ndim, dtype=t.dtype)


def _computes_nothing(binding: Binding) -> bool:
    """Every output has a static size-0 axis and the op checks nothing (an index in
    range, a reduction not empty): it is an empty constant. TVM rejects some of these
    ops (a 0 in a reshape's shape means "keep that dim"; an empty strided_slice's
    bounds are "invalid")."""
    return (all(isinstance(var.type, TensorType) and all(isinstance(d, int) for d in var.type.shape)
                and 0 in var.type.shape for var in binding.outputs)
            and not _checks_at_run_time(binding))


def _checks_at_run_time(binding: Binding) -> bool:
    if id(binding) in FunctionScope.host_check_sites:
        return True
    return (id(binding) in FunctionScope.sites and id(binding) not in FunctionScope.hoisted_sites
            and index_plan(binding, FunctionScope.ranges) is IndexPlan.CHECK)


class Lowering:
    def __init__(self):
        self.bb = relax.BlockBuilder()
        self.functions: dict[int, relax.GlobalVar] = {}
        self.writing_rows_in_place: set[int] = set()  # the `for` bodies (region ids) that take stacks
        self.counter = 0

    def module(self, program: Program):
        self.function(program.region, "main")
        return self.bb.get()

    def function(self, region: Region, name: str | None = None, counter_step: int = 0,
                 rows_from: int | None = None) -> relax.GlobalVar:
        """A Relax function for `region`. A `for` body (counter_step ±1) also returns
        its next counter, so the driver never builds a tensor per iteration. A body
        whose stacked rows (its results from `rows_from` on) can be written in place
        (`rows_in_place.can_write_in_place`) also takes the stacks and the trip's row
        offsets, for tvm_bridge/rows_in_place.py to point its kernels at."""
        for binding in region.bindings:  # sub-regions first: Relax builds one function at a time
            step = (-1 if binding.attrs.get("reverse") else 1) if binding.op == "for" else 0
            body_rows_from = binding.attrs["n_state"] if binding.op == "for" else None  # results: state, then rows
            for sub in binding.regions:
                self.functions[id(sub)] = self.function(sub, counter_step=step, rows_from=body_rows_from)
        if name is None:
            self.counter += 1
            name = f"{region.name}_{self.counter}"
        symbols: dict[str, tir.Var] = {}
        self.symbols = FunctionScope.symbols = symbols
        FunctionScope.indices = {}
        invoke = relax.Var("invoke", relax.ObjectType())
        params = [relax.Var(p.hint.replace(".", "_") or f"p{k}", relax_type(p.type, symbols))
                  for k, p in enumerate(region.params)]
        rows = [v.type for v in region.results[rows_from:]] if rows_from is not None else []
        ahead = counter_step == 1
        in_place = rows_in_place.stack_params(rows, ahead) if rows_in_place.can_write_in_place(rows) else []
        attrs = {prefetch.COUNTER_STEP_ATTR: counter_step} if counter_step else {}  # for prefetch_next_trip
        if in_place:
            attrs |= {rows_in_place.ATTR: rows_from, rows_in_place.AHEAD_ATTR: int(ahead)}
            self.writing_rows_in_place.add(id(region))
        with self.bb.function(name, [invoke, *params, *in_place], attrs=attrs or None, pure=False,
                              private=name != "main"):
            env = {p.uid: v for p, v in zip(region.params, params)}
            pops, bindings, pushes = _tape_ops_at_the_ends(region)
            if pops:
                self._pop_all(pops, env)
            for binding in bindings:
                self.binding(binding, env, invoke)
            if pushes:
                self._push_all(pushes, env)
            results = [env[v.uid] for v in region.results]
            if counter_step:
                results.append(self.bb.emit(relax.op.add(params[0], relax.const(counter_step, "int64"))))
            # the builder may reuse an identical function already built: use the var it returns
            return self.bb.emit_func_output(relax.Tuple(results))

    def binding(self, binding: Binding, env: dict, invoke):
        if binding.op in ops.CONTROL_OPS and not binding.outputs:
            # a branch or loop that carries nothing out computes nothing anyone reads (the IR
            # has no effects); as a Relax If of empty tuples, the VM read a garbage register
            return
        args = [env[v.uid] for v in binding.inputs]
        if binding.op in ops.CONTROL_OPS:
            outputs = getattr(self, f"_{binding.op}")(binding, args, invoke)
        elif binding.op in ops.TAPE_OPS:
            outputs = self._tape(binding, args)
        else:
            lowering = LOWERINGS.get(binding.op)
            if lowering is None:
                raise UnsupportedError(message(f"{binding.op} has no Relax lowering yet",
                                               where=f"op {binding.op!r} at {binding.loc.long()}",
                                               instead="run the program with egad.interpret"))
            if _computes_nothing(binding):
                outputs = tuple(filled(var.type.shape, 0, var.type.dtype) for var in binding.outputs)
            else:
                empty = empty_reduction(args, binding) if len(binding.outputs) == 1 else None
                result = empty if empty is not None else lowering(self.bb, args, binding.attrs, binding)
                outputs = result if isinstance(result, tuple) else (result,)
        for var, value in zip(binding.outputs, outputs):
            env[var.uid] = self.bb.emit(value)

    def _unpack(self, call, count: int):
        result = self.bb.emit(call)
        return tuple(relax.TupleGetItem(result, k) for k in range(count))

    def _unpack_typed(self, call, outputs, static_known: bool = False):
        """A call's results, cast to their full types (with symbolic dims, bound at run
        time) so that the ops reading them can be lowered: a driver call's, which Relax
        knows by rank only, or (`static_known`) an If's, whose static types Relax infers
        but whose symbolic dims a branch function's return type keeps only where its
        parameters bind them (a slice's `T-1` becomes unknown)."""
        typed = []
        for item, var in zip(self._unpack(call, len(outputs)), outputs):
            symbolic = isinstance(var.type, TensorType) and not var.type.is_static
            typed.append(self.bb.match_cast(self.bb.emit(item), relax_type(var.type, self.symbols))
                         if symbolic or not static_known else item)
        return tuple(typed)

    def _call(self, region: Region, invoke, args):
        return relax.Call(self.functions[id(region)], [invoke, *args])

    def _if(self, binding: Binding, args, invoke):
        then, otherwise = binding.regions
        choice = relax.If(args[0], self._call(then, invoke, args[1:]), self._call(otherwise, invoke, args[1:]))
        return self._unpack_typed(choice, binding.outputs, static_known=True)

    def _switch(self, binding: Binding, args, invoke):
        last = len(binding.regions) - 1
        selector = self.bb.emit(relax.op.clip(relax.op.astype(args[0], "int64"), 0, last))
        choice = self._call(binding.regions[last], invoke, args[1:])
        for k in range(last - 1, -1, -1):
            test = self.bb.emit(relax.op.equal(selector, relax.const(k, "int64")))
            choice = relax.If(test, self._call(binding.regions[k], invoke, args[1:]), choice)
        return self._unpack_typed(choice, binding.outputs, static_known=True)

    def _for(self, binding: Binding, args, invoke):
        for check in FunctionScope.hoisted.get(id(binding), ()):  # once for all trips (index_ranges.py)
            table = args[[v.uid for v in binding.inputs].index(check.table.uid)]
            index_checks.checked_on_host(self.bb, table, check.size, FunctionScope.sites[id(check.site)])
        n_state = binding.attrs["n_state"]
        (body,) = binding.regions
        layout = json.dumps(_row_layout(binding))
        call = relax.Call(relax.ExternFunc("egad.for_loop"),
                          [invoke, self.functions[id(body)], args[0], args[1],
                           relax.prim_value(int(bool(binding.attrs.get("reverse")))), relax.prim_value(n_state),
                           relax.expr.String(layout),
                           # at rows_in_place.DRIVER_ROWS_ARGUMENT: the pass there adds which rows
                           relax.prim_value(int(id(body) in self.writing_rows_in_place)), *args[2:]],
                          ty_args=[relax.TupleType([_loose(v.type) for v in binding.outputs])])
        return self._unpack_typed(call, binding.outputs)

    def _while(self, binding: Binding, args, invoke):
        cond, body = binding.regions
        call = relax.Call(relax.ExternFunc("egad.while_loop"),
                          [invoke, self.functions[id(cond)], self.functions[id(body)],
                           relax.prim_value(binding.attrs["n_state"]),
                           relax.prim_value(-1 if binding.attrs.get("max_iters") is None
                                            else binding.attrs["max_iters"]), *args],
                          ty_args=[relax.TupleType([_loose(v.type) for v in binding.outputs])])
        return self._unpack_typed(call, binding.outputs)

    def _pop_all(self, pops: list[Binding], env: dict):
        """One driver call pops every tape in `pops` (each call into Python costs a few
        µs, a pop itself ~1 µs). It hands back the same handles, as `tape_pop` does."""
        elems = [_loose(b.outputs[0].type) for b in pops]
        call = relax.Call(relax.ExternFunc("egad.tape_pop_all"), [env[b.inputs[0].uid] for b in pops],
                          ty_args=[relax.TupleType(elems)])
        values = self._unpack_typed(call, [b.outputs[0] for b in pops])
        for binding, value in zip(pops, values):
            env[binding.outputs[0].uid] = value
            env[binding.outputs[1].uid] = env[binding.inputs[0].uid]

    def _push_all(self, pushes: list[Binding], env: dict):
        """One driver call pushes every value in `pushes` onto its tape."""
        handles = [env[b.inputs[0].uid] for b in pushes]
        values = [env[b.inputs[1].uid] for b in pushes]
        self.bb.emit(relax.Call(relax.ExternFunc("egad.tape_push_all"), [*handles, *values], ty_args=[_HANDLE]))
        for binding, handle in zip(pushes, handles):
            env[binding.outputs[0].uid] = handle

    def _tape(self, binding: Binding, args):
        if binding.op == "tape_alloc":
            return (relax.Call(relax.ExternFunc("egad.tape_alloc"), [], ty_args=[_HANDLE]),)
        if binding.op == "tape_push":
            return (relax.Call(relax.ExternFunc("egad.tape_push"), args, ty_args=[_HANDLE]),)
        elem = _loose(binding.outputs[0].type)
        call = relax.Call(relax.ExternFunc("egad.tape_pop"), args, ty_args=[relax.TupleType([elem, _HANDLE])])
        return self._unpack_typed(call, binding.outputs)


def _tape_ops_at_the_ends(region: Region) -> tuple[list[Binding], list[Binding], list[Binding]]:
    """(pops to run first, the other bindings, pushes to run last) of a region. Tapes are
    linear values: a tape parameter is read by one op only, and a pushed tape a region
    yields is read by nothing in it. So a pop of a parameter can run at the start and a
    push whose tape is yielded at the end, each group in one call, in any order among
    themselves (different tapes are different stacks)."""
    params = {p.uid for p in region.params}
    yielded = {v.uid for v in region.results}
    pops = [b for b in region.bindings if b.op == "tape_pop" and b.inputs[0].uid in params]
    pushes = [b for b in region.bindings if b.op == "tape_push" and b.outputs[0].uid in yielded]
    if len(pops) < 2:
        pops = []
    if len(pushes) < 2:
        pushes = []
    grouped = {id(b) for b in pops + pushes}
    return pops, [b for b in region.bindings if id(b) not in grouped], pushes


# Relax's BlockBuilder keeps one current builder per process, and FunctionScope holds
# the function being lowered: programs built in several threads lower one at a time.
_LOWERING = threading.Lock()


def lower(program: Program, checks_in_kernels: bool = True):
    """The Relax IRModule of `program` (its `main` returns a tuple of the flat results).
    `checks_in_kernels`: index checks as CPU kernels calling back on an index out of
    range, else as host calls (tvm_bridge/index_checks.py)."""
    with _LOWERING:
        return _lower(program, checks_in_kernels)


def _lower(program: Program, checks_in_kernels: bool):
    FunctionScope.constants = known_constants(program.region)
    FunctionScope.ranges = integer_ranges(program)
    FunctionScope.sites = {id(binding): k for k, binding in enumerate(index_sites(program))}
    FunctionScope.hoisted = hoisted_checks(program, FunctionScope.ranges)
    FunctionScope.hoisted_sites = frozenset(id(check.site) for checks in FunctionScope.hoisted.values()
                                            for check in checks)
    FunctionScope.checks_in_kernels = checks_in_kernels
    FunctionScope.host_check_sites = {id(binding): k for k, binding in enumerate(host_check_sites(program))}
    try:
        return Lowering().module(program)
    finally:
        FunctionScope.constants, FunctionScope.ranges, FunctionScope.sites, FunctionScope.hoisted = {}, {}, {}, {}
        FunctionScope.hoisted_sites = frozenset()
        FunctionScope.host_check_sites = {}


def _row_layout(binding: Binding) -> list:
    """The shapes of a for loop's stacked outputs' rows, for a loop that runs zero times
    (egad.for_loop): a static dim as it is; a symbolic one as [k, axis, m], axis `axis` of
    the driver's k-th value (state, then invariants) less m (`T-m`, a slice's dim); None
    where no value has it (the driver then says so)."""
    values = [v.type for v in binding.inputs[2:]]

    def source(dim):
        if isinstance(dim, int):
            return dim
        base, dropped = shapes.shorter_dim(dim) or (dim, 0)
        for name, less in ((dim, 0), (base, dropped)):
            for k, t in enumerate(values):
                if isinstance(t, TensorType) and name in t.shape:
                    return [k, t.shape.index(name), less]
        return None

    return [[[source(d) for d in v.type.shape[1:]], v.type.dtype] for v in binding.outputs[binding.attrs["n_state"]:]]


def known_constants(region: Region, known: dict | None = None) -> dict:
    """IR var uid -> value for every `const` binding in `region` and its sub-regions,
    and for every region parameter through which a constant reaches a sub-region
    unchanged: a loop's invariants, a branch's operands (not a loop's state)."""
    known = {} if known is None else known
    for binding in region.bindings:
        if binding.op == "const":
            known[binding.outputs[0].uid] = binding.attrs["value"]
        for sub, pairs in _params_fed_by_inputs(binding):
            for param, fed in pairs:
                if fed.uid in known:
                    known[param.uid] = known[fed.uid]
            known_constants(sub, known)
    return known


def _params_fed_by_inputs(binding: Binding):
    """(sub-region, [(param, the input var it is always given)]) per sub-region of a
    control binding, for the params that do not change between calls."""
    if binding.op == "for":
        n_state, (body,) = binding.attrs["n_state"], binding.regions
        return [(body, list(zip(body.params[1 + n_state:], binding.inputs[2 + n_state:])))]
    if binding.op == "while":
        n_state = binding.attrs["n_state"]
        return [(sub, list(zip(sub.params[n_state:], binding.inputs[n_state:]))) for sub in binding.regions]
    if binding.op in ("if", "switch"):
        return [(sub, list(zip(sub.params, binding.inputs[1:]))) for sub in binding.regions]
    return [(sub, []) for sub in binding.regions]

