"""The GPU parts of egad's Relax pipeline (tvm_bridge/schedule.py's `relax_pipeline`
assembles it) for cuda, rocm, metal, vulkan, opencl and webgpu: TVM's own pipeline
for the target with the changes egad makes on the CPU too, and its dlight schedules
guarded.

- Fusion is egad's (tvm_bridge/fusion.py): loop bodies keep their signatures, bindings
  stay after the match_cast defining their dims, and no FoldConstant (DESIGN §7: it
  corrupts a taped constant). TVM's default GPU pipeline folds constants.
- dlight's GPU rules schedule every kernel, the first rule that recognises it, as in
  TVM's pipeline; but a rule that raises on a kernel it misreads fails TVM's whole
  build. Measured on egad's gradients: `dl.gpu.GEMV` asserts on a kernel of the LSTM
  gradient (`assert r_loops`), `dl.gpu.Reduction`'s rfactor fails an internal check on
  one of GNMT-lite's. Here a rule that raises is skipped and the next one tries;
  `dl.gpu.Fallback` is last, as in TVM's list.
"""
from __future__ import annotations

import tvm
from tvm.relax.backend.cuda import pipeline as cuda_backend
from tvm.relax.backend.gpu_generic import pipeline as gpu_generic
from tvm.relax.backend.rocm import pipeline as rocm_backend
from tvm.s_tir import dlight as dl


class GuardedRule(dl.ScheduleRule):
    """A dlight rule whose failure on a kernel means "not mine" (None), not a failed build."""

    def __init__(self, rule: dl.ScheduleRule):
        self.rule = rule

    def apply(self, func, target, tunable):
        try:
            return self.rule.apply(func, target, tunable)
        except Exception:  # noqa: BLE001 - TVM raises assertions, TVMErrors, ValueErrors from its rules
            return None

    def is_target_available(self, target) -> bool:
        return self.rule.is_target_available(target)


def backend(target: tvm.target.Target):
    """TVM's Relax backend module for a GPU target (its passes: dispatch, legalization,
    dataflow lowering, finalization with CUDA graphs for cuda)."""
    return {"cuda": cuda_backend, "rocm": rocm_backend}.get(target.kind.name, gpu_generic)


def schedule_kernels() -> tvm.transform.Pass:
    """dlight's GPU rules, in TVM's order, each guarded: the pass that schedules every
    fused kernel (inside `with target`, as dlight reads the current target)."""
    return dl.ApplyDefaultSchedule(*(GuardedRule(rule) for rule in (
        dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback())))
