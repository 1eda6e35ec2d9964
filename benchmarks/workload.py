"""The workload interface `benchmarks/suite.py` runs, and the helpers every workload
module shares.

A workload module (`benchmarks/lstm_lm.py`, `benchmarks/gnmt_lite.py`, ...) defines:

- `NAME`, and `CASES`: case name -> config (sizes);
- `arguments(case, seed=0) -> tuple` of numpy arrays (float32; integers for lengths
  and tokens), the same for every system;
- `WRT`: case -> tuple of the argument positions differentiated, or `wrt(case)`;
- `loss(case)`: an egad-traceable scalar loss of those arguments, and
  `reference_loss(case)`: the same in plain numpy;
- `jax_loss(case)` with `lax.scan`/`lax.cond`/`lax.while_loop`, `jax_unrolled_loss(case)`
  with Python loops, `torch_loss(case)` in eager PyTorch (what `torch.compile` wraps);
  each imports its framework inside. A peer that cannot express or differentiate a
  case raises (NotImplementedError with the reason, or the framework's own error),
  and the suite records the message as the result.

    module = load("lstm_lm")
    args = module.arguments("T16"); positions = wrt_of(module, "T16")
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

# The workloads of issue 6, in the order the suite runs and reports them.
WORKLOADS = ("lstm_lm", "gnmt_lite", "while_loops", "moe_loop", "nested")


def load(name: str):
    """The workload module `name`: a name in WORKLOADS (benchmarks.<name>) or a dotted
    module path (e.g. a test's own tiny workload)."""
    return importlib.import_module(name if "." in name else f"benchmarks.{name}")


def wrt_of(module, case: str) -> tuple[int, ...]:
    """The argument positions a case differentiates (`wrt(case)` or `WRT[case]`)."""
    if hasattr(module, "wrt"):
        return tuple(module.wrt(case))
    return tuple(module.WRT[case])


def check_case(module_name: str, cases: dict, case: str) -> str:
    if case not in cases:
        raise ValueError(f"{module_name} has no case {case!r}; its cases are {sorted(cases)}")
    return case


def case_config(module_name: str, cases: dict, case) -> dict:
    """A case's config: `cases[case]` for a case name, or `case` itself for a config
    dict whose "kind" names a case (how tests shrink a workload's sizes)."""
    if isinstance(case, dict):
        if case.get("kind") not in cases:
            raise ValueError(f"a {module_name} config needs a 'kind' in {sorted(cases)}, got {case.get('kind')!r}")
        return case
    if case not in cases:
        raise ValueError(f"unknown {module_name} case {case!r}; cases: {sorted(cases)}")
    return cases[case]


def case_or_call(for_case):
    """Decorate a workload's own loss so that it also serves the suite's interface:
    `loss(*arrays)` computes the loss as before, `loss(case_name)` returns
    `for_case(case_name)`, the loss the suite runs for that case."""
    def decorate(fn):
        @functools.wraps(fn)
        def either(*args, **kwargs):
            if len(args) == 1 and isinstance(args[0], str) and not kwargs:
                return for_case(args[0])
            return fn(*args, **kwargs)
        return either
    return decorate


def as_float64(args) -> tuple:
    """The arguments with every floating array in float64 (integers kept), for the
    reference gradient."""
    return tuple(np.asarray(a, np.float64) if np.issubdtype(np.asarray(a).dtype, np.floating) else a for a in args)
