"""egad's Relax pipeline for GPU targets (cuda, rocm, metal, vulkan, opencl, webgpu):
TVM's own pipeline for the target with the changes egad makes on the CPU too, and
its dlight schedules guarded.

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
from tvm import relax
from tvm.relax.backend.cuda import pipeline as cuda_backend
from tvm.relax.backend.gpu_generic import pipeline as gpu_generic
from tvm.relax.backend.rocm import pipeline as rocm_backend
from tvm.s_tir import dlight as dl

from . import fusion

GPU_KINDS = ("cuda", "rocm", "metal", "vulkan", "opencl", "webgpu")


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


def schedule_rules() -> list:
    """TVM's GPU rules, in TVM's order, each guarded."""
    return [GuardedRule(rule) for rule in (dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                           dl.gpu.GeneralReduction(), dl.gpu.Fallback())]


def gpu_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """The Relax pipeline for a GPU `target`: fusion, guarded dlight schedules, then
    the backend's own dataflow lowering and finalization (CUDA graphs included)."""
    backend = {"cuda": cuda_backend, "rocm": rocm_backend}.get(target.kind.name, gpu_generic)

    @tvm.transform.module_pass(opt_level=0, name="egad.GPUPipeline")
    def pipeline(mod: tvm.IRModule, _context) -> tvm.IRModule:
        with target:
            passes = (fusion.fusion_passes(target, backend)
                      + [dl.ApplyDefaultSchedule(*schedule_rules())]
                      + backend.dataflow_lower_passes(target)
                      + backend.finalize_passes(target))
            return tvm.transform.Sequential(passes)(mod)

    return pipeline
