"""What a program costs on a target: work per op, per-target constants, loops (DESIGN §6).

Three ingredients, each declared next to what it prices.

1. The work of one op, `OpDef.cost(inputs, outputs, attrs) -> Work(flops, bytes)`,
   attached below per op family (the e-graph layer fills `OpDef.cost` in as egad.ad
   fills `OpDef.vjp`). Shapes are static here: the extractor replaces symbolic dims
   by guesses first. Bytes are every operand read once plus the result written once.
   An op's time at full throughput is `max(flops / flop_rate, bytes / byte_rate)`
   (a roofline); on a dependent chain it takes at least `latency`.

2. Per-target constants, `TARGETS`: throughputs, the host cost of dispatching one
   kernel, the shortest time of a kernel whose input was just produced (latency),
   and the price of a byte kept on a tape. They are first guesses: a benchmark will
   time each op family at a few sizes and fit the rates by least squares, get
   `dispatch` from a chain of empty kernels and `latency` from dependent versus
   independent tiny kernels, and check that the model ranks alternative extractions
   of the LSTM gradient in the measured order (issue 5, item 6; Spearman >= 0.8).

3. A loop (`loop_time`): per trip, the longer of its critical path (the
   loop-carried recurrence, which runs one op after another) and its work (which,
   off the recurrence, can overlap or be batched), plus one dispatch per kernel:

       trips * max(chain, work) + trips * (kernels + 1) * dispatch

   (+1: the loop's own control per trip). `chain` is the maximum mean cycle of the
   state graph (`recurrence_per_trip`): the edge i -> k weighs the longest path, in
   seconds of latency, from state i at the top of the body to state k at its end.
   With `critical_path=False` (the flat model) a trip costs its work alone.

Worked by hand, GPU constants: a loop of T = 64 trips over h: f32[1, 256], with
W: f32[256, 256] and a per-step scale s_t = take(S, t): f32[1, 256],

    h' = (h @ W) * s_t   matmul: 131k flop, 263 kB -> 0.09 us;  mul: 3 kB -> ~0 us
                         chain h -> matmul -> mul: 2 x latency (3 us) = 6 us
                         3 kernels (take, matmul, mul): 3 x 4 us dispatch
                         trip = max(6, 0.09) + 4 x 4 = 22 us; loop = 64 x 22 = 1408 us
    h' = h @ (W * s_t)   the mul now scales W: 524 kB -> 0.17 us, off the chain
                         chain h -> matmul: 1 x 3 us = 3 us
                         trip = max(3, 0.27) + 4 x 4 = 19 us; loop = 1216 us

so the critical-path model prefers the second form (shorter recurrence, the extra
work hidden beside it), while the flat model (trip = work + dispatch: 16.09 us
against 16.27 us) prefers the first. tests/egraph/test_extract.py checks this.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .ir import ops
from .ir.types import TapeType, TensorType


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    flops_per_second: float
    bytes_per_second: float
    dispatch_seconds: float  # host cost of one kernel call through the Relax VM
    latency_seconds: float  # shortest time of a kernel on a dependent chain
    tape_byte_seconds: float  # price of one byte held on a tape (memory pressure)
    # time of one tape push beyond its dispatch and its bytes (egad's runtime keeps tapes
    # in host slabs, in Python: tvm_bridge/runtime.py), per value; a pop hands out a view
    # of its row and costs about what a row read (`take`) does
    tape_push_seconds: float = 0.0
    # host time of one stacked output of a loop (a scan's ys) per run of the loop, beyond
    # its rows: the stack's buffer set up and handed back (tvm_bridge/runtime.py). It is
    # what makes stacking rows for a product after a short inner loop cost more than it saves
    stacked_output_seconds: float = 0.0
    # A matmul of m output rows runs at flops_per_second * m / (m + matmul_half_rows):
    # a register tile spans a few rows and the threads split the rows, so a short
    # matmul (an RNN step's 32 rows) wastes part of both. This is what makes batching
    # a per-step matmul out of its loop pay on a CPU, where the flops are the same.
    matmul_half_rows: float = 0.0


TARGETS = {
    # 2-vCPU shared CPU, TVM llvm kernels with egad's schedules on two threads:
    # benchmarks/calibrate.py measured 100-110 GFlop/s for matmuls of 2048 rows and
    # 85-88 for the 32 rows of an RNN step in a loop body (2026-12-01: half rate at 6-8
    # rows), 57-88 GB/s elementwise and 2.2-4.7 us per small parallel kernel in a loop
    # body (DESIGN §6: 2-4 us per VM call); latency is the pool's fork/join around a
    # parallel kernel.
    # A tape push: 15-19 us a 32x256 float32 value (2026-12-03, benchmarks/calibrate.py),
    # 10-15 us more than its dispatch and bytes are priced; a loop's stacked row takes ~6.
    # A stacked output: 8-20 us per run of its loop beyond its rows (2026-12-05, same benchmark).
    "cpu": Target("cpu", flops_per_second=105e9, bytes_per_second=50e9, dispatch_seconds=3e-6,
                  latency_seconds=1e-6, tape_byte_seconds=1 / 50e9, matmul_half_rows=8.0,
                  tape_push_seconds=10e-6, stacked_output_seconds=12e-6),
    # one datacenter GPU (H100/H200 class, fp32 without tensor cores): launch ~4 us of
    # host time; a dependent kernel waits ~3 us for its predecessor to drain. Short
    # matmuls are priced by the latency term, not by matmul_half_rows (not measured). A stacked
    # output's set-up is host work, priced as on the CPU (not measured on a GPU).
    # A tape push copies the row into a fresh device tensor, freed after the call: on an
    # H100 (2026-12-05, benchmarks/gpu_run.py profile) about 25 us of host time a row,
    # where unpriced the model read GNMT-lite's step as 49 ms (measured 79 ms).
    "gpu": Target("gpu", flops_per_second=50e12, bytes_per_second=3e12, dispatch_seconds=4e-6,
                  latency_seconds=3e-6, tape_byte_seconds=1 / 3e12, stacked_output_seconds=12e-6,
                  tape_push_seconds=20e-6),
}

_TARGET_KINDS = {"llvm": "cpu", "c": "cpu", "cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "metal": "gpu",
                 "vulkan": "gpu", "opencl": "gpu", "webgpu": "gpu", "gpu": "gpu"}


def target_constants(target: str | dict | Target) -> Target:
    """The constants for a TVM target string ("llvm", "cuda", "llvm -mcpu=..."), a TVM
    target dict ({"kind": "cuda", ...}) or a kind."""
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        target = target.get("kind", "")
    kind = _TARGET_KINDS.get(str(target).split()[0].lower())
    if kind is None:
        raise ValueError(f"no cost constants for target {target!r}; known: {', '.join(sorted(_TARGET_KINDS))}")
    return TARGETS[kind]


@dataclasses.dataclass(frozen=True)
class Work:
    flops: float = 0.0
    bytes: float = 0.0
    kernels: int = 1  # dispatches: 0 for ops that lower to no call (a static dim, an identity)
    tape_bytes: float = 0.0  # bytes this op leaves on a tape
    rows: float | None = None  # a matmul's output rows (its rate depends on them), else None
    tape_pushes: int = 0  # values pushed on a tape

    def seconds(self, target: Target) -> float:
        """Time at full throughput (roofline); a matmul's flop rate falls with its rows;
        plus the host time of its tape pushes."""
        rate = target.flops_per_second
        if self.rows is not None and target.matmul_half_rows:
            rate *= self.rows / (self.rows + target.matmul_half_rows)
        return max(self.flops / rate, self.bytes / target.bytes_per_second) \
            + self.tape_pushes * target.tape_push_seconds


def loop_time(trips: float, recurrence: float, work: float, kernels: float,
              critical_path: bool = True) -> tuple[float, float]:
    """A loop's (compute seconds, dispatches): trips x max(recurrence, work) and
    trips x (kernels + 1); its time is compute + dispatches x dispatch_seconds.

        loop_time(64, recurrence=6e-6, work=0.1e-6, kernels=3) == (64 * 6e-6, 256)
    """
    per_trip = max(recurrence, work) if critical_path else work
    return trips * per_trip, trips * (kernels + 1)


def recurrence_per_trip(edges: dict[tuple[int, int], float], n_state: int) -> float:
    """The maximum mean cycle of the state graph (Karp): the time per trip of the
    loop-carried recurrence once it is in steady state. `edges[i, k]` is the longest
    path from state i to next state k within one trip; 0 when nothing recurs.

        recurrence_per_trip({(0, 0): 2.0, (0, 1): 9.0, (1, 1): 1.0}, 2) == 2.0
    """
    if not edges or n_state == 0:
        return 0.0
    minus_inf = -math.inf
    walks = [[0.0] * n_state]  # walks[j][v]: longest walk of exactly j edges ending at v
    for _ in range(n_state):
        previous = walks[-1]
        current = [minus_inf] * n_state
        for (i, k), weight in edges.items():
            if previous[i] > minus_inf:
                current[k] = max(current[k], previous[i] + weight)
        walks.append(current)
    best = minus_inf
    for v in range(n_state):
        if walks[n_state][v] == minus_inf:
            continue
        best = max(best, min((walks[n_state][v] - walks[j][v]) / (n_state - j)
                             for j in range(n_state) if walks[j][v] > minus_inf))
    return max(best, 0.0)


# --- work per op family --------------------------------------------------------------

def concrete(t, size):
    """`t` with every dim replaced by `size(dim)` (an int stays an int; a symbol gets
    its guess); a tape type keeps its tape around the concrete element type."""
    if isinstance(t, TapeType):
        return TapeType(concrete(t.elem, size))
    return TensorType(tuple(size(d) for d in t.shape), t.dtype)


def _elements(t) -> int:
    return math.prod(t.shape) if isinstance(t, TensorType) else 0  # math.prod: extraction calls this 10^5 times


@functools.cache
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def nbytes(t) -> int:
    """Bytes of a tensor type with static shape (0 for anything else)."""
    return _elements(t) * _itemsize(t.dtype) if isinstance(t, TensorType) else 0


def _moved(inputs, outputs) -> int:
    return sum(map(nbytes, inputs)) + sum(map(nbytes, outputs))


def _per_element(flops_per_element: float):
    """Elementwise and reductions: a few flops per element of the larger side."""
    def cost(inputs, outputs, attrs) -> Work:
        elements = max([_elements(t) for t in (*inputs, *outputs)] or [0])
        return Work(flops_per_element * elements, _moved(inputs, outputs))

    return cost


def _rows(t) -> int:
    """A contraction's output rows: every element but those of the last axis."""
    return max(_elements(t) // t.shape[-1], 1) if t.ndim and t.shape[-1] else 1


def _matmul_cost(inputs, outputs, attrs) -> Work:
    a, _ = inputs
    contracted = a.shape[-1] if a.ndim else 1
    return Work(2.0 * _elements(outputs[0]) * contracted, _moved(inputs, outputs), rows=_rows(outputs[0]))


def _einsum_cost(inputs, outputs, attrs) -> Work:
    terms, _ = ops.parse_einsum(attrs["spec"], [t.ndim for t in inputs])
    sizes = {}
    for term, t in zip(terms, inputs):
        for letter, dim in zip(term, t.shape):
            sizes[letter] = max(sizes.get(letter, 1), dim)
    return Work(2.0 * float(np.prod(list(sizes.values()) or [1])), _moved(inputs, outputs), rows=_rows(outputs[0]))


def _copy_cost(inputs, outputs, attrs) -> Work:
    """Data movement only: reads its operands, writes its result."""
    return Work(0.0, _moved(inputs, outputs))


def _gather_cost(inputs, outputs, attrs) -> Work:
    """take: reads what it selects (and the indices), writes it."""
    return Work(0.0, 2 * sum(map(nbytes, outputs)) + sum(map(nbytes, inputs[1:])))


def _slice_cost(inputs, outputs, attrs) -> Work:
    """slice: what take moves, in no kernel of its own: a strided slice is injective, so
    the lowering fuses it into the elementwise op that reads it (FuseOps) or inlines it
    into the matmul that does (tvm_bridge/schedule.py). Priced as a kernel, the slices of
    one fused gate matmul (rules/fusion.py) outweighed the three matmuls they save."""
    return dataclasses.replace(_gather_cost(inputs, outputs, attrs), kernels=0)


def _scatter_cost(inputs, outputs, attrs) -> Work:
    """update/index_add: a copy of the operand, then the rows written."""
    return Work(sum(map(_elements, inputs[2:])), 2 * nbytes(inputs[0]) + 2 * sum(map(nbytes, inputs[1:])))


def _free(inputs, outputs, attrs) -> Work:
    return Work(0.0, 0.0, kernels=0)


def _view(inputs, outputs, attrs) -> Work:
    """A reshape is metadata in the Relax VM: one call, no data moved."""
    return Work(0.0, 0.0)


def _creation_cost(inputs, outputs, attrs) -> Work:
    return Work(0.0, sum(map(nbytes, outputs)))


def _top_k_cost(inputs, outputs, attrs) -> Work:
    (x,) = inputs
    return Work(_elements(x) * max(math.log2(max(attrs["k"], 2)), 1.0), _moved(inputs, outputs))


def _tape_alloc_cost(inputs, outputs, attrs) -> Work:
    return Work(0.0, 0.0)


def _tape_push_cost(inputs, outputs, attrs) -> Work:
    value = inputs[1]
    return Work(0.0, 2 * nbytes(value), tape_bytes=nbytes(value), tape_pushes=1)


def _tape_pop_cost(inputs, outputs, attrs) -> Work:
    elem = inputs[0].elem if isinstance(inputs[0], TapeType) else outputs[0]
    return Work(0.0, 2 * nbytes(elem))


# transcendental functions cost about ten flops an element on either target
_TRANSCENDENTAL = {"exp", "expm1", "log", "log1p", "tanh", "sin", "cos", "sigmoid", "pow", "sqrt"}
_COSTS = {
    "matmul": _matmul_cost, "einsum": _einsum_cost,
    "transpose": _copy_cost, "broadcast_to": _copy_cost, "concat": _copy_cost, "reshape": _view,
    "slice": _slice_cost, "take": _gather_cost, "update": _scatter_cost, "index_add": _scatter_cost,
    "dim": _free, "stop_gradient": _free, "const": _free,
    "full": _creation_cost, "iota": _creation_cost,
    "softmax": _per_element(5.0), "log_softmax": _per_element(5.0), "logsumexp": _per_element(4.0),
    "top_k": _top_k_cost,
    "tape_alloc": _tape_alloc_cost, "tape_push": _tape_push_cost, "tape_pop": _tape_pop_cost,
}

for _name, _op in ops.OPS.items():
    if _op.family == "control":
        continue  # priced by the extractor from their regions (loop_seconds)
    if _name in _COSTS:
        _op.cost = _COSTS[_name]
    elif _op.family in ("elementwise", "reduction", "misc"):
        _op.cost = _per_element(10.0 if _name in _TRANSCENDENTAL else 1.0)
    else:
        raise AssertionError(f"op {_name} has no cost")
