"""The gradient-critical path of a program, in the user's terms (DESIGN §6).

Each loop's carried state must flow from one trip to the next in order: the longest
chain of dependent kernels from a carried value at the top of the body to its own
next value at its end is the loop's recurrence, the part no rewrite can parallelize. The
extractor prices it (egad/extract.py); this module *describes* it on the program
that was extracted, so that `Optimized.report()` can say which of the user's lines
the time goes through:

    loop at lstm.py:33 (for, ~64 trips): 1.4 us chain per trip against 31 us of work
      h -> matmul (lstm.py:24) -> add (lstm.py:24) -> slice -> sigmoid (lstm.py:25) -> ...

A kernel on the chain costs the longer of its roofline time and the target's latency
(cost_model.py); a nested loop or branch on the chain costs the work of its body. A
symbolic dim counts as `guess` (the extractor's default trip guess).
"""
from __future__ import annotations

import dataclasses

from .cost_model import Target, concrete, target_constants
from .ir import ops
from .ir.program import Binding, Program, Region, walk_bindings
from .ir.types import TapeType
from .source import SourceLoc


@dataclasses.dataclass(frozen=True)
class LoopPath:
    """One loop's recurrence: the ops of its longest carried chain, in order."""

    op: str  # "for" or "while"
    reverse: bool  # the counter counts down: AD's adjoint of a forward loop, or egad.scan(reverse=True)
    loc: SourceLoc  # where the loop was written
    steps: tuple[tuple[str, SourceLoc], ...]  # (op, its source line) along the chain
    chain_seconds: float  # latency of the chain, per trip
    work_seconds: float  # all the body's kernels, per trip (roofline, no dispatch)
    kernels: int  # dispatches per trip

    @property
    def latency_bound(self) -> bool:
        return self.chain_seconds >= self.work_seconds

    def __str__(self) -> str:
        kind = "reverse for" if self.reverse else self.op
        head = (f"loop at {self.loc} ({kind}): {self.chain_seconds * 1e6:.2f} us chain of {len(self.steps)} kernels "
                f"per trip against {self.work_seconds * 1e6:.2f} us of work in {self.kernels} kernels "
                f"({'latency' if self.latency_bound else 'throughput'}-bound)")
        chain = " -> ".join(f"{op} ({loc})" if loc.line else op for op, loc in self.steps)
        return f"{head}\n      {chain or '(no carried chain)'}"


def critical_paths(program: Program, target: str | Target = "cpu", guess: int = 64) -> list[LoopPath]:
    """The recurrence of every loop in `program`, outer loops first."""
    constants = target_constants(target)
    paths = []
    for binding in walk_bindings(program.region):
        if binding.op in ("for", "while"):
            paths.append(_loop_path(binding, constants, guess))
    return paths


def _loop_path(loop: Binding, target: Target, guess: int) -> LoopPath:
    """The longest chain from a carried value to its own next value (a state's chain to
    another state's is no recurrence unless it comes back); tapes are no recurrence
    either: a push or pop reads the tape's handle, not its values."""
    n_state = loop.attrs["n_state"]
    body = loop.regions[-1]
    first_state = 1 if loop.op == "for" else 0  # a for body's first param is the counter
    state = body.params[first_state:first_state + n_state]
    costs = {id(binding): _cost(binding, target, guess) for binding in body.bindings}
    work, kernels = sum(seconds for seconds, _ in costs.values()), sum(dispatches for _, dispatches in costs.values())
    chains = [_chain(body, carried, result, costs, target) for carried, result in zip(state, body.results[:n_state])
              if not isinstance(carried.type, TapeType)]
    chain_seconds, steps = max((c for c in chains if c is not None), default=(0.0, ()), key=lambda c: c[0])
    return LoopPath(loop.op, bool(loop.attrs.get("reverse")), loop.loc, steps, chain_seconds, work, kernels)


def _chain(body: Region, carried, result, costs: dict, target: Target) -> tuple[float, tuple] | None:
    """(latency, steps) of the longest chain in `body` from `carried` to `result`, or None;
    `costs`: each binding's (seconds, dispatches) by id."""
    depth: dict[int, float] = {carried.uid: 0.0}
    came_from: dict[int, tuple[Binding, int]] = {}
    for binding in body.bindings:
        reached = [(depth[v.uid], v.uid) for v in binding.inputs if v.uid in depth]
        if not reached:
            continue
        seconds, dispatches = costs[id(binding)]
        start, source = max(reached)
        for out in binding.outputs:
            depth[out.uid] = start + (max(seconds, target.latency_seconds) if dispatches else seconds)
            came_from[out.uid] = (binding, source)
    if result.uid not in depth:
        return None
    steps, uid = [], result.uid
    while uid in came_from:
        binding, uid = came_from[uid]
        steps.append((binding.op, binding.loc))
    return depth[result.uid], tuple(reversed(steps))


def _cost(binding: Binding, target: Target, guess: int) -> tuple[float, int]:
    """(roofline seconds, dispatches) of one binding; a control op: its bodies' sum."""
    if binding.regions:
        costs = [_region_cost(region, target, guess) for region in binding.regions]
        return sum(seconds for seconds, _ in costs), sum(dispatches for _, dispatches in costs)

    def size(dim):
        return dim if isinstance(dim, int) else guess

    work = ops.OPS[binding.op].cost([concrete(v.type, size) for v in binding.inputs],
                                    [concrete(v.type, size) for v in binding.outputs], binding.attrs)
    return work.seconds(target), work.kernels


def region_seconds(region: Region, target: str | Target = "cpu", guess: int = 64) -> float:
    """A rough time of one run of `region` on `target`: every op at full throughput plus
    its dispatches, a control op's regions once each (symbolic dims taken as `guess`)."""
    target = target_constants(target)
    seconds, dispatches = _region_cost(region, target, guess)
    return seconds + dispatches * target.dispatch_seconds


def _region_cost(region: Region, target: Target, guess: int) -> tuple[float, int]:
    costs = [_cost(binding, target, guess) for binding in region.bindings]
    return sum(seconds for seconds, _ in costs), sum(dispatches for _, dispatches in costs)
