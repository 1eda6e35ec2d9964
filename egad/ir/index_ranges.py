"""Integer value ranges of a program's values, to prove traced indices in range.

The interpreter raises `IndexOutOfRangeError` on an index out of range; compiled code
must too, and a check costs a small kernel wherever an index is read (a loop body
reads its rows at its counter once a trip). Most indices are provably in range
without running anything: a loop's counter over `[0, T)` reading a table of T rows,
an `argmax`'s result reading the axis it ranges over, constants. `integer_ranges`
bounds every integer value it can from constants, loop bounds, argmax/top_k and
arithmetic on those; `index_plan` says, per index op, whether its index is proved in
range, proved within numpy's negative wrap, or must be checked when it runs.

A value's interval holds every element it can take in any run: a loop's counter
ranges over [lo, hi - 1] for the smallest lo and largest hi its bounds can take; an
empty interval (lo > hi) means the value is never computed (a body whose loop runs
no trip). Bounds are Python ints; an interval that leaves its dtype's range (where
int arithmetic could wrap around) is unknown, as are program inputs, loop state and
anything computed from floats.
"""
from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Iterator

import numpy as np

from .program import Binding, Program, Region, Var

INDEX_OPS = ("take", "update", "index_add")


@dataclasses.dataclass(frozen=True)
class Interval:
    """Every integer in [lo, hi]; empty when lo > hi."""

    lo: int
    hi: int

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def within(self, lo: int, hi: int) -> bool:
        return self.empty or (lo <= self.lo and self.hi <= hi)

    def union(self, other: "Interval") -> "Interval":
        if self.empty:
            return other
        if other.empty:
            return self
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))


class IndexPlan(enum.Enum):
    """What compiled code does with an index op's index before reading rows."""

    IN_RANGE = "in range"  # proved in [0, n): read as it is
    WRAPS = "wraps"  # proved in [-n, n): numpy's wrap of negatives, nothing to check
    CHECK = "check"  # not proved: checked where it runs, out of range raises


def integer_ranges(program: Program) -> dict[int, Interval]:
    """var uid -> Interval for every integer value of `program` (sub-regions included)
    whose range can be bounded without running it."""
    ranges: dict[int, Interval] = {}
    _region(program.region, ranges)
    return ranges


def index_plan(binding: Binding, ranges: dict[int, Interval]) -> IndexPlan:
    """The plan for index op `binding` (take, update, index_add): its index's interval
    against the size of the axis it indexes (a symbolic size proves nothing)."""
    x, index = binding.inputs[:2]
    size = x.type.shape[binding.attrs.get("axis", 0)]
    interval = ranges.get(index.uid)
    if interval is None or not isinstance(size, int):
        return IndexPlan.CHECK
    if interval.within(0, size - 1):
        return IndexPlan.IN_RANGE
    if interval.within(-size, size - 1):
        return IndexPlan.WRAPS
    return IndexPlan.CHECK


@dataclasses.dataclass(frozen=True)
class HoistedCheck:
    """An index check run once before a `for` loop instead of once a trip: the loop reads
    every row of `table` (an input of the loop, at its counter, from 0 over all of
    table's rows), and `site` (a take in the body, not under a branch) reads rows of an
    axis of `size` at each such row. Checking all of `table`'s elements against `size`
    before the loop finds the same out-of-range index the trips would."""

    table: Var  # an input of the loop binding
    size: int
    site: Binding


def hoisted_checks(program: Program, ranges: dict[int, Interval]) -> dict[int, list[HoistedCheck]]:
    """id(for binding) -> the checks of its body's index ops that run once, before it.
    The body's index ops named there need no check of their own (their index is then
    known within [-size, size))."""
    hoisted: dict[int, list[HoistedCheck]] = {}
    for binding in _bindings(program.region):
        if binding.op == "for":
            checks = _hoistable(binding, ranges)
            if checks:
                hoisted[id(binding)] = checks
    return hoisted


def _hoistable(loop: Binding, ranges: dict) -> list[HoistedCheck]:
    n_state, (body,) = loop.attrs["n_state"], loop.regions
    lo, hi = ranges.get(loop.inputs[0].uid), ranges.get(loop.inputs[1].uid)
    if lo != Interval(0, 0) or hi is None or hi.lo != hi.hi:
        return []
    counter, fed_by = body.params[0], dict(zip((p.uid for p in body.params[1 + n_state:]), loop.inputs[2 + n_state:]))
    rows_read = {}  # body var uid -> the loop input whose every row it is, one a trip
    for binding in body.bindings:
        x, at = (binding.inputs + (None, None))[:2]
        if binding.op == "take" and binding.attrs["axis"] == 0 and at is counter and x.uid in fed_by \
                and x.type.shape[0] == hi.hi:
            rows_read[binding.outputs[0].uid] = fed_by[x.uid]
    checks = []
    for binding in body.bindings:
        if binding.op != "take" or binding.inputs[1].uid not in rows_read:
            continue
        size = binding.inputs[0].type.shape[binding.attrs["axis"]]
        if isinstance(size, int) and index_plan(binding, ranges) is IndexPlan.CHECK:
            checks.append(HoistedCheck(rows_read[binding.inputs[1].uid], size, binding))
    return checks


def _bindings(region: Region) -> Iterator[Binding]:
    for binding in region.bindings:
        yield binding
        for sub in binding.regions:
            yield from _bindings(sub)


def check_summary(program: Program) -> str:
    """How compiled code handles `program`'s indices, for reports: e.g. "12 proved in
    range, 1 checked once before its loop, 2 checked where they run"."""
    ranges = integer_ranges(program)
    before = {id(check.site) for checks in hoisted_checks(program, ranges).values() for check in checks}
    counts = collections.Counter("before" if id(binding) in before else index_plan(binding, ranges).value
                                 for binding in index_sites(program))
    labels = {"in range": "proved in range", "wraps": "proved in range after wrapping negatives",
              "before": "checked once before their loop", "check": "checked where they run"}
    return ", ".join(f"{counts[key]} {label}" for key, label in labels.items() if counts[key]) or "none"


def index_sites(program: Program) -> list[Binding]:
    """The index ops of `program` in a fixed walk order (regions depth first): a
    compiled check names its op by position here, the same in every program of one
    structure (built modules are shared by structure: tvm_bridge/cache.py)."""
    return [binding for binding in _bindings(program.region) if binding.op in INDEX_OPS]


# --- the analysis ---------------------------------------------------------------------------

def _region(region: Region, ranges: dict) -> None:
    for binding in region.bindings:
        if binding.regions:
            _control(binding, ranges)
        else:
            _record(binding.outputs[0], _op_range(binding, ranges), ranges)
            if binding.op == "top_k":  # (values, indices): the indices range over the last axis
                _record(binding.outputs[1], _positions(binding.inputs[0].type.shape[-1]), ranges)


def _record(var, interval: Interval | None, ranges: dict) -> None:
    dtype = var.type.dtype
    if interval is None or not (dtype.startswith(("int", "uint")) or dtype == "bool"):
        return
    if dtype != "bool":
        limits = np.iinfo(dtype)
        if not interval.within(int(limits.min), int(limits.max)):
            return  # the arithmetic may have wrapped around
    ranges[var.uid] = interval


def _feed(params, inputs, ranges: dict) -> None:
    for param, fed in zip(params, inputs):
        if fed.uid in ranges:
            ranges[param.uid] = ranges[fed.uid]


def _control(binding: Binding, ranges: dict) -> None:
    if binding.op == "for":
        n_state, (body,) = binding.attrs["n_state"], binding.regions
        lo, hi = ranges.get(binding.inputs[0].uid), ranges.get(binding.inputs[1].uid)
        if lo is not None and hi is not None:
            ranges[body.params[0].uid] = Interval(lo.lo, hi.hi - 1)
        _feed(body.params[1 + n_state:], binding.inputs[2 + n_state:], ranges)
        _region(body, ranges)
        for output, y in zip(binding.outputs[n_state:], body.results[n_state:]):  # stacked per-step values
            _record(output, ranges.get(y.uid), ranges)
    elif binding.op == "while":
        n_state = binding.attrs["n_state"]
        for sub in binding.regions:
            _feed(sub.params[n_state:], binding.inputs[n_state:], ranges)
            _region(sub, ranges)
    else:  # if, switch: either branch may run
        for sub in binding.regions:
            _feed(sub.params, binding.inputs[1:], ranges)
            _region(sub, ranges)
        for k, output in enumerate(binding.outputs):
            results = [ranges.get(sub.results[k].uid) for sub in binding.regions]
            if all(r is not None for r in results):
                _record(output, _union(results), ranges)


def _union(intervals) -> Interval:
    out = Interval(1, 0)
    for interval in intervals:
        out = out.union(interval)
    return out


def _positions(size) -> Interval | None:
    """Positions along an axis of `size`: [0, size - 1], unknown for a symbolic size."""
    return Interval(0, size - 1) if isinstance(size, int) else None


# ops whose output's elements are some of their (first) input's elements
_PASS_FIRST = frozenset({"transpose", "reshape", "broadcast_to", "slice", "stop_gradient", "take",
                         "reduce_max", "reduce_min"})


def _op_range(binding: Binding, ranges: dict) -> Interval | None:
    op, attrs = binding.op, binding.attrs
    args = [ranges.get(v.uid) for v in binding.inputs]
    if op == "const":
        value = np.asarray(attrs["value"])
        if value.dtype.kind not in "biu":
            return None
        return Interval(int(value.min()), int(value.max())) if value.size else Interval(1, 0)
    if op == "full":
        value = attrs["value"]
        return Interval(int(value), int(value)) if float(value).is_integer() else None
    if op == "iota":
        return _positions(attrs["shape"][attrs["axis"]])
    if op == "argmax":
        return _positions(binding.inputs[0].type.shape[attrs["axis"]])
    if op == "dim":
        size = binding.inputs[0].type.shape[attrs["axis"]]
        return Interval(size, size) if isinstance(size, int) else None
    if op == "cast":
        if binding.inputs[0].type.dtype == "bool":
            return Interval(0, 1)
        return args[0] if binding.inputs[0].type.dtype.startswith(("int", "uint")) else None
    if op in _PASS_FIRST:
        return args[0]
    if op in ("concat", "select", "update"):  # elements of the concatenated, selected or written values
        parts = args if op == "concat" else args[1:] if op == "select" else [args[0], args[2]]
        return _union(parts) if all(p is not None for p in parts) else None
    if op == "mod" and args[1] is not None and args[1].lo > 0:  # numpy's sign follows the divisor
        return Interval(0, args[1].hi - 1) if not (args[0] is not None and args[0].empty) else Interval(1, 0)
    if any(a is None for a in args):
        return None
    return _arithmetic(op, args)


def _arithmetic(op: str, args: list[Interval]) -> Interval | None:
    if any(a.empty for a in args):
        return Interval(1, 0)
    if op == "neg":
        (a,) = args
        return Interval(-a.hi, -a.lo)
    if op == "abs":
        (a,) = args
        return Interval(0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi)), max(abs(a.lo), abs(a.hi)))
    if op == "sign":
        return Interval(-1, 1)
    if len(args) != 2:
        return None
    a, b = args
    if op == "add":
        return Interval(a.lo + b.lo, a.hi + b.hi)
    if op == "sub":
        return Interval(a.lo - b.hi, a.hi - b.lo)
    if op == "mul":
        corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return Interval(min(corners), max(corners))
    if op == "maximum":
        return Interval(max(a.lo, b.lo), max(a.hi, b.hi))
    if op == "minimum":
        return Interval(min(a.lo, b.lo), min(a.hi, b.hi))
    if op == "floordiv" and b.lo > 0:
        corners = [x // y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return Interval(min(corners), max(corners))
    return None
