"""What converted code calls (`egad.function`, egad/frontend/convert.py).

Each helper decides at run time: on concrete Python values it does exactly what
the Python statement would do (so static control flow is unrolled or pruned at
trace time, as the user wrote it); on traced values it records a combinator
(`cond`, `while_loop`, `fori_loop`) with the statement's assigned variables as
state.
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import operator
import re

import numpy as np

from ..errors import EgadError, LoopStateError, TracerConversionError, UnsupportedError, message
from ..ir.index_ranges import INDEX_OPS
from ..ir.types import TensorType
from ..pytree import flatten, unflatten
from ..source import SourceLoc, user_location
from . import context
from . import control
from . import numpy_api as enp
from .primitives import dtype_of, is_tracer
from .tracer import Tracer


# The variable that holds an early `return`'s value until the function's end. Unlike
# a user's variable it may be assigned on one path only: the other paths have not
# returned yet, and never read it.
RETURN_VALUE_PREFIX = "__egad_retval_"


class Undefined:
    """The value of a variable that has no value yet (assigned later, or only on
    some paths). Using it raises an EgadError that says why it is undefined."""

    __slots__ = ("name", "reason")

    def __init__(self, name: str, reason: str = ""):
        self.name = name
        self.reason = reason

    def _fail(self, *args, **kwargs):
        detail = f": {self.reason}" if self.reason else ""
        raise EgadError(message(f"variable {self.name!r} is used before it has a value{detail}",
                                instead="assign it before the if/loop, or in every branch"))

    __bool__ = __index__ = __int__ = __float__ = __iter__ = __len__ = __call__ = __getitem__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __matmul__ = __rmatmul__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __pow__ = __rpow__ = _fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __array__ = _fail

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._fail()

    def __repr__(self) -> str:
        return f"<undefined {self.name}>"


@dataclasses.dataclass(frozen=True)
class StatementInfo:
    """What the converter knew about a statement: where it is, which constructs in
    it cannot run under a traced condition, which names each branch assigns."""

    file: str
    line: int
    kind: str  # "if" | "while" | "for", or for `:=` in a lazy operand: "and" | "or" | "x if c else y"
    unconvertible: tuple[tuple[str, int], ...] = ()  # (construct, line)
    then_assigns: tuple[str, ...] = ()
    else_assigns: tuple[str, ...] = ()
    # An `if not flag:` that egad.function inserted to skip the rest of a block after
    # break/continue/return: its else path means "skipped", so a variable first
    # assigned in it keeps its value from the paths that did run (zeros before).
    guard: bool = False

    @property
    def construct(self) -> str:
        """How messages name the statement: `the if`, or the expression (`the `and``)."""
        return "an if" if self.kind == "if" else f"`{self.kind}`"

    @property
    def where(self) -> str:
        return SourceLoc(self.file, self.line).long()


_CONSTRUCTS = {"try": "a `try` statement", "global": "a `global` declaration", "nonlocal": "a `nonlocal` declaration",
               "yield": "a `yield`", "del": "a `del` statement",
               "global write": "an assignment to a global (or nonlocal) variable",
               "outer write call": "a call to a nested function that assigns a global (or nonlocal) variable"}


def _refuse_unconvertible(info: StatementInfo):
    if info.unconvertible:
        construct, line = info.unconvertible[0]
        article = "an" if info.kind == "if" else "a"
        raise UnsupportedError(message(
            f"{_CONSTRUCTS.get(construct, construct)} inside {article} `{info.kind}` on a traced value "
            f"(the {info.kind} at line {info.line}) cannot be converted",
            where=SourceLoc(info.file, int(line)).long(),
            instead=f"move it out of the {info.kind}, or make the condition a static Python value"))


def _carriable(value) -> bool:
    """Can this value be loop state or a branch output (a pytree of array-likes)?"""
    if isinstance(value, Undefined):
        return False
    leaves, _ = flatten(value)
    for leaf in leaves:
        if is_tracer(leaf) or isinstance(leaf, (bool, int, float, np.ndarray, np.generic)):
            continue
        return False
    return True


def result_or_none(returned, value, where: tuple):
    """The result of a converted function whose `return`s inside loops or branches became
    a flag, and that may fall off its end: `value` if a `return` ran, else None, as in
    Python. A traced flag (a `return` ran on some runs only) would make the result None
    on the others, which a program cannot return: refused."""
    if not is_tracer(returned):
        return value if returned else None
    name, file, return_line, end_line = where
    raise UnsupportedError(message(
        f"{name} returns from inside a loop or branch on a traced value (the return at line {return_line}) and can "
        "also reach its end without a `return`, where Python returns None: egad cannot return None on some runs "
        "and an array on others",
        where=SourceLoc(file, end_line, name).long(),
        instead=f"add a final `return` to {name} after line {end_line} with a value of the same type "
                "(e.g. `return enp.zeros_like(...)`)"))


# --- and / or / not / x if c else y ------------------------------------------------

def not_(value):
    """`not value`: Python's on concrete values, enp.logical_not on traced ones."""
    return enp.logical_not(value) if is_tracer(value) else not value


def and_(left, right, bound=None):
    """`left and right` (`right` a thunk, run only when Python would run it)."""
    return _short_circuit(left, right, bound, "and")


def or_(left, right, bound=None):
    """`left or right` (`right` a thunk, run only when Python would run it)."""
    return _short_circuit(left, right, bound, "or")


def _short_circuit(left, right, bound, op: str):
    """On a concrete `left`, Python's `and`/`or`. On a traced scalar `left`, a bool: a
    `cond` that runs `right` only on the path where Python would (so `i < n and x[i] > t`
    never reads x[n]). On a traced array `left`, logical_and/logical_or of both.

    `bound` is (names, values, file, line) when `right` assigns variables with `:=`:
    `right` then takes their values and returns (value, new values), and so does
    this function."""
    values = () if bound is None else bound[1]
    if not is_tracer(left):
        if bool(left) == (op == "and"):
            return right(*values)
        return left if bound is None else (left, values)
    combine = enp.logical_and if op == "and" else enp.logical_or
    if left.ndim != 0:
        if bound is None:
            return combine(left, right())
        value, values = right(*values)
        return combine(left, value), values
    runs_right = _truth(left) if op == "and" else enp.logical_not(_truth(left))
    skipped = op == "or"  # the value when `right` does not run
    neutral = not skipped  # `True and v`, `False or v`: v as a bool
    if bound is not None:
        names, _, file, line = bound
        # guard: a name bound only where `right` runs holds zeros on the other path, which never reads it
        info = StatementInfo(file=file, line=line, kind=op, then_assigns=(_RESULT, *names), else_assigns=(_RESULT,),
                             guard=True)

        def then_fn(_, *old):
            value, new = right(*old)
            return (combine(neutral, value), *new)

        results = if_stmt(runs_right, then_fn, lambda _, *old: (skipped, *old), (Undefined(_RESULT), *values),
                          (_RESULT, *names), info)
        return results[0], tuple(results[1:])
    if not _may_fail(right):  # pure arithmetic: computing it on both paths gives the same values, no branch
        return combine(left, right())
    evaluated = []

    def run_right():
        evaluated.append(combine(neutral, right()))
        return evaluated[-1]

    def skip():  # traced after run_right (egad.cond traces its branches in order)
        filled = _zeros_like_probe(evaluated[-1], f"the result of `{op}`")
        return enp.logical_not(filled) if skipped else filled

    return control.cond(runs_right, run_right, skip)


_RESULT = "__egad_result"


_COMPARISONS = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
                "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
                "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}


def compare_chain(left, ops, *operands):
    """`left ops[0] b ops[1] c ...` (`operands` are thunks of b, c, ...): as in Python,
    each operand runs once, and only while the comparisons before it hold (`and_`)."""
    right = operands[0]()
    result = _COMPARISONS[ops[0]](left, right)
    if len(ops) == 1:
        return result
    return and_(result, lambda: compare_chain(right, ops[1:], *operands[1:]))


def _may_fail(thunk) -> bool:
    """Does a trial trace of `thunk` (then dropped) record an op that can fail when run
    (an index read or write) or a loop or branch (which might not end)?"""
    with _probe() as builder:
        thunk()
    return _risky(builder.bindings)


@contextlib.contextmanager
def _probe():
    """A region for a trial trace, dropped after."""
    with context.open_region("probe") as builder:
        yield builder


def _risky(bindings) -> bool:
    return any(binding.op in INDEX_OPS or binding.regions for binding in bindings)


def _truth(value):
    """Python's truth of a traced scalar, as a traced bool (a float is true when
    non-zero, NaN too: `!=` is unordered)."""
    return value if value.type.dtype == "bool" else enp.not_equal(value, 0)


def _test(value):
    """An `if`/`while`/`x if c else y` test for egad's combinators: a traced scalar by
    Python's truth (they take bools and ints only); other values as they are, for the
    combinators' own errors (an array's truth is ambiguous)."""
    return _truth(value) if is_tracer(value) and value.type.shape == () else value


def if_exp(test, then_thunk, else_thunk, bound=None):
    """`then_thunk() if test else else_thunk()`. `bound` is as for `and_`."""
    values = () if bound is None else bound[1]
    if not is_tracer(test):
        return then_thunk(*values) if test else else_thunk(*values)
    if bound is None:
        return control.cond(_test(test), then_thunk, else_thunk)
    names, _, file, line = bound
    info = StatementInfo(file=file, line=line, kind="x if c else y", then_assigns=(_RESULT, *names),
                         else_assigns=(_RESULT, *names), guard=True)  # as for `and_`

    def branch(thunk):
        def run(_, *old):
            value, new = thunk(*old)
            return (value, *new)
        return run

    results = if_stmt(test, branch(then_thunk), branch(else_thunk), (Undefined(_RESULT), *values), (_RESULT, *names),
                      info)
    return results[0], tuple(results[1:])


def assert_(test_thunk, message_thunk=None):
    """`assert test`: checked on concrete values (shapes, static arguments). A traced
    test has no value while tracing, and the program has no op to check it when run:
    refused, as jax.jit refuses it, rather than dropped in silence."""
    value = test_thunk()
    if is_tracer(value):
        raise TracerConversionError(message(
            "assert on a traced value: it has no value while tracing, and egad cannot check it when the program runs",
            where=user_location().long(),
            instead="check the result after calling the program, or assert only on shapes and static values"))
    if not value:
        raise AssertionError(message_thunk() if message_thunk else None)


# --- if --------------------------------------------------------------------------------

def if_stmt(test, then_fn, else_fn, state: tuple, names: tuple, info: StatementInfo):
    """`if test: ... else: ...` assigning `names` (whose values are `state`)."""
    if not is_tracer(test):
        return then_fn(*state) if test else else_fn(*state)
    _refuse_unconvertible(info)
    state, outputs, one_sided = _settle_undefined(state, names, info, (then_fn, else_fn))
    operands = [k for k, v in enumerate(state) if _carriable(v)]
    outputs = sorted(set(operands) | set(outputs))
    untouchable = [k for k, v in enumerate(state) if k not in operands and not isinstance(v, Undefined)]

    def branch(fn, label):
        def run(*values):
            full = list(state)
            for k, value in zip(operands, values):
                full[k] = value
            out = fn(*full)
            for k in untouchable:
                if out[k] is not state[k]:
                    raise EgadError(message(
                        f"{names[k]!r} ({type(state[k]).__name__}) is reassigned inside {info.construct} "
                        "on a traced value",
                        where=info.where, instead="only arrays (and tuples/lists/dicts of them) can change there"))
            for k in outputs:
                if not _carriable(out[k]):
                    raise EgadError(message(
                        f"{names[k]!r} is not an array (or pytree of arrays) at the end of the {label} branch "
                        f"of {info.construct} on a traced value: {out[k]!r}", where=info.where,
                        instead="give it an array value in every branch"))
            return tuple(out[k] for k in outputs)

        return run

    results = control.cond(_test(test), branch(then_fn, "true"), branch(else_fn, "false"),
                           *[state[k] for k in operands])
    final = list(state)
    for k, value in zip(outputs, results):
        final[k] = value
    for k in one_sided:
        final[k] = Undefined(names[k], f"it is assigned in only one branch of {info.construct} on a traced value "
                                       f"at {info.where}")
    return tuple(final)


def _settle_undefined(state, names, info: StatementInfo, branches):
    """For variables the branches may assign that have no value yet, one trial trace
    of each branch (then dropped) tells which branches give them one:
    - all branches: an output of the if;
    - some: an early return's value, or a variable first assigned under a guard
      `if`, starts as zeros of that type (the other paths never read it); any other
      variable is undefined after the if (`one_sided`);
    - none (e.g. assignments pruned by static conditions): still undefined.
    Returns (state, outputs, one_sided)."""
    assigned = set(info.then_assigns) | set(info.else_assigns)
    undefined = [k for k, v in enumerate(state) if isinstance(v, Undefined) and names[k] in assigned]
    if not undefined:
        return state, [], []
    probes = []
    for fn in branches:
        with _probe():
            probes.append(fn(*state))
    state, outputs, one_sided = list(state), [], []
    for k in undefined:
        values = [out[k] for out in probes if _carriable(out[k])]
        fillable = names[k].startswith(RETURN_VALUE_PREFIX) or (info.guard and names[k] in info.then_assigns)
        if len(values) == len(probes):
            outputs.append(k)
        elif values and fillable:
            state[k] = _zeros_like_probe(values[0], names[k], state)
        elif values:
            one_sided.append(k)
    return tuple(state), outputs, one_sided


def _zeros_like_probe(value, name: str, sources=()):
    """Zeros with the structure, shapes and dtypes of a value from a trial trace. A
    symbolic dim takes its run-time size from a traced value of `sources` (or an
    argument of the traced function) that has the same dim."""
    leaves, tree = flatten(value)
    zeros = []
    for leaf in leaves:
        leaf_type = _leaf_type(leaf)
        shape, dtype = leaf_type.shape, leaf_type.dtype
        if all(isinstance(d, int) for d in shape):
            zeros.append(np.zeros(shape, dtype))
            continue
        sizes = [d if isinstance(d, int) else _symbol_size(d, sources) for d in shape]
        if any(size is None for size in sizes):
            raise EgadError(message(
                f"{name!r} is first assigned under a traced condition and has a symbolic shape {shape} whose "
                "size egad cannot find among the statement's values and the function's arguments, so it "
                "cannot give it a value on the other paths", instead=f"assign {name} before the if or loop"))
        zeros.append(enp.zeros(tuple(sizes), dtype))
    return unflatten(tree, zeros)


def _symbol_size(symbol: str, sources):
    """The run-time size of a symbolic dim (a traced int scalar that remembers the
    symbol), read from a traced value visible here that has the dim; None if none has."""
    here = context.current()
    root = here
    while root.parent is not None:
        root = root.parent
    candidates = [leaf for leaf in flatten(sources)[0] if is_tracer(leaf)]
    candidates += [Tracer(root, var) for var in root.params]
    for candidate in candidates:
        if candidate._builder.closed or not here.is_within(candidate._builder):
            continue
        if symbol in candidate.type.shape:
            return enp.dim_size(candidate, candidate.type.shape.index(symbol))
    return None


# --- loops -------------------------------------------------------------------------------

class TracedIterable:
    """What a `for` over traced values iterates: a trip count (a Python int or a traced
    int) and the element of trip `k` (`k` is traced inside the loop)."""

    def trip_count(self):
        raise NotImplementedError

    def value(self, k):
        raise NotImplementedError

    def sources(self) -> list:
        """The traced values it reads (where a symbolic dim's size can be found)."""
        raise NotImplementedError

    def __iter__(self):
        # Reached only when user code (a shadowed `zip`, say) iterates it in Python.
        count = self.trip_count()
        if not isinstance(count, int):
            raise TracerConversionError(message(
                f"a {type(self).__name__} over traced values has a traced length and cannot be iterated in Python",
                where=user_location().long(), instead="iterate it with a `for` statement in an egad.function"))
        return (self.value(k) for k in range(count))


class TracedRange(TracedIterable):
    """`range(start, stop, step)` with a traced bound (the step must be a static int)."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def sources(self) -> list:
        return [self.start, self.stop]

    def trip_count(self):
        if self.step > 0:
            return enp.maximum((self.stop - self.start + self.step - 1) // self.step, 0)
        return enp.maximum((self.start - self.stop - self.step - 1) // (-self.step), 0)

    def value(self, k):
        return self.start + k * self.step


def range_(*args):
    """`range(...)`: Python's range when every bound is static, else a TracedRange."""
    if not any(is_tracer(a) for a in args):
        return range(*args)
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    if is_tracer(step) or step == 0:
        raise EgadError(message("range() over traced bounds needs a static, non-zero step",
                                where=user_location().long(), instead="use a Python int step, e.g. range(0, n, 2)"))
    return TracedRange(start, stop, step)


class _Rows(TracedIterable):
    """The rows of a traced array (its first axis, static or symbolic), or the values
    of a Python range iterated beside traced values."""

    def __init__(self, values):
        if is_tracer(values) and values.ndim == 0:
            raise EgadError(message("cannot iterate over a traced scalar", where=user_location().long()))
        self.values = values

    def trip_count(self):
        return len(self.values) if isinstance(self.values, range) else self.values.shape[0]

    def value(self, k):
        if isinstance(self.values, range):
            return self.values.start + k * self.values.step
        return self.values[k]

    def sources(self) -> list:
        return [self.values]


class TracedEnumerate(TracedIterable):
    """`enumerate(xs, start)` over a traced sequence: trip `k` gives `(start + k, xs[k])`."""

    def __init__(self, sequence: TracedIterable, start):
        self.sequence, self.start = sequence, start

    def trip_count(self):
        return self.sequence.trip_count()

    def value(self, k):
        return self.start + k, self.sequence.value(k)

    def sources(self) -> list:
        return [*self.sequence.sources(), self.start]


class TracedZip(TracedIterable):
    """`zip(xs, ys, ...)` with a traced sequence among them: as many trips as the
    shortest (the minimum of the lengths, at run time when one is traced)."""

    def __init__(self, sequences: list[TracedIterable]):
        self.sequences = sequences

    def trip_count(self):
        counts = [sequence.trip_count() for sequence in self.sequences]
        static = [c for c in counts if isinstance(c, int)]
        traced = [c for c in counts if not isinstance(c, int)]
        count = min(static) if static else None
        for length in traced:
            count = length if count is None else enp.minimum(count, length)
        return count

    def value(self, k):
        return tuple(sequence.value(k) for sequence in self.sequences)

    def sources(self) -> list:
        return [source for sequence in self.sequences for source in sequence.sources()]


def _traced_sequence(value) -> TracedIterable | None:
    """`value` as a TracedIterable when a `for` over it must be a traced loop."""
    if isinstance(value, TracedIterable):
        return value
    if is_tracer(value):
        return _Rows(value)
    return None


def iterate_(callee, *args, **kwargs):
    """`enumerate(...)` or `zip(...)` as a `for` iterable: a traced loop sequence when
    the callee is the builtin and an argument is traced (an array's rows or a traced
    range); otherwise the call itself (plain Python, also for a user's own `zip`)."""
    if callee is builtins.enumerate and args and not isinstance(args[0], (list, tuple, dict)):
        sequence = _traced_sequence(args[0])
        if sequence is not None:
            start = args[1] if len(args) > 1 else kwargs.pop("start", 0)
            if len(args) > 2 or kwargs:
                return callee(*args, **kwargs)  # let Python name the wrong arguments
            return TracedEnumerate(sequence, start)
    if callee is builtins.zip and any(_traced_sequence(a) is not None for a in args):
        strict = kwargs.pop("strict", False)
        if kwargs:
            return callee(*args, **kwargs)
        sequences = []
        for position, value in enumerate(args):
            sequence = _traced_sequence(value)
            if sequence is None and isinstance(value, range):
                sequence = _Rows(value)
            if sequence is None:
                raise EgadError(message(
                    f"zip() over traced arrays with a {type(value).__name__} as argument {position + 1}: "
                    "egad loops over traced arrays, traced ranges and Python ranges",
                    where=user_location().long(), instead="pass it as an array (enp.asarray(...)) or zip only arrays"))
            sequences.append(sequence)
        zipped = TracedZip(sequences)
        if strict:
            counts = [sequence.trip_count() for sequence in sequences]
            if not all(isinstance(c, int) for c in counts):
                raise EgadError(message("zip(strict=True) over a traced length cannot be checked when tracing",
                                        where=user_location().long(), instead="drop strict=True"))
            if len(set(counts)) > 1:
                raise ValueError(f"zip() arguments have lengths {counts} (strict=True)")
        return zipped
    return callee(*args, **kwargs)


def while_stmt(cond_fn, body_fn, state: tuple, names: tuple, info: StatementInfo):
    """`while cond: body`: Python iterations while the condition is concrete; from the
    first traced condition on, a `while_loop` over the assigned variables."""
    state = tuple(state)
    while True:
        test = cond_fn(*state)
        if is_tracer(test):
            break
        if not test:
            return state
        state = tuple(body_fn(*state))
    _refuse_unconvertible(info)
    carried, initial = _loop_state(lambda *s: body_fn(*s), (), state, names, info, state)

    def full(values):
        return _full_state(state, carried, values, names, info)

    with _naming_state(carried, initial, names, info):
        results = control.while_loop(lambda values: _test(cond_fn(*full(values))),
                                     lambda values: _select(body_fn(*full(values)), carried, state, names, info),
                                     tuple(initial))
    return tuple(full(results))


def for_stmt(iterable, body_fn, state: tuple, names: tuple, info: StatementInfo):
    """`for target in iterable: body` (the body function assigns the target first)."""
    if is_tracer(iterable):
        if iterable.ndim == 0:
            raise EgadError(message("cannot iterate over a traced scalar", where=info.where))
        iterable = _Rows(iterable)
    if isinstance(iterable, TracedIterable):
        count, element, sources = iterable.trip_count(), iterable.value, iterable.sources()
    else:
        for item in iterable:
            state = tuple(body_fn(item, *state))
        return tuple(state)
    _refuse_unconvertible(info)
    carried, initial = _loop_state(lambda k, *s: body_fn(element(k), *s), (TensorType((), "int64", weak=True),),
                                   state, names, info, (state, sources))

    def full(values):
        return _full_state(state, carried, values, names, info)

    with _naming_state(carried, initial, names, info):
        results = control.fori_loop(0, count, lambda k, values: _select(body_fn(element(k), *full(values)), carried,
                                                                       state, names, info), tuple(initial))
    return tuple(full(results))


@contextlib.contextmanager
def _naming_state(carried, initial, names, info: StatementInfo):
    """Name the user's variable (not `state[k]`) in a loop state error from a traced loop."""
    try:
        yield
    except LoopStateError as error:
        match = re.fullmatch(r"state\[(\d+)\](.*)", error.leaf or "")
        if match is None or int(match.group(1)) >= len(carried):
            raise
        k, rest = int(match.group(1)), match.group(2)
        name = names[carried[k]]
        if name.startswith("__egad"):
            raise
        what = (f"variable `{name}{rest}` enters {error.body} as {error.entered} "
                f"but {error.body} returns {error.returned}")
        where = error.where or info.where
        shape_changed = error.changed == "shape"
        if shape_changed and not rest and not is_tracer(initial[k]) and np.ndim(initial[k]) == 0:
            instead = (f"{name} starts as a Python scalar ({initial[k]!r}) and becomes an array: start it as an array "
                       f"of its final shape, e.g. `{name} = enp.zeros_like(...)` of the value it is built from")
        elif shape_changed:
            instead = f"{name} must keep its shape across the loop's iterations; pad it to a fixed shape"
        else:
            instead = f"keep {name}'s dtype stable: start it with the dtype it gets in the loop, or .astype() it"
        raise LoopStateError(message(f"{what} (the {info.kind} loop at line {info.line})", where=where,
                                     instead=instead)) from None


def _full_state(state, carried, values, names, info: StatementInfo) -> list:
    """All the statement's variables inside (or after) a traced loop: the carried ones
    from `values`, the others as before, except that variables that had no value and
    are not carried exist only inside the loop."""
    out = list(state)
    for k in range(len(out)):
        if isinstance(out[k], Undefined) and k not in carried:
            out[k] = Undefined(names[k], _loop_local_reason(info))
    for k, value in zip(carried, values):
        out[k] = value
    return out


def _as_params(builder, value):
    """Fresh params of `builder` with the types of a (pytree) value's leaves."""
    leaves, tree = flatten(value)
    return unflatten(tree, [Tracer(builder, builder.add_param(_leaf_type(leaf))) for leaf in leaves])


def _leaf_type(leaf) -> TensorType:
    """The type a loop-state leaf (tracer, array or Python scalar) has when traced."""
    dtype, weak = dtype_of(leaf)
    return TensorType(leaf.type.shape if is_tracer(leaf) else np.shape(leaf), dtype, weak)


def _loop_local_reason(info: StatementInfo) -> str:
    return (f"it is first assigned inside the {info.kind} loop on a traced value at {info.where} and is not an array, "
            "so it exists only inside the loop")


def _select(out, carried, state, names, info):
    for k, value in enumerate(out):
        if k not in carried and not isinstance(state[k], Undefined) and value is not state[k]:
            raise EgadError(message(
                f"{names[k]!r} ({type(state[k]).__name__}) is reassigned inside a loop on a traced value",
                where=info.where, instead="only arrays (and tuples/lists/dicts of them) can change in such a loop"))
    return tuple(out[k] for k in carried)


def _loop_state(body, leading_types, state, names, info, sources) -> tuple[list[int], list]:
    """Which variables a traced loop carries, and their initial values. Variables
    with a value are carried as they are; variables first assigned in the body get
    their type from one trial trace of the body and start as zeros (Python would
    leave them unbound before the first iteration)."""
    carried = [k for k, v in enumerate(state) if _carriable(v)]
    undefined = [k for k, v in enumerate(state) if isinstance(v, Undefined)]
    initial = [state[k] for k in carried]
    if not undefined:
        return carried, initial
    with _probe() as builder:  # traced once to learn types, then dropped
        leading = [Tracer(builder, builder.add_param(t)) for t in leading_types]
        # carried values enter as traced params, as in the loop itself (a Python int
        # counter must not make the trial take a static branch the loop cannot)
        trial = list(state)
        for k in carried:
            trial[k] = _as_params(builder, state[k])
        out = body(*leading, *trial)
    probed = {}
    for k in undefined:
        if not isinstance(out[k], Undefined) and _carriable(out[k]):
            probed[k] = _zeros_like_probe(out[k], names[k], sources)
    carried = sorted(carried + list(probed))
    initial = [probed[k] if k in probed else state[k] for k in carried]
    return carried, initial
