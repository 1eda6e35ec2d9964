"""The kernels egad's Relax pipeline makes of a program, for tests that look inside
them (tvm_bridge/schedule.py's rules, tvm_bridge/fusion.py's passes)."""
from __future__ import annotations

import tvm
from tvm import tirx

from egad.tvm_bridge import lower, schedule
from egad.tvm_bridge.targets import resolve


def pipeline_prim_funcs(program, target=None) -> dict:
    """The PrimFuncs of `program`'s module after egad's Relax pipeline for `target` (a
    tvm.target.Target; the host CPU by default), by name."""
    module = pipeline_module(program, target)
    return {gv.name_hint: func for gv, func in module.functions_items() if isinstance(func, tirx.PrimFunc)}


def pipeline_module(program, target=None) -> tvm.IRModule:
    """`program`'s module after egad's Relax pipeline for `target` (the host CPU by default)."""
    target = target or resolve("llvm").tvm_target
    with tvm.target.Target(target):
        return schedule.relax_pipeline(target)(lower(program))
