"""Activity analysis: which values need an adjoint.

A value is *varied* when it depends on a differentiated input through
differentiable float ops, and *useful* when the loss depends on it. Only values
that are both get adjoint code (gradient redundancy elimination, issue 3 item 4);
all others have a symbolic zero cotangent. Loop state is analysed per slot to a
fixed point, so a slot is active in every iteration or in none.
"""
from __future__ import annotations

from ..ir import ops
from ..ir.program import Binding, Region
from ..ir.types import TensorType, is_float


def _differentiable_value(var) -> bool:
    return isinstance(var.type, TensorType) and is_float(var.type.dtype)


class Activity:
    def __init__(self):
        self.varied: set[int] = set()
        self.useful: set[int] = set()

    def is_active(self, var) -> bool:
        return var.uid in self.varied and var.uid in self.useful

    # --- varied: forward ---------------------------------------------------------
    def mark_varied(self, region: Region, params_varied: list[bool]):
        for param, flag in zip(region.params, params_varied):
            if flag and _differentiable_value(param):
                self.varied.add(param.uid)
        for binding in region.bindings:
            if binding.op in ops.CONTROL_OPS:
                self._varied_control(binding)
                continue
            if not ops.OPS[binding.op].differentiable:
                continue
            if any(v.uid in self.varied for v in binding.inputs):
                self.varied.update(v.uid for v in binding.outputs if _differentiable_value(v))

    def _varied_control(self, binding: Binding):
        flags = [v.uid in self.varied for v in binding.inputs]
        op = binding.op
        if op in ("if", "switch"):
            for branch in binding.regions:
                self.mark_varied(branch, flags[1:])
            for k, out in enumerate(binding.outputs):
                if any(branch.results[k].uid in self.varied for branch in binding.regions):
                    self.varied.add(out.uid)
            return
        n_state = binding.attrs["n_state"]
        body = binding.regions[-1]
        state_inputs = flags[2:2 + n_state] if op == "for" else flags[:n_state]
        invariants = flags[2 + n_state:] if op == "for" else flags[n_state:]
        lead = [False] if op == "for" else []
        state = list(state_inputs)
        while True:  # fixed point: a slot is varied if it enters varied or the body makes it so
            self.mark_varied(body, lead + state + invariants)
            new = [s or body.results[k].uid in self.varied for k, s in enumerate(state)]
            if new == state:
                break
            state = new
        for k, out in enumerate(binding.outputs):
            source = body.results[k]
            if (k < n_state and state[k]) or source.uid in self.varied:
                if _differentiable_value(out):
                    self.varied.add(out.uid)

    # --- useful: backward ---------------------------------------------------------
    def mark_useful(self, region: Region, results_useful: list[bool]):
        for var, flag in zip(region.results, results_useful):
            if flag:
                self.useful.add(var.uid)
        for binding in reversed(region.bindings):
            if not any(v.uid in self.useful for v in binding.outputs):
                continue
            if binding.op in ops.CONTROL_OPS:
                self._useful_control(binding)
            elif ops.OPS[binding.op].differentiable:
                self.useful.update(v.uid for v in binding.inputs)

    def _useful_control(self, binding: Binding):
        outs = [v.uid in self.useful for v in binding.outputs]
        op = binding.op
        if op in ("if", "switch"):
            for branch in binding.regions:
                self.mark_useful(branch, outs)
            for k, var in enumerate(binding.inputs[1:]):
                if any(branch.params[k].uid in self.useful for branch in binding.regions):
                    self.useful.add(var.uid)
            return
        n_state = binding.attrs["n_state"]
        body = binding.regions[-1]
        offset = 1 if op == "for" else 0  # the counter param
        state = outs[:n_state]
        while True:  # fixed point: a slot is useful if its output is, or the next iteration needs it
            self.mark_useful(body, state + outs[n_state:])
            new = [s or body.params[offset + k].uid in self.useful for k, s in enumerate(state)]
            if new == state:
                break
            state = new
        first_state = 2 if op == "for" else 0
        for k, var in enumerate(binding.inputs[first_state:]):
            # a state slot's initial value reaches its output directly when the loop runs zero times
            if (k < n_state and state[k]) or body.params[offset + k].uid in self.useful:
                self.useful.add(var.uid)


def analyze(region: Region, varied_params: list[bool], useful_results: list[bool]) -> Activity:
    activity = Activity()
    activity.mark_varied(region, varied_params)
    activity.mark_useful(region, useful_results)
    return activity


def loop_slot_active(activity: Activity, binding: Binding, k: int) -> bool:
    """Whether loop-state slot k of a `for`/`while` carries an adjoint: varied on the
    way in (param) and useful on the way out (result); fixed points make this hold
    for every iteration alike."""
    body = binding.regions[-1]
    offset = 1 if binding.op == "for" else 0
    varied = body.params[offset + k].uid in activity.varied
    return varied and (body.results[k].uid in activity.useful or binding.outputs[k].uid in activity.useful)
