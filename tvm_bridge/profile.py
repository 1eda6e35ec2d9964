"""Where a compiled call's time goes: every call the Relax VM makes (a kernel, a loop
driver, a tape operation, a VM builtin such as an allocation), timed through the VM's
instrument hook and grouped by the loop it ran in. `Compiled.profile` and
`Optimized.profile` return a `Profile`; `print(profile)` shows the table.

    optimized = egad.optimize(program, wrt=(0,))
    profile = optimized.profile(*args)  # calls it a few times, with and without the hook
    print(profile)                      # the calls that took longest, by self time
    profile.seconds_by_kind()           # {"kernel": ..., "loop driver": ..., "vm": ...}

Times are self times: a loop driver's row is the driver's own work (Python, between
trips), not its body's kernels, which have rows of their own under the loop's label.
The hook is Python, entered before and after each call, and costs a few microseconds
a call, so a profiled call takes longer than a plain one (`profiled_seconds` against
`call_seconds`). Its own time is left out of every row. What it cannot time of itself
(TVM converting a call's arguments for it, before it starts) would land in the row of
the callee (the entry after a call) or the caller (the entry before): the profiled
call's time less the plain call's and the hook's own is shared out evenly over the
entries and taken off those rows (`unseen_hook_seconds`, per entry). The rows are
then close to a plain call's, not exact: the share is even, and a call of a few
microseconds is the one most off (where all of a program's calls are that short, some
rows come out near zero: time such a program whole). On a GPU every call is followed
by a device synchronization, so a kernel's time is its own and not its launch.
"""
from __future__ import annotations

import collections
import dataclasses
import gc
import statistics
import time

# Nothing of egad at import: benchmarks/gpu_run.py loads this file alone, by its path, on
# a GPU machine with TVM's runtime and numpy but no egad install.
LOOP_DRIVERS = ("egad.for_loop", "egad.while_loop")
_now = time.perf_counter  # the recorder's clock (tests set their own)


@dataclasses.dataclass(frozen=True)
class ProfileRow:
    """One callee at one place: `where` is "main" or the label of the loop it ran in
    ("loop 1", "loop 1.2" for the second loop inside loop 1's body); `calls` and
    `seconds` (self time) are per call of the program."""
    name: str
    kind: str  # "kernel", "function" (a branch), "loop driver", "runtime" (egad's tapes, checks), "vm" (builtins)
    where: str
    calls: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class ProfileLoop:
    """A loop the call ran: its driver, where it ran, how often it was entered and (a
    `for` loop) its trips, both per call of the program."""
    label: str
    driver: str
    where: str
    entered: float
    trips: float | None


@dataclasses.dataclass(frozen=True)
class Profile:
    """A call's time by callee and place (`rows`), its loops, and the median wall time of
    a call with and without the timing hook."""
    rows: tuple[ProfileRow, ...]  # by self time, longest first
    loops: tuple[ProfileLoop, ...]
    call_seconds: float  # median wall time of a call without the hook
    profiled_seconds: float  # median wall time of a call with it
    calls: int  # profiled calls the rows are averaged over
    unseen_hook_seconds: float = 0.0  # what each entry of the hook cost that it could not time (taken off the rows)

    def seconds_by_kind(self) -> dict[str, float]:
        """Self time per call by kind of callee."""
        totals: dict[str, float] = collections.defaultdict(float)
        for row in self.rows:
            totals[row.kind] += row.seconds
        return dict(totals)

    def lines(self, top: int = 25, text_table=None) -> list[str]:
        """The header (times, loops, self time by kind) and the `top` longest rows, laid
        out by `text_table` (egad/text_table.py's function; benchmarks/gpu_run.py, where
        egad is not installed, passes it loaded from its file)."""
        if text_table is None:
            from egad.text_table import text_table

        attributed = sum(row.seconds for row in self.rows)
        lines = [(f"a call: {self.call_seconds * 1e3:.3f} ms; profiled: {self.profiled_seconds * 1e3:.3f} ms "
                  f"(the hook's cost included), median of {self.calls} calls; the rows are self times less "
                  f"{self.unseen_hook_seconds * 1e6:.2f} us an entry of the hook that it could not time")]
        for loop in self.loops:
            trips = "" if loop.trips is None else f", {_number(loop.trips / max(loop.entered, 1e-12))} trips each"
            lines.append(f"{loop.label}: {loop.driver} in {loop.where}, entered {_number(loop.entered)}x a call"
                         + trips)
        kinds = ", ".join(f"{kind} {seconds * 1e3:.3f} ms" for kind, seconds in
                          sorted(self.seconds_by_kind().items(), key=lambda kv: -kv[1]))
        lines += [f"self time by kind: {kinds}",
                  (f"in no row (the hook, the VM's own dispatch in main, the call's arguments and results): "
                   f"{max(self.profiled_seconds - attributed, 0.0) * 1e3:.3f} ms; % below: of a plain call")]
        shown = self.rows[:top]
        table = [("ms/call", "%", "calls", "us each", "kind", "where", "name")]
        for row in shown:
            table.append((f"{row.seconds * 1e3:.3f}", f"{100 * row.seconds / self.call_seconds:.1f}",
                          _number(row.calls), f"{row.seconds / row.calls * 1e6:.1f}", row.kind, row.where,
                          _shortened(row.name)))
        lines += text_table(table, right=(0, 1, 2, 3))
        if len(self.rows) > len(shown):
            rest = self.rows[len(shown):]
            lines.append(f"... {len(rest)} more, {sum(row.seconds for row in rest) * 1e3:.3f} ms in all")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _shortened(name: str, at_most: int = 72) -> str:
    """A fused kernel's name (each op it fused, in order: some run to hundreds of
    characters) cut for the table; the row keeps it whole."""
    return name if len(name) <= at_most else name[:at_most - 3] + "..."


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def kind_of(symbol: str, func=None) -> str:
    """What a callee the VM names is: egad's loop drivers, egad's other runtime functions
    (tapes, host checks), the VM's builtins, a Relax function of the build (a closure:
    a branch of a cond or switch, whose own calls have rows of their own), or a kernel
    (a PrimFunc of the build)."""
    if type(func).__name__ == "Closure":
        return "function"
    if symbol in LOOP_DRIVERS:
        return "loop driver"
    if symbol.startswith("egad."):
        return "runtime"
    if symbol.startswith(("vm.builtin.", "runtime.")):
        return "vm"
    return "kernel"


@dataclasses.dataclass
class _Frame:
    label: str  # where the calls made inside this frame ran: "main" or its loop's label
    started: float = 0.0
    nested: float = 0.0  # time of the instrumented calls made inside this one
    children: int = 0  # instrumented calls made inside this one


class Recorder:
    """The VM's instrument function (`relax.VirtualMachine.set_instrument`): self time
    and calls per (where, callee), and the loops entered, summed over calls."""

    def __init__(self, sync=None):
        self.sync = sync  # a device's synchronize, for devices that run kernels asynchronously
        self.reset()

    def reset(self) -> None:
        """Forget every call recorded so far."""
        self.seconds: dict[tuple, float] = collections.defaultdict(float)
        self.calls: collections.Counter = collections.Counter()
        self.kinds: dict[tuple, str] = {}  # (where, callee) -> its kind
        self.children: collections.Counter = collections.Counter()  # calls made inside each (where, callee)
        self.hook_seconds = 0.0  # the hook's own time, as it measured it
        self.loops: dict[str, list] = {}  # label -> [driver, where, entered, trips or None]
        self.labels: dict[tuple, str] = {}  # (where, the body's handle) -> label
        self.start_call()

    def start_call(self) -> None:
        """Before each call of the program (a call that raised leaves frames behind)."""
        self.stack = [_Frame("main")]

    def __call__(self, func, symbol, before, result, *args) -> int:
        entered = _now()
        if self.sync is not None:
            self.sync()  # before a call: earlier work done; after it: the call's own work done
        now = _now()
        parent = self.stack[-1] if before else self.stack[-2]
        if before:
            label = parent.label
            if symbol in LOOP_DRIVERS:
                label = self._entered(symbol, parent.label, args)
            if (parent.label, symbol) not in self.kinds:
                self.kinds[parent.label, symbol] = kind_of(symbol, func)
            frame = _Frame(label)
            self.stack.append(frame)
            parent.children += 1
            frame.started = _now()
            parent.nested += frame.started - entered  # this hook's own time is not the caller's
            self.hook_seconds += frame.started - entered
        else:
            frame = self.stack.pop()
            total = now - frame.started
            self.seconds[parent.label, symbol] += total - frame.nested
            self.calls[parent.label, symbol] += 1
            self.children[parent.label, symbol] += frame.children
            left = _now()
            parent.nested += total + (left - now)
            self.hook_seconds += (now - entered if self.sync is None else 0.0) + (left - now)
        return 0  # VMInstrumentReturnKind: run the call as usual

    def _entered(self, driver: str, where: str, args) -> str:
        """The label of the loop a driver call runs, counted as entered once more. A loop
        is known by where it runs and its body (a closure the VM passes the same each
        time): numbered in the order first seen there, "loop 2" in main, "loop 2.1"
        inside loop 2's body, so one label per loop however often its parent runs it."""
        if driver == "egad.for_loop":  # (invoke, body, lo, hi, ...): see runtime._for_loop
            body, trips = args[1], max(_integer(args[3]) - _integer(args[2]), 0)
        else:  # (invoke, cond, body, ...): runtime._while_loop
            body, trips = args[2], None
        key = (where, body.__chandle__())
        label = self.labels.get(key)
        if label is None:
            number = sum(seen_where == where for seen_where, _ in self.labels) + 1
            label = self.labels[key] = f"loop {number}" if where == "main" else f"{where}.{number}"
            self.loops[label] = [driver, where, 0, None if trips is None else 0]
        entry = self.loops[label]
        entry[2] += 1
        if trips is not None:
            entry[3] += trips
        return label

    def profile(self, calls: int, call_seconds: float, profiled_seconds: float) -> Profile:
        """The rows per call of the program. What the hook cost that it could not time
        itself (TVM converting each call's arguments for it, before it starts) is the
        profiled call's time less the plain call's and the hook's own: it is shared out
        evenly over the hook's entries and taken off the rows it fell in, the callee's
        for the entry after a call, the caller's for the entry before."""
        entries = 2 * sum(self.calls.values()) / calls
        unseen = max(profiled_seconds - call_seconds - self.hook_seconds / calls, 0.0)
        per_entry = unseen / entries if entries else 0.0
        rows = []
        for (where, symbol), count in self.calls.items():
            measured = self.seconds[where, symbol] / calls
            share = per_entry * (count + self.children[where, symbol]) / calls
            rows.append(ProfileRow(symbol, self.kinds[where, symbol], where, count / calls,
                                   max(measured - share, 0.0)))
        rows.sort(key=lambda row: -row.seconds)
        loops = [ProfileLoop(label, driver, where, entered / calls, None if trips is None else trips / calls)
                 for label, (driver, where, entered, trips) in self.loops.items()]
        return Profile(tuple(rows), tuple(loops), call_seconds, profiled_seconds, calls, per_entry)


def measure(plain, timed, recorder: Recorder, calls: int) -> Profile:
    """The profile of a program's call: `plain()` makes it as a user does, `timed()` on
    a VM whose instrument hook is `recorder`. Each is called once to warm up (bad
    arguments fail in the first), then `calls` times; the collector is paused in the
    timed calls, where the hook's garbage would set it off inside the rows it times."""
    plain()
    call_seconds = median_call_seconds(plain, calls)
    timed()
    recorder.reset()  # the warm-up's calls are not counted

    def profiled_call():
        recorder.start_call()
        collecting = gc.isenabled()
        gc.disable()
        try:
            timed()
        finally:
            if collecting:
                gc.enable()

    return recorder.profile(calls, call_seconds, median_call_seconds(profiled_call, calls))


def _integer(value) -> int:
    """A loop bound the driver gets: a 0-d tensor (on the loop's device) or an int."""
    return int(value.numpy()) if hasattr(value, "numpy") else int(value)


def median_call_seconds(call, calls: int) -> float:
    times = []
    for _ in range(calls):
        started = _now()
        call()
        times.append(_now() - started)
    return statistics.median(times)
