"""Lowering of egad programs to TVM Relax, installed as `egad.tvm_bridge`.

The only layer that imports TVM (DESIGN §2, §7). `build(program, target)` lowers a
Program (primal or gradient) to a Relax IRModule (tvm_bridge/lower.py; one file of
op lowerings per op family), builds it and returns a callable taking the program's
arguments. Loops run in a driver (tvm_bridge/runtime.py).

Threads: TVM's CPU thread pool defaults to half the hardware threads, which is one
thread on a 2-vCPU machine, where every parallel kernel then pays the pool's
fork/join (~12 us) for nothing: the LSTM gradient of benchmarks/lstm_lm.py (T=64)
took 167 ms with one thread and 90 ms with two. Unless TVM_NUM_THREADS is set,
egad gives the pool every CPU this process may run on.
"""
import os

if hasattr(os, "sched_getaffinity"):
    os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

from .build import Compiled, build, build_all  # noqa: E402
from .lower import lower

__all__ = ["Compiled", "build", "build_all", "lower"]
