"""`egad.optimize`: a program (and its gradient) optimized and compiled into a callable.

Per shape signature: differentiate (egad.ad), optimize in the e-graph with the rule
families (egad/optimizer.py: saturate, extract by the cost model, decode, check
against the original on example inputs), lower to TVM Relax and build
(egad.tvm_bridge, imported only when a program is built). `rules=()` skips the
e-graph: the program AD wrote is built as it is.

Specialization: a program traced with symbolic dims (egad.Spec) runs for any size
of them from one build. A call whose static dims (or static arguments) differ from
the traced ones traces the function again for them and builds once per such shape
signature. Builds are cached by program fingerprint and target in memory and on
disk (tvm_bridge/cache.py), so a program built before is loaded, not compiled.
"""
from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np

from .errors import ArgumentError, EgadError, message
from .ir.program import Program
from .ir.types import TensorType, bind_dims
from .pytree import flatten, leaf_paths, unflatten
from .source import raised_at


class Optimized:
    """A compiled program: call it with the program's positional arguments (numpy
    arrays, scalars, or DLPack arrays; a list or tuple is a pytree of arguments, as in
    JAX, not an array); it returns numpy values — `(value, grads)` when built with
    `wrt`, the value alone with `wrt=None`."""

    def __init__(self, program: Program, wrt, target, has_aux: bool, families: tuple, example_args=None,
                 check: bool = True, memory_budget: int | None = None):
        self.traced = program
        self.target = target
        self.wrt = wrt
        self.has_aux = has_aux
        self.families = families
        self.example_args = example_args
        self.check = check
        self.timings: dict[str, float] = {"differentiate": 0.0}
        self.optimizations: list = []  # egad.optimizer.Optimization, one per specialization
        self.memory_budget = memory_budget
        self.checkpoint_plans: list = []  # egad.ad.checkpoint.CheckpointPlan, one per specialization (with wrt)
        self.observed_trips: list = []  # egad.trip_counts.Observed, while loops' trips on the example inputs
        self.observed_sizes: dict[str, int] = {}  # symbolic dims' sizes on the first inputs that built each
        self._built_programs: dict[int, Program] = {}  # id(compiled) -> the program it was built from
        self.builds = 0  # specializations made ready: compiled, or loaded from a cache
        self.origins = {"built": 0, "memory": 0, "disk": 0}
        self.disk_problems: list[str] = []  # why this callable's builds could not be read from or written to disk
        self._specializations: dict[tuple, object] = {}
        # a build for the traced shapes made before any call, with no inputs to check it on
        # (`program`, `relax_text`): (compiled, the report records it added); calls never use it
        self._preview: tuple | None = None
        # calls in several threads that need the same new specialization build it once
        self._specializing = threading.Lock()
        signature = program.signature
        baked = [value for value, tree in zip(signature.static_values, signature.trees) if tree is None]
        self._base_key = _signature_key(program, [_traced_shapes(program)], baked)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise ArgumentError(message(
                f"{self.traced.name} was called with keyword arguments ({', '.join(kwargs)}); a traced program "
                "takes its arguments by position, as traced", instead="pass every argument by position"))
        return self._compiled_for(args)(*args)

    def _compiled_for(self, args):
        key = self._call_key(args)
        if key is None:  # the arguments do not fit the program: say so before building anything
            from .interp import check_arguments

            check_arguments(self.traced, args)
        compiled = self._specializations.get(key)
        if compiled is None:
            with self._specializing:
                compiled = self._specializations.get(key) or self._specialize(args, key)
        return compiled

    def _call_key(self, args) -> tuple | None:
        """The shape signature of a call (static dims and static argument values), or
        None when the arguments do not even fit the program's structure (the build
        then reports exactly what is wrong)."""
        signature = self.traced.signature
        if len(args) != signature.num_args:
            return None
        shapes, statics = [], []
        for arg, tree, baked in zip(args, signature.trees, signature.static_values):
            if tree is None:
                statics.append(arg)
                continue
            leaves, got_tree = flatten(arg)
            if got_tree != tree:
                return None
            shapes.append([_shape_of(leaf) for leaf in leaves])
        return _signature_key(self.traced, shapes, statics)

    def _specialize(self, args, key):
        if key is None or key == self._base_key:
            program = self.traced
        elif self.traced.retrace is None:
            program = self.traced  # not retraceable: the call reports the mismatch
            key = None
        else:
            program = _retraced(self.traced, args)
        given = self.example_args is not None and program is self.traced  # example_args are for the traced shapes
        compiled = self._build(program, self.example_args if given else args)
        if key is not None:
            self._specializations[key] = compiled
        if key == self._base_key and self._preview is not None:  # the checked build replaces the preview
            preview, records = self._preview
            self.builds -= 1  # the report counts the builds calls use
            self.origins[preview.origin] -= 1
            self.optimizations = [o for o in self.optimizations if not any(o is r for r in records)]
            self.checkpoint_plans = [p for p in self.checkpoint_plans if not any(p is r for r in records)]
            self._preview = None
        return compiled

    def _build(self, program: Program, check_args):
        from . import ad, trip_counts
        from .optimizer import optimize_program, outcome, results_differ

        # symbolic dims (an egad.Spec's "T") are priced at their sizes on the inputs this build is for
        sizes = trip_counts.symbol_sizes(program, check_args) if check_args is not None else {}
        self.observed_sizes.update(sizes)
        started = time.perf_counter()
        if check_args is not None and (self.check or self.memory_budget is not None) \
                and trip_counts.has_while_loops(program):
            # the cost model and the checkpoint planner price while loops by the trips they ran
            program, observed = trip_counts.observe(program, check_args)
            self.observed_trips += [seen for seen in observed if seen not in self.observed_trips]
            self.timings["observe trips"] = self.timings.get("observe trips", 0.0) + time.perf_counter() - started
            started = time.perf_counter()
        plan = None
        if self.wrt is not None:
            from .ad import checkpoint

            plan = checkpoint.plan(program, self.wrt, self.memory_budget, self.has_aux, check_args, self.target)
            self.checkpoint_plans.append(plan)
            program = ad.value_and_grad(plan.apply(program), wrt=self.wrt, has_aux=self.has_aux)
        self.timings["differentiate"] += time.perf_counter() - started
        original = program
        optimization = None
        examples = check_args if self.check else None  # None: no example inputs to check or time on
        runs_here = examples is not None and _runs_here(self.target)
        if self.families:
            # where the builds run here, their outputs are compared below (no interpreting twice, which
            # grows with the program's run time); elsewhere the optimizer interprets both
            optimization = optimize_program(program, self.families, self.target,
                                            check_args=None if runs_here else examples,
                                            memory_limit=_memory_limit(program, plan), trip_guesses=sizes)
            optimization = _within_budget(optimization, original, plan)
            # the e-graph weighs checkpointing of its own too, where a family has a rule for it
            if plan is not None and plan.checkpoints and any(r.memory for f in self.families for r in f.transformers):
                optimization = _egraph_policies(optimization, plan.store_all, plan, self.families, self.target,
                                                None if runs_here else examples, sizes)  # timings: both runs'
            for phase, seconds in optimization.timings.items():
                self.timings[phase] = self.timings.get(phase, 0.0) + seconds
            program = optimization.program
        compared = optimization is not None and program is not original and runs_here
        examples_raise = False  # an index out of range in the example inputs, say: nothing to time
        verdict = None  # what the check found where the two builds differ
        if program is not original:  # never worse than doing nothing: an optimized program that fails to build
            try:
                built = self._compile(program, original) if compared else self._compile(program)
            except Exception as error:  # noqa: BLE001 - a lowering or TVM failure of the optimized program
                optimization = dataclasses.replace(optimization, program=original, fallback=(
                    f"the optimized program failed to build ({type(error).__name__}: "
                    f"{str(error).strip().splitlines()[-1][:200]}); the original program is built"))
                program, compared = original, False
        if compared:  # both builds, side by side
            compiled, baseline = built
            started = time.perf_counter()
            got = outcome(lambda: compiled(*examples))
            examples_raise = isinstance(got, Exception)
            mismatch = results_differ(got, want := outcome(lambda: baseline(*examples)))
            # which build is right where they differ: the interpreter decides
            keep_optimized, verdict = (True, None) if mismatch is None else \
                _judge_mismatch(mismatch, got, want, original, examples)
            seconds = time.perf_counter() - started
            self.timings["check"] = self.timings.get("check", 0.0) + seconds
            optimization = dataclasses.replace(optimization, timings={**optimization.timings, "check": seconds},
                                               checked=verdict if keep_optimized else None)
            if not keep_optimized:
                optimization = dataclasses.replace(optimization, program=original, fallback=verdict)
                compiled, program = baseline, original
        elif program is original:
            (compiled,) = self._compile(program)
        else:
            (compiled,) = built
        # never worse than doing nothing, measured: the cost model's guess is not the last word (inputs
        # that raise in both programs time nothing; the call raises once built)
        if compared and program is not original and not examples_raise and verdict is None:
            started = time.perf_counter()
            optimized_seconds, original_seconds = _time_side_by_side(compiled, baseline, examples)
            optimization = dataclasses.replace(optimization, measured=(optimized_seconds, original_seconds))
            if optimized_seconds > original_seconds * (1 + MEASURED_NOISE):
                optimization = dataclasses.replace(optimization, program=original, fallback=(
                    f"measured slower than the original on the example inputs ({optimized_seconds * 1e3:.3g} ms "
                    f"against {original_seconds * 1e3:.3g} ms); the original program is built"))
                compiled, program = baseline, original
            self.timings["measure"] = self.timings.get("measure", 0.0) + time.perf_counter() - started
        if optimization is not None:
            self.optimizations.append(optimization)
        self._built_programs[id(compiled)] = program
        self.builds += 1
        self.origins[compiled.origin] += 1
        return compiled

    def _compile(self, *programs: Program) -> list:
        from .tvm_bridge import build_all

        compiled = build_all(list(programs), target=self.target)
        self.timings["lower and build"] = self.timings.get("lower and build", 0.0) + compiled[0].build_seconds
        self.disk_problems += [c.disk_problem for c in compiled if c.disk_problem and c.disk_problem not in
                               self.disk_problems]
        return compiled

    def _base(self):
        """The build for the traced shapes: the one calls use, made now when
        `example_args` give inputs to check and time it on; else, before the first call,
        a preview without the check, which calls never use (the first is checked on its
        own arguments; reading `.program` first once turned the check off)."""
        compiled = self._specializations.get(self._base_key)
        if compiled is not None:
            return compiled
        with self._specializing:
            compiled = self._specializations.get(self._base_key)
            if compiled is None and self.example_args is not None:
                compiled = self._specializations[self._base_key] = self._build(self.traced, self.example_args)
            elif compiled is None:
                if self._preview is None:
                    optimizations, plans = len(self.optimizations), len(self.checkpoint_plans)
                    preview = self._build(self.traced, None)
                    self._preview = (preview, self.optimizations[optimizations:] + self.checkpoint_plans[plans:])
                compiled = self._preview[0]
        return compiled

    @property
    def program(self) -> Program:
        """The program built for the traced shapes: the gradient program (with `wrt`)
        after the e-graph optimizer, as interpretable IR."""
        return self._built_programs[id(self._base())]

    @property
    def relax_text(self) -> str:
        """TVMScript of the module built for the traced shapes."""
        return self._base().relax_text

    @property
    def source(self) -> dict[str, str]:
        """Generated device source by kind (e.g. {"cuda": ...}) for the traced shapes;
        empty for CPU targets."""
        return self._base().source

    def export_library(self, path: str) -> None:
        """Write the library built for the traced shapes (host code, and device code for a
        GPU target) to `path`, e.g. to run it where only TVM's runtime is installed
        (benchmarks/gpu_run.py shows how). Pass `example_args` to `egad.optimize` to
        have that build checked first."""
        self._base().export_library(path)

    def profile(self, *args, calls: int = 5):
        """Where a call on `args` spends its time, measured: a `Profile`
        (tvm_bridge/profile.py) of the build for their shapes, with a row per kernel, loop
        driver and VM builtin at each place it ran (main, or the loop it ran in): calls
        and self time per call, and the median time of `calls` calls with and without
        the timing. `print(optimized.profile(*args))` shows the table, longest first."""
        return self._compiled_for(args).profile(*args, calls=calls)

    def report(self) -> str:
        from .tvm_bridge.cache import shared_cache

        cache = shared_cache()
        disk = str(cache.directory) if cache.directory else "off (EGAD_DISK_CACHE=0)"
        lines = [f"egad.optimize report for {self.traced.name} (target {self.target})"]
        if not self.families:
            lines.append("  e-graph: not run (rules=())")
        if self.observed_sizes:
            sizes = ", ".join(f"{symbol}={size}" for symbol, size in sorted(self.observed_sizes.items()))
            lines.append(f"  symbolic sizes on the example inputs (the cost model's guesses): {sizes}")
        for seen in self.observed_trips:
            lines.append(f"  trips observed on the example inputs (the cost model's guess): {seen}")
        for plan in self.checkpoint_plans:
            head, *rest = plan.lines()
            lines += [f"  checkpointing: {head}"] + [f"    {line}" for line in rest]
        for k, optimization in enumerate(self.optimizations):
            if len(self.optimizations) > 1:
                lines.append(f"  specialization {k + 1}: {_shapes_text(optimization.original)}"
                             + (" (optimizer result cached)" if optimization.cached else ""))
            lines += optimization.lines()
        lines += [f"  builds: {self.builds} ({self.origins['built']} compiled, {self.origins['memory']} from the "
                 f"memory cache, {self.origins['disk']} from the disk cache)",
                 f"  disk cache: {disk}" + "".join(f"; {problem}" for problem in self.disk_problems)]
        lines += [f"  {phase}: {seconds * 1e3:.1f} ms" for phase, seconds in self.timings.items()]
        return "\n".join(lines)


def _runs_here(target) -> bool:
    """Whether compiled code for `target` runs on this machine's CPU (where it can be timed)."""
    from .tvm_bridge.targets import resolve

    return resolve(target).runs_here


def _memory_limit(program: Program, plan) -> int | None:
    """The bytes an optimization of `program` may keep (`checkpoint.kept_bytes`) under the
    plan's memory budget: what `program` does, plus the budget's room beyond the planned
    tapes (`_within_budget` checks the same); None without one."""
    from .ad import checkpoint

    if plan is None or plan.budget is None:
        return None
    return checkpoint.kept_bytes(program) + plan.budget - plan.planned_bytes


def _within_budget(optimization, original: Program, plan):
    """The optimization, or a fallback to `original` when the optimized program
    holds more than the memory budget has room for: the plan budgets tapes, and
    rewrites such as batch-input-projection (every step's projection at once) or
    batch-weight-gradient (each step's operands stacked) hold values besides them."""
    from .ad import checkpoint

    if plan is None or plan.budget is None or optimization.program is original:
        return optimization
    # tapes the optimized program stacks instead (rules/checkpoint.py) are not extra: both sides count them
    extra = checkpoint.kept_bytes(optimization.program) - checkpoint.kept_bytes(original)
    if extra <= 0 or plan.planned_bytes + extra <= plan.budget:
        return optimization
    return dataclasses.replace(optimization, program=original, fallback=(
        f"the optimized program holds up to {checkpoint.readable_bytes(extra)} more than the original (values "
        f"batched or stacked over the steps), which with {checkpoint.readable_bytes(plan.planned_bytes)} of tapes "
        f"exceeds memory_budget ({checkpoint.readable_bytes(plan.budget)}); the original (checkpointed) program "
        "is built"))


def _egraph_policies(optimization, store_all: Program, plan, families, target, check_args, sizes):
    """The planned program's optimization, or the store-all gradient's optimized within the
    budget by the e-graph, whichever is predicted faster (with both runs' timings). Under
    a memory limit the e-graph holds checkpointing alternatives of its own
    (rules/checkpoint.py's `checkpoint-every-k-trips`), and its extraction weighs them
    against the other rules' alternatives with bytes held priced
    (optimizer._within_memory); the plan is chosen before the e-graph, by the cost of the
    forward passes it adds (ad/checkpoint.py). Both compute the same values; the planned
    program stays the one `optimize` falls back to."""
    from .ad import checkpoint
    from .optimizer import optimize_program

    limit = checkpoint.held_bytes(store_all) + plan.budget  # what the plan allows: its tapes within the budget
    candidate = optimize_program(store_all, families, target, check_args=check_args, memory_limit=limit,
                                 trip_guesses=sizes)
    timings = {phase: optimization.timings.get(phase, 0.0) + candidate.timings.get(phase, 0.0)
               for phase in {**optimization.timings, **candidate.timings}}
    held = checkpoint.kept_bytes(candidate.program)
    planned = optimization.predicted_after or optimization.predicted_before
    if candidate.program is store_all or held > limit or candidate.predicted_after is None or planned is None:
        verdict = ("the e-graph's own checkpointing of the store-all gradient was not used "
                   f"({candidate.fallback or candidate.memory or 'it holds more than the budget allows'})")
        chosen = optimization
    else:
        theirs, ours = candidate.predicted_after.total, planned.total
        verdict = (f"the e-graph's own checkpointing of the store-all gradient ({checkpoint.readable_bytes(held)} "
                   f"kept) is predicted {theirs * 1e6:.1f} us against {ours * 1e6:.1f} us for the plan's program: "
                   + ("it is built" if theirs < ours else "the plan's is built"))
        chosen = candidate if theirs < ours else optimization
    # results may be cached (optimizer.optimize_program): changed on a copy
    return dataclasses.replace(chosen, timings=timings,
                               memory=f"{chosen.memory}; {verdict}" if chosen.memory else verdict)


def _judge_mismatch(mismatch: str, optimized, original_outcome, original: Program, examples) -> tuple[bool, str]:
    """(keep the optimized build?, what the report says) when the optimized and the
    original builds disagree on the example inputs. The interpreter, run only now, is
    the judge: the original build is kept unless it alone disagrees with it. Where
    both builds disagree with the interpreter, compiled code is wrong (a bug in egad's
    lowering, or a program whose results turn on float rounding): a RuntimeWarning
    says so, not only the report."""
    import warnings

    from .interp import interpret
    from .optimizer import outcome, results_differ

    reference = outcome(lambda: interpret(original, *examples))
    original_wrong, optimized_wrong = results_differ(original_outcome, reference), results_differ(optimized, reference)
    said = f"the optimized program's results differ from the original's on the example inputs ({mismatch}; both " \
           f"built and run)"
    if original_wrong is not None and optimized_wrong is None:
        return True, f"{said}: the optimized build agrees with the interpreter, the original's does not " \
                     f"({original_wrong}), and the optimized one is built"
    if original_wrong is None:
        return False, f"{said}; the original program is built"
    warnings.warn(f"egad: compiled code disagrees with egad.interpret on the example inputs (optimized: "
                  f"{optimized_wrong}; original: {original_wrong}). Unless the program's results turn on float "
                  "rounding, this is a bug in egad: egad.interpret gives the right results meanwhile.",
                  RuntimeWarning, stacklevel=4)
    return False, f"{said}; neither agrees with the interpreter (original: {original_wrong}); the original " \
                  f"program is built"


# The optimized build is kept unless it measures slower than the original by more
# than this: within it, the two are a tie, and the cost model's choice stands.
MEASURED_NOISE = 0.03


def _time_side_by_side(first, second, args, budget_seconds: float = 2.0, rounds: int = 5,
                       short_seconds: float = 0.1, max_rounds: int = 50) -> tuple[float, float]:
    """The fastest of a few calls of each of two compiled programs on `args`,
    interleaved round by round, within about `budget_seconds`: `rounds` of them, and
    more (up to `max_rounds`) while they take under `short_seconds` in all, since a
    millisecond program's minimum over five calls still moves by 10% here. The
    minimum, not the median: on a shared machine, other load only ever adds time, and
    a few rounds' median still moves with it (measured here: the same pair 3.04/2.54 ms
    in one process, 1.8/2.4 ms later). Both have run once already (the results check)."""
    times: tuple[list, list] = ([], [])
    started = time.perf_counter()
    for done in range(1, max_rounds + 1):
        for compiled, spent in zip((first, second), times):
            call_started = time.perf_counter()
            compiled(*args)
            spent.append(time.perf_counter() - call_started)
        elapsed = time.perf_counter() - started
        if elapsed > budget_seconds or (done >= rounds and elapsed > short_seconds):
            break
    return min(times[0]), min(times[1])


def _shapes_text(program: Program) -> str:
    return ", ".join(str(t) for t in program.param_types)


def _traced_shapes(program: Program) -> list[tuple]:
    return [t.shape for t in program.param_types]


def _signature_key(program: Program, shapes_per_arg: list[list[tuple]], statics) -> tuple:
    """Shapes with the traced symbolic dims masked out, plus the static values."""
    flat_shapes = [shape for shapes in shapes_per_arg for shape in shapes]
    masked = []
    for shape, traced in zip(flat_shapes, program.param_types):
        if len(shape) == traced.ndim:
            shape = tuple(None if isinstance(d, str) else s for d, s in zip(traced.shape, shape))
        masked.append(tuple(shape))
    return tuple(masked), tuple(_static_key(value) for value in statics)


def _static_key(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *map(_static_key, value))
    if isinstance(value, dict):
        return ("dict", *sorted((repr(k), _static_key(v)) for k, v in value.items()))
    if isinstance(value, (float, np.floating)):  # by its bits: -0.0 is not 0.0 (1 / x), and NaN is NaN
        return ("float", type(value).__name__, float(value).hex())
    try:
        hash(value)
        return ("value", type(value).__name__, value)
    except TypeError:
        raise ArgumentError(message(
            f"a static argument of type {type(value).__name__} is not hashable, so egad.optimize cannot tell "
            "whether it changed between calls",
            instead="pass static arguments as hashable values (tuples, numbers, strings)")) from None


def _retraced(program: Program, args) -> Program:
    """`program` traced again for the shapes of `args` (its function as written, for
    arrays of new shapes). A leaf whose rank differs from a param declared with symbolic
    dims (an egad.Spec) is refused, as the interpreter refuses it: the Spec fixed the
    rank. An error of the function itself on the new shapes (not egad's own errors,
    which name the user's line already) is reported with the shapes that caused it."""
    changed = []
    for path, leaf, traced in _array_leaves(program, args):
        if not (hasattr(leaf, "shape") or hasattr(leaf, "__dlpack__") or type(leaf) in (bool, int, float)):
            raise ArgumentError(message(f"{path}: {type(leaf).__name__} is not an array",
                                        instead=f"pass a {traced.dtype} array of shape {traced.shape}"))
        shape = _shape_of(leaf)
        mismatch = bind_dims(traced.shape, shape, {})
        if mismatch is None:
            continue
        if len(shape) != traced.ndim and any(isinstance(d, str) for d in traced.shape):
            raise ArgumentError(message(
                f"{path} has shape {shape}: {mismatch} (traced as {traced})",
                instead="pass an array of the rank its egad.Spec declares, or trace again with a Spec of that rank"))
        changed.append(f"{path} has shape {shape}, traced as {traced}")
    try:
        return program.retrace(*_retrace_args(program, args))
    except EgadError as error:  # names the user's line already; say which shapes led there
        if changed and error.args and isinstance(error.args[0], str):
            error.args = (f"{error.args[0]}\n  (while tracing {program.name} again for new argument shapes: "
                          f"{'; '.join(changed)})", *error.args[1:])
        raise
    except Exception as error:  # noqa: BLE001 - the user's function failed on the new shapes: say which
        raise ArgumentError(message(
            f"{program.name} was traced again for new argument shapes ({'; '.join(changed) or 'new static values'}) "
            f"and raised {type(error).__name__}: {error}", where=raised_at(error).long(),
            instead="pass arguments of the traced shapes, or make the function work for these shapes "
                    "(an egad.Spec with symbolic dims declares which may vary)")) from error


def _array_leaves(program: Program, args):
    """(path, leaf, the param type it binds) of every array leaf of `args`, whose structure
    fits the program's (static arguments skipped: a new static value is traced again)."""
    types = iter(program.param_types)
    for k, (arg, tree) in enumerate(zip(args, program.signature.trees)):
        if tree is not None:
            paths = leaf_paths(tree, f"argument {k}")
            yield from ((path, leaf, next(types)) for path, leaf in zip(paths, flatten(arg)[0]))


def _retrace_args(program: Program, args) -> list:
    """The call's arguments as param types for tracing again: each array leaf becomes
    its new shape, keeping the traced dtype, weakness and symbolic dims."""
    types = iter(program.param_types)
    traced_args = []
    for arg, tree in zip(args, program.signature.trees):
        if tree is None:
            traced_args.append(arg)
            continue
        new_types = []
        for leaf in flatten(arg)[0]:
            traced = next(types)
            shape = _shape_of(leaf)
            if len(shape) == traced.ndim:
                shape = tuple(d if isinstance(d, str) else s for d, s in zip(traced.shape, shape))
            new_types.append(TensorType(shape, traced.dtype, traced.weak))
        traced_args.append(unflatten(tree, new_types))
    return traced_args


def _shape_of(leaf) -> tuple:
    """A leaf's shape without converting it (numpy, arrays with a .shape, Python
    scalars); an array offered only through DLPack is read as the interpreter reads it."""
    if hasattr(leaf, "shape"):
        return tuple(leaf.shape)
    if hasattr(leaf, "__dlpack__"):
        from .interp import _host_array

        return _host_array(leaf).shape
    return np.shape(leaf)


def optimize(program: Program, wrt=(0,), target="llvm", memory_budget: int | None = None, rules=None,
             has_aux: bool = False, example_args=None, check: bool = True) -> Optimized:
    """Compile `program` and, unless `wrt=None`, its gradient into one callable
    returning `(value, grads)`. `target` is "llvm" (or "cpu"), "cuda", "metal",
    "opencl", "webgpu", "vulkan" or a TVM target dict. `rules`: rule families
    (`egad.rules.default()` when None; `rules=()` builds without the e-graph).
    The optimized program is checked against the original on `example_args`
    (default: the first call's arguments of each new shape): on the CPU both are
    built and run, elsewhere both are interpreted; the original is built if they
    differ (where the builds differ, unless the interpreter finds the original's
    build alone wrong), or if it measures faster. `check=False` skips both (they cost a second
    build and a few runs per new shape). `memory_budget` (bytes of taped residuals):
    when store-all taping needs more, loops are checkpointed every k trips and
    recomputed in the adjoint (egad/ad/checkpoint.py), one k per loop chosen to fit (a
    `while` loop's for the trips it runs on `example_args`; its segments double on
    longer runs, egad/ad/online.py); the e-graph also checkpoints the store-all
    gradient itself within the budget, and the one predicted faster is built;
    an optimization that holds more than the budget allows is extracted again with
    bytes held priced, else the checkpointed program is built.

    Example: `f = egad.optimize(egad.trace(loss, W, xs), wrt=(0,)); value, (dW,) = f(W, xs)`"""
    if not isinstance(program, Program):
        raise ArgumentError(message(f"egad.optimize needs an egad.Program, got {type(program).__name__}",
                                    instead="trace the function first: egad.optimize(egad.trace(fn, *args))"))
    families = _families(rules)
    from .tvm_bridge.targets import resolve

    resolve(target)  # unknown targets and missing codegens fail here, not at the first call
    whole = isinstance(memory_budget, (int, np.integer)) and not isinstance(memory_budget, bool)
    if memory_budget is not None and (not whole or memory_budget <= 0):
        raise ArgumentError(message(f"memory_budget={memory_budget!r} is not a positive whole number of bytes",
                                    instead="pass e.g. memory_budget=64 * 2**20, or None for store-all"))
    from .ad.api import differentiated_params
    from .interp import check_arguments

    if wrt is not None:
        differentiated_params(program, wrt)  # a wrong `wrt` fails here, not at the first call
    if example_args is not None:
        if not isinstance(example_args, (tuple, list)):
            raise ArgumentError(message(f"example_args is a {type(example_args).__name__}, not a tuple of arguments",
                                        instead="pass example_args=(arg0, arg1, ...), as to the program"))
        check_arguments(program, tuple(example_args))  # else both builds fail on them and nothing is checked
    return Optimized(program, wrt, target, has_aux, families, example_args, check,
                     None if memory_budget is None else int(memory_budget))


def _families(rules) -> tuple:
    """`rules` as a tuple of rule families (egad.rules.Family)."""
    from . import rules as registry

    if rules is None:
        return tuple(registry.default())
    if isinstance(rules, (str, registry.Family)):
        rules = (rules,)
    if not hasattr(rules, "__iter__"):
        raise ArgumentError(message(f"rules={rules!r} is not a collection of rule families",
                                    instead="pass egad.rules.default(), family names such as ('algebra', 'fusion'), "
                                            "or rules=() for no e-graph"))
    families = []
    for item in rules:
        if isinstance(item, str):
            try:
                item = registry.family_named(item)
            except KeyError as error:
                raise ArgumentError(message(str(error.args[0]), instead="pass egad.rules.default(), Family "
                                            "objects or family names, or rules=() for no e-graph")) from None
        if not isinstance(item, registry.Family):
            raise ArgumentError(message(f"rules= holds a {type(item).__name__}, not a rule family",
                                        instead="pass egad.rules.default(), Family objects or family names"))
        item.ruleset  # noqa: B018 - a rule egglog refuses raises RuleError here, not at the first call
        families.append(item)
    return tuple(families)
