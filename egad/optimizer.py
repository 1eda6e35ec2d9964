"""The e-graph optimizer as one function: program in, optimized program out (DESIGN §5–6).

    result = optimize_program(gradient_program, families=egad.rules.default(), target="llvm",
                              check_args=(W, U, xs, h0))
    result.program        # the extracted program (or the original, on a fallback)
    print(result)         # rules fired, e-graph size, predicted costs, critical path, fallback

encode -> saturate (egad/egraph/schedule.py, bounded) -> extract (egad/extract.py, by
the cost model) -> decode (verified). "Never worse than doing nothing": any error in
these steps, a predicted cost above the original's, or results that differ from the
original's on `check_args` (both interpreted) fall back to the original program, and
the result says why. A saturation limit is not a failure: the best term of the
e-graph as it stands is used, and the result says which limit stopped it. Under a
`memory_limit` (egad.optimize's memory_budget), an extraction that holds more is
extracted again with bytes held priced ever higher until one fits (`_within_memory`).

Results are cached in memory by (program fingerprint and source lines, families,
target, limits):
`egad.optimize` specializing the same program twice optimizes it once.
"""
from __future__ import annotations

import dataclasses
import gc
import time
from collections import Counter

import numpy as np

from .critical_path import LoopPath, critical_paths
from .cost_model import target_constants
from .errors import EgadError
from .ir.fingerprint import fingerprint
from .ir.index_ranges import check_summary
from .ir.program import Program
from .pytree import flatten

# Optimize + build should take seconds, not minutes (issue 5: <= 5 s per corpus program).
DEFAULT_SECONDS = 3.0
# Extraction's own time limit, pricing included (GNMT-lite small takes 2.4 s on a 2-core
# EPYC): past it, the alternatives not yet tried are left out, or, with no extraction
# yet, the program as written is built (100 nested egad.cond took 136 s; found by fuzzing).
EXTRACT_SECONDS = 20.0


@dataclasses.dataclass
class Optimization:
    """What one run of the optimizer did."""

    original: Program
    program: Program  # what to build: the extraction, or `original` after a fallback
    families: tuple[str, ...]
    saturation: object | None = None  # egad.egraph.SaturationReport
    predicted_before: object | None = None  # egad.extract.PredictedCost of the original
    predicted_after: object | None = None  # ... of the extraction
    chosen: Counter = dataclasses.field(default_factory=Counter)  # rule -> nodes of it extracted
    critical_path: list[LoopPath] = dataclasses.field(default_factory=list)
    fallback: str | None = None  # why the original program is used, or None
    timings: dict = dataclasses.field(default_factory=dict)  # phase -> seconds
    cached: bool = False
    measured: tuple | None = None  # (optimized, original) seconds per call, when egad.optimize timed both
    graph: object | None = None  # egad.egraph.record.EGraphRecord: the e-graph and the extraction, for egad.viz
    memory: str | None = None  # what a memory limit changed in the extraction, or None
    checked: str | None = None  # what the check against the original found, where it kept the optimized build

    def lines(self) -> list[str]:
        """The report's lines (indented for `Optimized.report()`). After a fallback the
        extraction's counts, costs and critical path say that it was not built."""
        rejected = " (the extraction, not built)" if self.fallback and self.program is self.original else ""
        out = [f"  rule families: {', '.join(self.families) or 'none'}"]
        if self.saturation is not None:
            sat = self.saturation
            out.append(f"  e-graph: {sat.nodes} e-nodes in {sat.classes} classes after {sat.rounds} rounds, "
                       f"stopped by {sat.stopped_by}"
                       + (" (limit hit: the best term found so far is used)" if sat.limit_hit else ""))
            fired = sat.fired()
            if fired:
                out.append(f"  rules fired (matches, new e-nodes, e-nodes in the extracted program){rejected}:")
                out += [f"    {name:34s} {count:6d} {sat.new_nodes.get(name, 0):6d} {self.chosen.get(name, 0):6d}"
                        for name, count in fired.items()]
            else:
                out.append("  rules fired: none")
        if self.predicted_before is not None and self.predicted_after is not None:
            before, after = self.predicted_before.seconds, self.predicted_after.seconds
            out.append(f"  predicted cost{rejected}: {before * 1e6:.1f} us before, {after * 1e6:.1f} us after "
                       f"({before / after if after else float('inf'):.2f}x); tape bytes "
                       f"{self.predicted_before.tape_bytes:.0f} -> {self.predicted_after.tape_bytes:.0f}")
        if self.critical_path:
            out.append(f"  critical path{rejected} (per loop: the carried chain that must run trip after trip):")
            out += ["    " + str(path) for path in self.critical_path]
        if self.measured is not None:
            optimized, original = self.measured
            out.append(f"  measured on the example inputs: {optimized * 1e3:.3g} ms optimized, "
                       f"{original * 1e3:.3g} ms original ({original / optimized:.2f}x)")
        if self.memory:
            out.append(f"  memory: {self.memory}")
        out.append(f"  index reads in compiled code: {check_summary(self.program)}")
        if "check" not in self.timings and not self.fallback:
            out.append("  check against the original: not run (no example inputs, or check=False)")
        if self.checked:
            out.append(f"  check against the original: {self.checked}")
        out.append(f"  fallback: {self.fallback}" if self.fallback else "  fallback: none")
        return out

    def __str__(self) -> str:
        return "\n".join([f"optimization of {self.original.name}", *self.lines()])


_CACHE: dict[tuple, Optimization] = {}


def optimize_program(program: Program, families, target="llvm", limits=None, check_args=None,
                     memory_limit: int | None = None, trip_guesses=None) -> Optimization:
    """Saturate, extract and decode `program` with the rule `families` (Family objects
    or names); check the result on `check_args` when given. `trip_guesses` (symbol ->
    size, e.g. {"T": 300} from the example inputs) replace the cost model's default
    guess for those symbolic dims. `memory_limit` (bytes held
    and taped, egad/ad/checkpoint.py's `kept_bytes`): the transformers that trade time
    for memory run too (Rule.memory), and when the fastest extraction holds more than
    the limit, the extraction is redone with bytes held priced (`_within_memory`). Never
    raises for a failure of the optimizer itself: it falls back to `program` and says why."""
    from .egraph import Limits

    limits = limits or Limits(seconds=DEFAULT_SECONDS)
    names = tuple(f if isinstance(f, str) else f.name for f in families)
    # fingerprints leave source lines out; a cached result carries its program's lines
    # into reports and the visualiser, so programs traced from other lines miss
    guesses = tuple(sorted((trip_guesses or {}).items()))
    rules = tuple(() if isinstance(f, str) else tuple(rule.name for rule in f.rules) for f in families)  # they may grow
    key = (fingerprint(program), _source_lines(program), names, rules, str(target), limits, memory_limit, guesses)
    checked = check_args is not None
    # a result checked on example inputs answers any call; one not checked, only calls that ask for no check
    cached = _CACHE.get((*key, True)) or (None if checked else _CACHE.get((*key, False)))
    if cached is not None:  # the same program (fingerprints cover ops, types and constants) seen before
        return _for_program(cached, program)
    result = _optimize(program, families, names, target, limits, check_args, memory_limit, dict(guesses))
    # The e-graph is garbage now, in reference cycles (egglog's own, and any rule's recursive
    # closure over its view): collected here, on the thread that made it. egglog refuses to be
    # dropped on another thread ("EGraph is unsendable"), and a collection runs on whichever
    # thread allocates (egad.optimize called from several threads). ~50 ms.
    gc.collect()
    _CACHE[(*key, checked)] = result
    return result


# Under a memory limit, the extraction is redone with bytes held priced (a λ-sweep,
# DESIGN §6), from the price at which the excess over the limit costs a tenth of the
# program's predicted time, up by MEMORY_PRICE_STEP until one fits, to at most
# MEMORY_FIRST_PRICE: far above any time a program takes, where the extraction holds
# the least it can and is the fastest among those. Each price is a whole extraction
# (2 s on the LSTM at T=1024), so the sweep is short: one step below a first price
# that fits, one bisection between the last that did not and the first that did.
MEMORY_PRICE_STEP = 10.0
MEMORY_FIRST_PRICE = 1e-3

def _optimize(program, families, names, target, limits, check_args, memory_limit=None,
              trip_guesses=None) -> Optimization:
    from .egraph import Snapshot, decode, encode, extract_inserted, saturate
    from .egraph.record import EGraphRecord
    from .extract import CostModel, ExtractionTimeLimit, extract, predicted_cost, time_limit

    result = Optimization(program, program, names)
    timings = result.timings
    model = CostModel(target_constants(target), trip_guesses=trip_guesses or {})
    try:
        started = time.perf_counter()
        encoding = encode(program)
        timings["encode"] = time.perf_counter() - started

        started = time.perf_counter()
        result.saturation = saturate(encoding, families=list(families), limits=limits,
                                     memory_limited=memory_limit is not None)
        timings["saturate"] = time.perf_counter() - started

        started = time.perf_counter()
        snapshot = Snapshot.of(encoding.egraph)
        origins = encoding.provenance.resolve(snapshot)
        original = extract_inserted(snapshot, origins, encoding.roots)
        with time_limit(EXTRACT_SECONDS):  # pricing the program as written is as dear as extracting
            result.predicted_before = predicted_cost(encoding, snapshot, original, model)
            extraction = extract(encoding, snapshot, model)
            result.predicted_after = predicted_cost(encoding, snapshot, extraction, model)
        result.chosen = Counter(origins[node].site.name for node in extraction.choice.values()
                                if node in origins and origins[node].site.name != "input")
        timings["extract"] = time.perf_counter() - started

        started = time.perf_counter()
        if result.predicted_after.total > result.predicted_before.total:
            extraction = original  # the extractor is greedy: never choose worse than what was written
            result.predicted_after, result.chosen = result.predicted_before, Counter()
        optimized = decode(encoding, snapshot, extraction, origins)
        timings["decode"] = time.perf_counter() - started
        if memory_limit is not None:  # the program as written may hold too much itself (a store-all gradient)
            started = time.perf_counter()
            optimized, extraction = _within_memory(result, encoding, snapshot, origins, model, memory_limit,
                                                   (optimized, extraction))
            timings["fit memory"] = time.perf_counter() - started
        result.graph = EGraphRecord.of(encoding, snapshot, origins, original, extraction, model)
    except ExtractionTimeLimit:
        result.fallback = f"extraction stopped by its time limit ({EXTRACT_SECONDS:g} s, " \
                          f"{result.saturation.nodes} e-nodes); the original program is built"
        timings["extract"] = time.perf_counter() - started
        return result
    except (EgadError, RecursionError, RuntimeError, ValueError, KeyError, TypeError) as error:
        # egglog raises plain exceptions; any failure here is the optimizer's, not the user's
        result.fallback = f"the optimizer failed ({type(error).__name__}: {_first_line(error)}); " \
                          "the original program is built"
        return result

    if check_args is not None:
        started = time.perf_counter()
        mismatch = _same_results(optimized, program, check_args)
        timings["check"] = time.perf_counter() - started
        if mismatch is not None:
            result.fallback = f"the optimized program's results differ from the original's on the example " \
                              f"inputs ({mismatch}); the original program is built"
            return result
    result.program = optimized
    result.critical_path = critical_paths(optimized, target)
    return result


def _for_program(cached: Optimization, program: Program) -> Optimization:
    """A cached optimization as the answer for `program`: the same computation, but
    `program`'s arguments and results (fingerprints leave out pytree structures, static
    argument values and names, which a program traced from the same lines may change)."""
    if cached.program is cached.original:
        optimized = program
    else:
        optimized = dataclasses.replace(cached.program, signature=program.signature, out_tree=program.out_tree,
                                        name=program.name, loc=program.loc, retrace=program.retrace)
    return dataclasses.replace(cached, original=program, program=optimized, cached=True)


def _within_memory(result, encoding, snapshot, origins, model, memory_limit: int, fastest):
    """(program, extraction): the fastest, when it holds no more than `memory_limit`; else
    the extraction at the least price on bytes held the sweep finds that fits (above).
    When none fits: the first holding no more than the original program. While the
    original fits the limit, one predicted slower than the original is not taken: the
    original is the better program. `result.memory` says what was done, and
    `predicted_after`/`chosen` describe the extraction taken."""
    from .ad.checkpoint import kept_bytes, readable_bytes
    from .egraph import decode
    from .extract import extract, predicted_cost

    held = kept_bytes(fastest[0])
    if held <= memory_limit:
        return fastest

    def priced(price: float) -> tuple:
        extraction = extract(encoding, snapshot, dataclasses.replace(model, held_byte_seconds=price),
                             seconds=EXTRACT_SECONDS)
        program = decode(encoding, snapshot, extraction, origins)
        return program, extraction, kept_bytes(program), price

    seconds = max(result.predicted_after.seconds if result.predicted_after else 0.0, 1e-6)
    price = min(seconds / (held - memory_limit) / MEMORY_PRICE_STEP, MEMORY_FIRST_PRICE)
    tried = [(*fastest, held, 0.0), priced(price)]
    if tried[-1][2] <= memory_limit:  # fits at once: one step cheaper may too
        cheaper = priced(price / MEMORY_PRICE_STEP)
        fits = cheaper if cheaper[2] <= memory_limit else tried[-1]
    else:
        while tried[-1][2] > memory_limit and price < MEMORY_FIRST_PRICE:
            price = min(price * MEMORY_PRICE_STEP, MEMORY_FIRST_PRICE)
            tried.append(priced(price))
        fits = tried[-1] if tried[-1][2] <= memory_limit else None
        if fits is not None and len(tried) > 2:  # between the last that did not fit and the first that did
            middle = priced((tried[-2][3] * fits[3]) ** 0.5)
            fits = middle if middle[2] <= memory_limit else fits
    original_held = kept_bytes(result.original)
    over = f"the fastest extraction holds {readable_bytes(held)}, above the {readable_bytes(memory_limit)} allowed"
    outcome = "that fits"
    if fits is None:
        fits = next((option for option in tried if option[2] <= original_held), None)
        if fits is None or fits[0] is fastest[0]:
            result.memory = f"{over}, and the one holding least {readable_bytes(min(option[2] for option in tried))}"
            return fastest
        outcome = "that holds no more than the program as written (none fits)"
    program, extraction, kept, price = fits
    predicted = predicted_cost(encoding, snapshot, extraction, model)
    if original_held <= memory_limit and predicted.total > result.predicted_before.total:
        result.memory = (f"{over}, and the first that fits ({readable_bytes(kept)}) is predicted slower than the "
                         "program as written")
        return fastest
    result.memory = (f"{over}: extracted again with bytes held priced at {price:.3g} s a byte, the least price "
                     f"found {outcome}: {readable_bytes(kept)}")
    result.predicted_after = predicted
    result.chosen = Counter(origins[node].site.name for node in extraction.choice.values()
                            if node in origins and origins[node].site.name != "input")
    return program, extraction


def _same_results(optimized: Program, original: Program, args) -> str | None:
    """None when both programs interpret to the same results on `args`, else what
    differs (`results_differ`)."""
    from .interp import interpret

    return results_differ(outcome(lambda: interpret(optimized, *args)), outcome(lambda: interpret(original, *args)))


def outcome(run):
    """What `run()` gives, as a list of leaves, or the EgadError it raises."""
    try:
        return flatten(run())[0]
    except EgadError as error:
        return error


SMALL_RESULT = 1e-7  # results below this fraction of the largest are compared at it (`results_differ`)


def results_differ(got, want) -> str | None:
    """None when two `outcome`s agree (float tolerance: rewrites reassociate sums),
    else what differs. An error in both is agreement; in one only, a mismatch."""
    if isinstance(want, Exception) or isinstance(got, Exception):
        if isinstance(want, Exception) and isinstance(got, Exception):
            return None
        return f"one raised {(want if isinstance(want, Exception) else got)!s:.200}"
    scales = {k: float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)) for k, w in enumerate(map(np.asarray, want))
              if np.issubdtype(w.dtype, np.inexact)}  # each float result's largest finite magnitude
    largest = max(scales.values(), default=0.0)
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"result {k}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if not np.issubdtype(w.dtype, np.inexact):
            if not np.array_equal(g, w):
                return f"result {k}: integer values differ"
            continue
        tolerance = 1e-3 if w.dtype.itemsize <= 4 else 1e-7
        finite = np.isfinite(w)
        if not np.array_equal(np.isfinite(g), finite) or \
                not np.array_equal(np.where(finite, 0, g), np.where(finite, 0, w), equal_nan=True):
            return f"result {k}: non-finite values differ"
        # A result many orders below the others (a gradient that cancels to almost nothing:
        # GNMT-lite's attention weights, 1e-11 beside a loss of 6) is the rounding residue
        # of sums of much larger terms, which any reassociation changes: it is compared
        # at SMALL_RESULT of the largest result. An error the size of a value above that
        # is still caught. Where every result is exactly zero (terms that cancel), the
        # scale is sqrt(eps): compiled code's fused multiply-adds leave one product's
        # rounding (3.7e-16 in float64) where numpy's a*b - a*b is 0.
        scale = max(scales[k], SMALL_RESULT * largest) if largest > 0 else float(np.sqrt(np.finfo(w.dtype).eps))
        error = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0))
        if error > tolerance * scale:
            return f"result {k}: max difference {error:.3g} against values up to {scale:.3g}"
    return None


def _source_lines(program: Program) -> int:
    from .ir.program import walk_bindings

    return hash(tuple(str(b.loc) for b in walk_bindings(program.region)))


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else ""
