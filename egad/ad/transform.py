"""Reverse-mode AD over the IR, without unrolling (DESIGN §4, docs/ad.md).

The gradient program is traced like user code: the forward bindings are copied
into a new program, and each VJP formula (egad/ir/ops.py) is traced into the
adjoint. Control flow keeps its structure:

- A loop body is transformed into a *forward body*, which also pushes the body's
  residuals onto tapes, and an *adjoint body*, built right away with the forward
  body as its parent: every forward value the adjoint formulas read becomes a
  capture of the adjoint body. After the adjoint body is built, its captures are
  sorted: the loop counter and the loop's invariants are passed to the adjoint
  loop directly; every other capture is a residual — pushed on its own tape at the
  end of each forward iteration and popped at the start of each adjoint iteration.
  So only residuals the adjoint reads are taped, and nested loops push and pop
  their own tapes in matching (LIFO) order: one flat stack per residual, whatever
  the inner trip counts.
- The adjoint of `for` is a `for` over the same counter in the other direction; the
  adjoint of `while` is a `for` over the trip count, which the forward loop counts.
- Branches: each branch's residuals go to its own tapes; the adjoint is a branch on
  the same predicate (itself taped when the branch sits in a loop).
- At the top level the forward and the adjoint share one region, so residuals are
  read directly and tapes are allocated there.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import source
from ..errors import UnsupportedError, message
from ..frontend import context
from ..frontend import numpy_api as enp
from ..frontend.primitives import is_tracer, record, to_tracer
from ..frontend.tracer import Tracer
from ..ir import ops
from ..ir.dce import eliminate_dead_code_in
from ..ir.program import Binding, Region, Var
from ..ir.types import TapeType, TensorType, fresh_symbol
from .activity import Activity, loop_slot_active
from .adjoint_math import AdjointMath, SparseRows

_COUNTER = TensorType((), "int64", weak=True)
CHECKPOINT_ATTR = "checkpoint"  # a control op AD recomputes in the adjoint instead of taping (egad/ad/checkpoint.py)
# what a loop's forward copy and its adjoint loop keep of its attrs beyond their own: a bound on a while
# loop's trips, and the trip count the cost model assumes where the bounds are not constants (docs/ir.md)
KEPT_LOOP_ATTRS = ("max_iters", "trip_guess")
_RECOMPUTE = object()  # the adjoint record of such an op


@dataclasses.dataclass(eq=False)
class TapeSlot:
    """One residual's tape, threaded from where it is allocated to where it is used."""

    elem: TensorType
    label: str


class TapeThread:
    """The current value of every tape in one region under construction. At the top
    level a tape is allocated on first use; in a sub-region it arrives as a param."""

    def __init__(self, builder: context.RegionBuilder, top_level: bool):
        self.builder = builder
        self.top_level = top_level
        self.params: dict[TapeSlot, Var] = {}
        self.current: dict[TapeSlot, Tracer] = {}

    def get(self, slot: TapeSlot) -> Tracer:
        if slot not in self.current:
            if self.top_level:
                (self.current[slot],) = record("tape_alloc", [], {"elem": slot.elem}, [TapeType(slot.elem)])
            else:
                var = Var(TapeType(slot.elem), f"tape.{slot.label}")
                self.params[slot] = var
                self.current[slot] = Tracer(self.builder, var)
        return self.current[slot]

    def set(self, slot: TapeSlot, value: Tracer):
        self.current[slot] = value

    def param_for(self, slot: TapeSlot) -> Var:
        """This region's param for `slot` (a pass-through one if it never used the tape)."""
        self.get(slot)
        return self.params[slot]

    def result_for(self, slot: TapeSlot) -> Var:
        return self.builder.resolve(self.get(slot))


class _PlacedOnce:
    """Adjoint regions, handed out as built the first time they are emitted and as
    fresh copies after (a region appears once in a program). Copying every time made
    the gradient of K nested branches or loops O(K^2): each level copied all the
    levels inside it."""

    def placed(self, regions: tuple[Region, ...]) -> tuple[Region, ...]:
        if getattr(self, "_emitted", False):
            return tuple(clone_region(r) for r in regions)
        self._emitted = True
        return regions


@dataclasses.dataclass
class _LoopAdjoint(_PlacedOnce):
    """A loop's adjoint body, built during the forward pass, emitted during the backward."""

    body: Region
    slots: list[TapeSlot]  # tapes the adjoint loop threads, in its state order
    active_slots: list[int]  # forward state slots that carry cotangents
    accumulated: list[int]  # invariant positions with a dense cotangent accumulator
    sparse: list[tuple[int, int]]  # (invariant position, index dtype rank) per sparse-rows pair of ys
    invariant_inputs: list[int]  # forward invariant positions passed to the adjoint body
    active_ys: list[int]
    reads_lo: bool
    count: Tracer | None = None  # a while loop's trip count (forward output)
    sparse_types: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _BuiltBranch:
    """One branch's forward and adjoint regions under construction."""

    name: str
    fb: context.RegionBuilder
    forward: "ForwardRegion"
    params: list
    results: list
    bb: context.RegionBuilder
    backward: "BackwardRegion"
    operand_stand_ins: list
    out_cts: list
    operand_cts: list
    pops: list


@dataclasses.dataclass
class _BranchAdjoint(_PlacedOnce):
    branches: tuple[Region, ...]
    slots: list[TapeSlot]
    active_outputs: list[int]
    active_operands: list[int]


class GradientBuilder:
    """Shared state of one `grad` transformation."""

    def __init__(self, activity: Activity):
        self.activity = activity
        self.math = AdjointMath()


class ForwardRegion:
    """Copies one region's bindings into the region being built; transforms active
    control ops and keeps their adjoints for the backward pass."""

    def __init__(self, grad: GradientBuilder, builder: context.RegionBuilder, tapes: TapeThread,
                 env: dict[int, object]):
        self.grad = grad
        self.builder = builder
        self.tapes = tapes
        self.env = env
        self.adjoints: dict[int, object] = {}  # id(binding) -> _LoopAdjoint | _BranchAdjoint

    def value(self, var: Var):
        return self.env[var.uid]

    def run(self, bindings: list[Binding]):
        for binding in bindings:
            if binding.op in ops.CONTROL_OPS and any(self.grad.activity.is_active(v) for v in binding.outputs):
                if binding.attrs.get(CHECKPOINT_ATTR):
                    # forward without tapes; the adjoint runs it again (egad/ad/checkpoint.py)
                    self._copy(binding)
                    self.adjoints[id(binding)] = _RECOMPUTE
                    continue
                with source.located_at(binding.loc):
                    {"for": self._for, "while": self._while, "if": self._branch,
                     "switch": self._branch}[binding.op](binding)
            else:
                self._copy(binding)

    def _copy(self, binding: Binding):
        """Re-emit a binding unchanged (control ops with fresh copies of their regions)."""
        inputs = tuple(self.builder.resolve(to_tracer(self.value(v))) for v in binding.inputs)
        outputs = tuple(Var(v.type, v.hint) for v in binding.outputs)
        regions = tuple(clone_region(r) for r in binding.regions)
        attrs = {k: v for k, v in binding.attrs.items() if k != CHECKPOINT_ATTR}
        self.builder.bindings.append(Binding(outputs, binding.op, inputs, attrs, regions, binding.loc))
        for old, new in zip(binding.outputs, outputs):
            self.env[old.uid] = Tracer(self.builder, new)

    # --- loops -----------------------------------------------------------------
    def _for(self, binding: Binding):
        n_state = binding.attrs["n_state"]
        lo, hi = (self.value(v) for v in binding.inputs[:2])
        inits = [self.value(v) for v in binding.inputs[2:2 + n_state]]
        invariants = [self.value(v) for v in binding.inputs[2 + n_state:]]
        trip_dim = binding.attrs["trip_dim"]
        if trip_dim is None:
            trip_dim = fresh_symbol("n")
        forward, adjoint = self._transform_loop_body(binding, trip_dim)
        slots = adjoint.slots
        tapes = [self.tapes.get(slot) for slot in slots]
        state_types = [v.type for v in binding.outputs[:n_state]]
        ys_types = [v.type for v in binding.outputs[n_state:]]
        outputs = record("for", [lo, hi, *inits, *tapes, *invariants],
                         {"n_state": n_state + len(slots), "reverse": binding.attrs["reverse"], "trip_dim": trip_dim,
                          **_kept_attrs(binding)},
                         state_types + [TapeType(s.elem) for s in slots] + ys_types, (forward,))
        for slot, tape in zip(slots, outputs[n_state:n_state + len(slots)]):
            self.tapes.set(slot, tape)
        for old, new in zip(binding.outputs, outputs[:n_state] + outputs[n_state + len(slots):]):
            self.env[old.uid] = new
        self.adjoints[id(binding)] = adjoint

    def _while(self, binding: Binding):
        n_state = binding.attrs["n_state"]
        inits = [self.value(v) for v in binding.inputs[:n_state]]
        invariants = [self.value(v) for v in binding.inputs[n_state:]]
        trip_dim = fresh_symbol("n")
        forward, adjoint = self._transform_loop_body(binding, trip_dim)
        slots = adjoint.slots
        cond = _while_cond_with_extra_state(binding, forward)
        tapes = [self.tapes.get(slot) for slot in slots]
        zero = to_tracer(enp.zeros((), "int64"))
        state_types = [v.type for v in binding.outputs]
        outputs = record("while", [*inits, zero, *tapes, *invariants],
                         {"n_state": n_state + 1 + len(slots), **_kept_attrs(binding)},
                         state_types + [TensorType((), "int64")] + [TapeType(s.elem) for s in slots], (cond, forward))
        for slot, tape in zip(slots, outputs[n_state + 1:]):
            self.tapes.set(slot, tape)
        for old, new in zip(binding.outputs, outputs[:n_state]):
            self.env[old.uid] = new
        adjoint.count = outputs[n_state]
        self.adjoints[id(binding)] = adjoint

    def _transform_loop_body(self, binding: Binding, trip_dim):
        """The forward body (with tape pushes) and the adjoint body of a loop."""
        activity = self.grad.activity
        is_for = binding.op == "for"
        n_state = binding.attrs["n_state"]
        old = binding.regions[-1]
        lead = 1 if is_for else 0
        old_state = old.params[lead:lead + n_state]
        old_invariants = old.params[lead + n_state:]
        active_slots = [k for k in range(n_state) if loop_slot_active(activity, binding, k)]
        active_ys = [j for j in range(len(old.results) - n_state) if activity.is_active(binding.outputs[n_state + j])]

        with context.open_region("body", parent=self.builder) as fb:
            counter = Var(_COUNTER, "i") if is_for else None
            state = [Var(p.type, p.hint) for p in old_state]
            invariants = [Var(p.type, p.hint) for p in old_invariants]
            env = {p.uid: Tracer(fb, v) for p, v in zip(old.params, ([counter] if is_for else []) + state + invariants)}
            forward = ForwardRegion(self.grad, fb, TapeThread(fb, top_level=False), env)
            forward.run(old.bindings)
            extra_results = []
            if not is_for:  # count the trips, for the adjoint loop
                count = Var(TensorType((), "int64"), "trips")
                extra_results = [fb.resolve(enp.add(Tracer(fb, count), 1))]

            with context.open_region("body_adjoint", parent=fb) as bb:
                adjoint_counter = Var(_COUNTER, "i")
                if is_for:
                    bb.captures[counter.uid] = (counter, adjoint_counter)
                adjoint_invariants = []
                for var in invariants:
                    stand_in = Var(var.type, var.hint)
                    bb.captures[var.uid] = (var, stand_in)
                    adjoint_invariants.append(stand_in)
                state_cts = [Var(old_state[k].type, f"d{old_state[k].hint or 'state'}") for k in active_slots]
                ys_cts = [Var(TensorType((trip_dim,) + old.results[n_state + j].type.shape,
                                         old.results[n_state + j].type.dtype), "dys") for j in active_ys]
                lo_param = Var(_COUNTER, "lo") if ys_cts else None
                backward = BackwardRegion(self.grad, bb, TapeThread(bb, top_level=False), forward)
                cts: dict[int, list] = {}
                for k, param in zip(active_slots, state_cts):
                    backward.add(cts, old.results[k], Tracer(bb, param))
                for j, param in zip(active_ys, ys_cts):
                    row = enp.take(Tracer(bb, param), Tracer(bb, adjoint_counter) - Tracer(bb, lo_param), axis=0)
                    backward.add(cts, old.results[n_state + j], row)
                backward.run(old.bindings, cts)
                next_state_cts = [backward.dense(cts, old_state[k], forward.value(old_state[k])) for k in active_slots]
                accumulated, accumulators, sums, sparse, sparse_results = [], [], [], [], []
                for position, param in enumerate(old_invariants):
                    dense_part, sparse_part = backward.split(cts, param)
                    if dense_part is not None:
                        accumulator = Var(param.type, f"d{param.hint}")
                        accumulated.append(position)
                        accumulators.append(accumulator)
                        sums.append(bb.resolve(enp.add(Tracer(bb, accumulator), dense_part)))
                    for rows in sparse_part:
                        sparse.append(position)
                        sparse_results += [bb.resolve(to_tracer(rows.index)), bb.resolve(rows.values)]
                state_ct_results = [bb.resolve(to_tracer(c)) for c in next_state_cts]

            # Sort the adjoint body's captures: counter and invariants pass through,
            # everything else is a residual, taped here and popped there.
            passed = {adjoint_counter.uid} | {v.uid for v in adjoint_invariants}
            _drop_dead_code(bb, backward, state_ct_results + sums + sparse_results)
            # the adjoint's own names for the forward's counter and invariants: a residual
            # that is just this trip's row of an invariant (xs[t]) is read again, not taped
            stand_ins = {v.uid: a for v, a in zip(invariants, adjoint_invariants)}
            if is_for:
                stand_ins[counter.uid] = adjoint_counter
            pops = _tape_residuals(fb, forward, bb, backward, passed, binding.loc, stand_ins)
            slots = list(forward.tapes.current)  # nested loops' tapes, then this loop's own
            adjoint_tape_params = [backward.tapes.param_for(s) for s in slots]
            adjoint_tape_results = [backward.tapes.result_for(s) for s in slots]

            used = _used_vars(bb.bindings + pops, sums + state_ct_results + sparse_results)
            kept_invariants = [p for p, v in enumerate(adjoint_invariants) if v.uid in used]
            adjoint_body = Region(
                tuple([adjoint_counter, *state_cts, *accumulators, *adjoint_tape_params,
                       *(adjoint_invariants[p] for p in kept_invariants), *ys_cts, *([lo_param] if lo_param else [])]),
                pops + bb.bindings,
                tuple([*state_ct_results, *sums, *adjoint_tape_results, *sparse_results]),
                "body_adjoint")

            state_results = [fb.resolve(forward.value(r)) for r in old.results[:n_state]]
            ys_results = [fb.resolve(forward.value(r)) for r in old.results[n_state:]]
            forward_tape_params = [forward.tapes.param_for(s) for s in slots]
            forward_tape_results = [forward.tapes.result_for(s) for s in slots]
            params = ([counter] if is_for else []) + state + ([count] if not is_for else []) + forward_tape_params \
                + invariants
            forward_body = Region(tuple(params), fb.bindings,
                                  tuple(state_results + extra_results + forward_tape_results + ys_results), "body")
        adjoint = _LoopAdjoint(adjoint_body, slots, active_slots, accumulated, sparse, kept_invariants, active_ys,
                               lo_param is not None)
        adjoint.sparse_types = [v.type for v in sparse_results]
        return forward_body, adjoint

    # --- branches ----------------------------------------------------------------
    def _branch(self, binding: Binding):
        activity = self.grad.activity
        selector = self.value(binding.inputs[0])
        operands = [self.value(v) for v in binding.inputs[1:]]
        active_outputs = [j for j, v in enumerate(binding.outputs) if activity.is_active(v)]
        active_operands = [k for k in range(len(operands))
                           if any(activity.is_active(branch.params[k]) for branch in binding.regions)]
        built = []
        for old in binding.regions:
            with context.open_region(old.name, parent=self.builder) as fb:
                params = [Var(p.type, p.hint) for p in old.params]
                env = {p.uid: Tracer(fb, v) for p, v in zip(old.params, params)}
                forward = ForwardRegion(self.grad, fb, TapeThread(fb, top_level=False), env)
                forward.run(old.bindings)
                with context.open_region(f"{old.name}_adjoint", parent=fb) as bb:
                    operand_stand_ins = []
                    for var in params:
                        stand_in = Var(var.type, var.hint)
                        bb.captures[var.uid] = (var, stand_in)
                        operand_stand_ins.append(stand_in)
                    out_cts = [Var(binding.outputs[j].type, "dout") for j in active_outputs]
                    backward = BackwardRegion(self.grad, bb, TapeThread(bb, top_level=False), forward)
                    cts: dict[int, list] = {}
                    for j, param in zip(active_outputs, out_cts):
                        backward.add(cts, old.results[j], Tracer(bb, param))
                    backward.run(old.bindings, cts)
                    operand_cts = [bb.resolve(to_tracer(backward.dense(cts, old.params[k], forward.value(old.params[k]))))
                                   for k in active_operands]
                _drop_dead_code(bb, backward, operand_cts)
                pops = _tape_residuals(fb, forward, bb, backward, {v.uid for v in operand_stand_ins}, binding.loc)
                results = [fb.resolve(forward.value(r)) for r in old.results]
                built.append(_BuiltBranch(old.name, fb, forward, params, results, bb, backward, operand_stand_ins,
                                          out_cts, operand_cts, pops))

        slots: list[TapeSlot] = []  # the union of every branch's tapes; a branch passes the others through
        for branch in built:
            slots += [s for s in branch.forward.tapes.current if s not in slots]
        forward_regions, adjoint_regions = [], []
        for b in built:
            forward_regions.append(Region(
                tuple(b.params + [b.forward.tapes.param_for(s) for s in slots]), b.fb.bindings,
                tuple(b.results + [b.forward.tapes.result_for(s) for s in slots]), b.name))
            adjoint_regions.append(Region(
                tuple(b.out_cts + [b.backward.tapes.param_for(s) for s in slots] + b.operand_stand_ins),
                b.pops + b.bb.bindings,
                tuple(b.operand_cts + [b.backward.tapes.result_for(s) for s in slots]), f"{b.name}_adjoint"))
        tapes = [self.tapes.get(s) for s in slots]
        out_types = [v.type for v in binding.outputs]
        outputs = record(binding.op, [selector, *operands, *tapes], {},
                         out_types + [TapeType(s.elem) for s in slots], tuple(forward_regions))
        n_out = len(out_types)
        for slot, tape in zip(slots, outputs[n_out:]):
            self.tapes.set(slot, tape)
        for old, new in zip(binding.outputs, outputs[:n_out]):
            self.env[old.uid] = new
        self.adjoints[id(binding)] = _BranchAdjoint(tuple(adjoint_regions), slots, active_outputs, active_operands)


class BackwardRegion:
    """Emits the adjoint of one region's bindings, in reverse, into `builder`."""

    def __init__(self, grad: GradientBuilder, builder: context.RegionBuilder, tapes: TapeThread,
                 forward: ForwardRegion):
        self.grad = grad
        self.builder = builder
        self.tapes = tapes
        self.forward = forward

    def run(self, bindings: list[Binding], cts: dict[int, list]):
        activity = self.grad.activity
        for binding in reversed(bindings):
            if not any(v.uid in cts for v in binding.outputs):
                continue
            if not any(activity.is_active(v) for v in binding.inputs):
                for v in binding.outputs:
                    cts.pop(v.uid, None)
                continue
            with source.located_at(binding.loc):
                if binding.op in ops.CONTROL_OPS:
                    adjoint = self.forward.adjoints[id(binding)]
                    if adjoint is _RECOMPUTE:
                        self._recompute(binding, cts)
                    elif isinstance(adjoint, _LoopAdjoint):
                        self._loop(binding, adjoint, cts)
                    else:
                        self._branch(binding, adjoint, cts)
                else:
                    self._op(binding, cts)

    def _recompute(self, binding: Binding, cts):
        """The adjoint of a control op whose forward values were not taped: run its
        forward again here, taping into tapes of this region, then its adjoint. What
        the rerun reads from the forward pass (a loop's initial state) is captured
        from the enclosing forward body, so an enclosing loop tapes just that."""
        again = ForwardRegion(self.grad, self.builder, TapeThread(self.builder, top_level=True),
                              dict(self.forward.env))
        plain = dataclasses.replace(binding, attrs={k: v for k, v in binding.attrs.items() if k != CHECKPOINT_ATTR})
        again.run([plain])
        BackwardRegion(self.grad, self.builder, again.tapes, again).run([plain], cts)

    def _op(self, binding: Binding, cts):
        op = ops.OPS[binding.op]
        out_cts = [self.dense(cts, v, self.forward.value(v), zero_if_none=False) for v in binding.outputs]
        if op.vjp is None:
            raise UnsupportedError(message(
                f"{binding.op} has no gradient, but the differentiated output depends on it through a float value",
                where=f"op {binding.op!r} at {binding.loc.long()}",
                instead="wrap the input in egad.stop_gradient if no gradient should flow, or use an op with one"))
        math = self.grad.math
        math.binding = binding
        ins = [self.forward.value(v) for v in binding.inputs]
        outs = [self.forward.value(v) for v in binding.outputs]
        grads = op.vjp(math, ins, outs, out_cts, binding.attrs)
        for var, g in zip(binding.inputs, grads):
            if g is not None:
                self.add(cts, var, g)

    def add(self, cts, var: Var, contribution):
        """Accumulate a cotangent contribution to `var`, if `var` carries an adjoint."""
        if self.grad.activity.is_active(var):
            accumulate(cts, var, contribution)

    def dense(self, cts, var: Var, like, zero_if_none: bool = True):
        """The summed cotangent of `var` (consumed), or zeros like it (or None)."""
        contributions = cts.pop(var.uid, [])
        total = None
        for c in contributions:
            c = c.densify() if isinstance(c, SparseRows) else c
            total = c if total is None else enp.add(total, c)
        if total is None and zero_if_none:
            total = zeros_like_value(var.type, like)
        return total

    def split(self, cts, var: Var):
        """(dense sum or None, sparse-rows list) of `var`'s cotangent: sparse rows into
        a loop invariant along axis 0 with a static index shape stay sparse, unless a
        trip's rows are a large part of the array (`_few_rows`)."""
        dense, sparse = None, []
        for c in cts.pop(var.uid, []):
            if isinstance(c, SparseRows) and c.axis == 0 and _static(c.index) and _few_rows(c, var):
                sparse.append(c)
                continue
            c = c.densify() if isinstance(c, SparseRows) else c
            dense = c if dense is None else enp.add(dense, c)
        return dense, sparse

    def _loop(self, binding: Binding, adjoint: _LoopAdjoint, cts):
        forward = self.forward
        is_for = binding.op == "for"
        n_state = binding.attrs["n_state"]
        first_state = 2 if is_for else 0
        state_inputs = binding.inputs[first_state:first_state + n_state]
        invariant_inputs = binding.inputs[first_state + n_state:]
        if is_for:
            lo, hi = forward.value(binding.inputs[0]), forward.value(binding.inputs[1])
        else:
            lo, hi = to_tracer(enp.zeros((), "int64")), adjoint.count
        state_cts = [self.dense(cts, binding.outputs[k], forward.value(binding.outputs[k])) for k in adjoint.active_slots]
        accumulators = [zeros_like_value(invariant_inputs[p].type, forward.value(invariant_inputs[p]))
                        for p in adjoint.accumulated]
        tapes = [self.tapes.get(s) for s in adjoint.slots]
        invariants = [forward.value(invariant_inputs[p]) for p in adjoint.invariant_inputs]
        ys_cts = [self.dense(cts, binding.outputs[n_state + j], forward.value(binding.outputs[n_state + j]))
                  for j in adjoint.active_ys]
        n_carry = len(state_cts) + len(accumulators) + len(tapes)
        body = adjoint.body
        trip_dim = binding.attrs.get("trip_dim") if is_for else None
        if trip_dim is None:
            trip_dim = fresh_symbol("n")
        ys_types = [TensorType((trip_dim,) + t.shape, t.dtype) for t in adjoint.sparse_types]
        outputs = record("for", [lo, hi, *state_cts, *accumulators, *tapes, *invariants, *ys_cts,
                                 *([lo] if adjoint.reads_lo else [])],
                         # a `for` over the trips the forward loop ran: a bound on them does not apply
                         {"n_state": n_carry, "reverse": not binding.attrs.get("reverse", False), "trip_dim": trip_dim,
                          **_kept_attrs(binding, ("trip_guess",))},
                         [t for t in body.result_types[:n_carry]] + ys_types, adjoint.placed((body,)))
        position = 0
        for k in adjoint.active_slots:
            self.add(cts, state_inputs[k], outputs[position])
            position += 1
        for p in adjoint.accumulated:
            self.add(cts, invariant_inputs[p], outputs[position])
            position += 1
        for slot in adjoint.slots:
            self.tapes.set(slot, outputs[position])
            position += 1
        for p in adjoint.sparse:
            index, values = outputs[position], outputs[position + 1]
            position += 2
            self.add(cts, invariant_inputs[p], SparseRows(forward.value(invariant_inputs[p]), index, values, 0))

    def _branch(self, binding: Binding, adjoint: _BranchAdjoint, cts):
        forward = self.forward
        out_cts = [self.dense(cts, binding.outputs[j], forward.value(binding.outputs[j])) for j in adjoint.active_outputs]
        tapes = [self.tapes.get(s) for s in adjoint.slots]
        operands = [forward.value(v) for v in binding.inputs[1:]]
        out_types = [binding.inputs[1 + k].type for k in adjoint.active_operands] + \
            [TapeType(s.elem) for s in adjoint.slots]
        outputs = record(binding.op, [forward.value(binding.inputs[0]), *out_cts, *tapes, *operands], {},
                         [TensorType(t.shape, t.dtype) if isinstance(t, TensorType) else t for t in out_types],
                         adjoint.placed(adjoint.branches))
        for k, ct in zip(adjoint.active_operands, outputs):
            self.add(cts, binding.inputs[1 + k], ct)
        for slot, tape in zip(adjoint.slots, outputs[len(adjoint.active_operands):]):
            self.tapes.set(slot, tape)


def _drop_dead_code(bb, backward: "BackwardRegion", results: list[Var]):
    """Remove adjoint code nobody reads (e.g. d/db of `a * b` for a constant b), and
    the captures only it read, before captures become residuals: a residual is
    taped only if a live adjoint formula reads it."""
    region = Region((), bb.bindings, tuple(results) + tuple(backward.tapes.result_for(s)
                                                            for s in list(backward.tapes.current)), bb.name)
    eliminate_dead_code_in(region)
    used = {v.uid for b in region.bindings for v in b.inputs} | {v.uid for v in region.results}
    for uid, (outer, inner) in list(bb.captures.items()):
        if inner.uid not in used:
            del bb.captures[uid]


def _tape_residuals(fb, forward: ForwardRegion, bb, backward: "BackwardRegion", passed: set[int],
                    loc, stand_ins: dict[int, Var] | None = None) -> list[Binding]:
    """Tape the forward values the adjoint body `bb` captured from the forward body
    `fb`, except the captures in `passed` (counter, invariants, operands), which
    reach the adjoint directly. Each residual gets its own tape: pushed at the end
    of the forward body, popped (into the captured var) at the start of the adjoint
    body. Literals are recreated in the adjoint body instead, and so is a row of a
    loop invariant at the trip's counter (`xs[t]`, through `stand_ins`: forward var uid
    -> the adjoint's var): one `take` in place of a push, a pop and a copy of the row
    per trip. Returns the bindings to put first in the adjoint body."""
    stand_ins = stand_ins or {}
    pops = []
    producers = {v.uid: b for b in fb.bindings for v in b.outputs}
    for outer, inner in list(bb.captures.values()):
        if inner.uid in passed:
            continue
        producer = producers.get(outer.uid)
        if producer is not None and producer.op == "const":  # recreate a literal rather than tape it
            pops.append(Binding((inner,), "const", (), dict(producer.attrs), (), loc))
            continue
        if producer is not None and producer.op == "take" and all(v.uid in stand_ins for v in producer.inputs):
            pops.append(Binding((inner,), "take", tuple(stand_ins[v.uid] for v in producer.inputs),
                                dict(producer.attrs), (), producer.loc))
            continue
        slot = TapeSlot(TensorType(outer.type.shape, outer.type.dtype), outer.hint or "r")
        (pushed,) = record("tape_push", [forward.tapes.get(slot), Tracer(fb, outer)], {}, [TapeType(slot.elem)])
        forward.tapes.set(slot, pushed)
        tape_out = Var(TapeType(slot.elem), f"tape.{slot.label}")
        pops.append(Binding((inner, tape_out), "tape_pop", (bb.resolve(backward.tapes.get(slot)),), {}, (), loc))
        backward.tapes.set(slot, Tracer(bb, tape_out))
    return pops


def accumulate(cts: dict[int, list], var: Var, contribution):
    cts.setdefault(var.uid, []).append(contribution)


SPARSE_ROWS_FRACTION = 8  # a constant index's rows stay sparse only when under 1/8 of the array's


def _few_rows(rows: SparseRows, var: Var) -> bool:
    """Whether a trip's gradient rows into the loop invariant `var` should be stacked
    for one scatter-add after the loop. Rows at the loop counter (xs[t]) or at
    tokens (an embedding's B rows of V): yes. Rows at a constant index that are a
    large part of the array (b[0] of a 4-row bias): no, they go to a dense
    accumulator; stacking them would hold T copies of the same rows, growing with
    the loop (4 MiB for the LSTM at T=1024), to save adding a small array per trip."""
    table_rows = var.type.shape[0] if var.type.shape else None
    if not isinstance(table_rows, int) or not _constant(rows.index):
        return True
    shape = rows.index.type.shape if is_tracer(rows.index) else np.shape(rows.index)
    return math.prod(shape) * SPARSE_ROWS_FRACTION < table_rows


def _constant(x) -> bool:
    """Whether `x` is a constant: a Python or numpy value, or a tracer a `const` made."""
    if not is_tracer(x):
        return True
    uid = x._var.uid
    return any(b.op == "const" and b.outputs[0].uid == uid for b in x._builder.bindings)


def _static(x) -> bool:
    shape = x.type.shape if is_tracer(x) else getattr(x, "shape", ())
    return all(isinstance(d, int) for d in shape)


def zeros_like_value(t: TensorType, like):
    """A zero cotangent of type `t`; from the static shape when there is one, else
    shaped like the value `like`."""
    if all(isinstance(d, int) for d in t.shape):
        return to_tracer(enp.zeros(t.shape, t.dtype))
    return enp.zeros_like(like, dtype=t.dtype)


def _used_vars(bindings: list[Binding], results: list[Var]) -> set[int]:
    used = {v.uid for v in results}
    for binding in bindings:
        used.update(v.uid for v in binding.inputs)
    return used


def _kept_attrs(binding: Binding, keys=KEPT_LOOP_ATTRS) -> dict:
    """The attrs of `binding` (a loop) among `keys` that it has (its copies keep them)."""
    return {k: binding.attrs[k] for k in keys if binding.attrs.get(k) is not None}


def _while_cond_with_extra_state(binding: Binding, forward_body: Region) -> Region:
    """The while loop's condition, taking the forward body's params (state, trip
    count, tapes, invariants); it reads only the original state and invariants."""
    n_state = binding.attrs["n_state"]
    old_cond = binding.regions[0]
    params = [Var(p.type, p.hint) for p in forward_body.params]
    n_extra = len(forward_body.params) - len(old_cond.params)
    mapping = {old.uid: new for old, new in zip(old_cond.params[:n_state], params[:n_state])}
    mapping.update({old.uid: new for old, new in zip(old_cond.params[n_state:], params[n_state + n_extra:])})
    body = clone_region(old_cond, mapping)
    return Region(tuple(params), body.bindings, body.results, "cond")


def clone_region(region: Region, mapping: dict[int, Var] | None = None) -> Region:
    """A copy of `region` with fresh Vars (so a region can appear twice in a program)."""
    mapping = dict(mapping or {})

    def fresh(var: Var) -> Var:
        if var.uid not in mapping:
            mapping[var.uid] = Var(var.type, var.hint)
        return mapping[var.uid]

    params = tuple(fresh(p) for p in region.params)
    bindings = []
    for b in region.bindings:
        inputs = tuple(mapping[v.uid] for v in b.inputs)
        regions = tuple(clone_region(r) for r in b.regions)
        outputs = tuple(fresh(v) for v in b.outputs)
        bindings.append(Binding(outputs, b.op, inputs, dict(b.attrs), regions, b.loc))
    return Region(params, bindings, tuple(mapping[v.uid] for v in region.results), region.name)
