"""Gradient checking against central finite differences (CONVENTIONS 4: the
interpreter is the oracle).

The recipe, used by the corpus and the random-program tests:

1. `to_float64(args)`: every float array (pytrees included) becomes float64, so a
   difference quotient with a step of 1e-6 keeps ~10 significant digits.
2. `scalar_loss(fn, seed)`: any pytree output becomes one float scalar,
   `sum_k sum(w_k * leaf_k)` with fixed random weights, so every float output leaf
   (and every entry of it) reaches the loss with a generic weight.
3. `assert_gradients_match(fn, args, wrt)`: trace, `egad.grad`, interpret, and compare
   with central differences of the *primal program* run by `egad.interpret`, entry by
   entry. The comparison is norm-wise over all requested gradients together:

       ||g - g_fd|| / max(||g_fd||, floor) <= rtol        (rtol = 1e-6)

   `floor` is the larger of an absolute 1e-8 and the finite differences' own
   resolution divided by rtol. Each difference quotient carries a rounding error
   of about `ulps * eps_machine * |f| / h`; below that, finite differences cannot
   tell a gradient from zero, so demanding 1e-6 relative agreement with their noise
   would fail correct gradients (e.g. the gradient w.r.t. the starting point of a
   converged Newton iteration, or `opcode_interpreter` whose whole gradient is
   ~2e-6). Measured on the corpus and 300 random programs with h = 1e-6, the
   error of correct gradients stayed below 2.2 x this bound at ulps = 1; ulps = 16
   leaves a 7x margin. Gradients larger than the floor are checked at the full
   1e-6; a smaller one is checked to ~16 ulps of |f| / h in absolute terms.

Same control path (`same_control_path`, `path_fingerprint`). A difference quotient
across a branch switch, a changed trip count or a kink of max/abs/... measures a
jump, not a derivative. For every perturbed entry the primal program is run at
x + h e_k and x - h e_k while recording a *path fingerprint*: every integer and
bool value any op computes (predicates, switch indices, trip counters, while
conditions, argmax/top_k indices, int casts), the selection pattern of the kinked
ops (maximum/minimum: sign(a - b); abs: sign(x); reduce_max/min: which entries
attain the extreme; floor, sign, float floordiv/mod: the piecewise-constant part),
plus the integer/bool leaves of the program's output. The recording wraps the
interpreter's per-op hook (`egad.interp._run_op`) for the duration of one run; should
that hook move, only the output leaves are fingerprinted and
`test_fingerprint_sees_a_branch_flip_a_trip_count_and_a_kink` fails, so the check
never weakens silently. Entries whose two
fingerprints differ are left out of the comparison (reported in the result), and a
second, op-independent net compares the one-sided differences: if
(f(x+h) - f(x)) / h and (f(x) - f(x-h)) / h disagree by more than a generous
tolerance, a jump lies between and the entry is left out too. When fewer than
`min_compared_fraction` of the entries remain, `NotComparable` is raised so callers
skip the point (pytest.skip) or draw another one (hypothesis.reject).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from typing import Any, Callable, Iterator, Sequence

import numpy as np

import egad
import egad.numpy as enp
from egad import interp as _interp
from egad.pytree import flatten, unflatten

RTOL = 1e-6
EPS = 1e-6
ABS_FLOOR = 1e-8
ROUNDING_ULPS = 16.0
# One-sided differences across a jump differ by ~jump / h (>= 1e3 for a jump of 1e-3);
# across a smooth point by ~h * f''. This threshold separates the two generously.
ONE_SIDED_TOLERANCE = 1e-2


class NotComparable(Exception):
    """Too few entries of the point took the same control path at x + h and x - h."""


# --- the scalar loss -----------------------------------------------------------------


def _leaf_shape_dtype(leaf) -> tuple[tuple, np.dtype]:
    if hasattr(leaf, "type") and hasattr(leaf.type, "shape"):  # a tracer
        shape = tuple(leaf.type.shape)
        if not all(isinstance(d, int) for d in shape):
            raise ValueError(f"scalar_loss needs static output shapes, got {leaf.type}")
        return shape, np.dtype(leaf.type.dtype)
    value = np.asarray(leaf)
    return value.shape, value.dtype


def scalar_loss(fn: Callable, out_weights_seed: int) -> Callable:
    """`fn` with its (pytree) output reduced to one float scalar:
    `sum_k enp.sum(w_k * leaf_k)` over the float leaves, with fixed random weights
    `w_k` (numpy constants of each leaf's shape and dtype). Integer and bool leaves
    are ignored. A plain Python function, so it traces and runs eagerly.

    Example: `egad.trace(scalar_loss(program.fn, 0), *args)`"""
    weights: dict[tuple, np.ndarray] = {}

    def weight(k: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        key = (k, shape, dtype.str)
        if key not in weights:
            rng = np.random.default_rng([out_weights_seed, k])
            weights[key] = np.asarray(rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape), dtype)
        return weights[key]

    def loss(*args):
        leaves, _ = flatten(fn(*args))
        total = None
        for k, leaf in enumerate(leaves):
            shape, dtype = _leaf_shape_dtype(leaf)
            if dtype.kind != "f":
                continue
            term = enp.sum(leaf * weight(k, shape, dtype))
            total = term if total is None else total + term
        if total is None:
            raise ValueError("scalar_loss: the function has no float output")
        return total

    loss.__name__ = f"scalar_loss_{getattr(fn, '__name__', 'fn')}"
    return loss


# --- float64 arguments ---------------------------------------------------------------


def _to_float64_leaf(leaf):
    if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
        return leaf.astype(np.float64)
    if isinstance(leaf, np.floating):
        return np.float64(leaf)
    return leaf  # ints, bools, Python scalars (floats are already double)


def to_float64(args: Sequence, argnums: Sequence[int] | None = None) -> tuple:
    """The arguments with float arrays (inside pytrees too) cast to float64. With
    `argnums` only those arguments are cast; by default every argument is, since a
    float32 constant argument would still round the loss at 1e-7."""
    chosen = range(len(args)) if argnums is None else set(argnums)
    out = []
    for k, arg in enumerate(args):
        if k in chosen:
            leaves, tree = flatten(arg)
            arg = unflatten(tree, [_to_float64_leaf(leaf) for leaf in leaves])
        out.append(arg)
    return tuple(out)


# --- perturbing one entry ------------------------------------------------------------


def _is_float_leaf(leaf) -> bool:
    return isinstance(leaf, float) or (np.asarray(leaf).dtype.kind == "f" and not isinstance(leaf, (bool, int)))


def float_entries(arg) -> list[tuple[int, int]]:
    """(leaf, flat index) of every float entry of a pytree argument."""
    leaves, _ = flatten(arg)
    return [(k, j) for k, leaf in enumerate(leaves) if _is_float_leaf(leaf) for j in range(np.size(leaf))]


def _step(value: float, eps: float) -> float:
    """A step of relative size eps for large entries, absolute for small ones."""
    return eps * max(1.0, abs(value))


def _perturbed(args: tuple, argnum: int, leaf_index: int, flat_index: int, delta: float) -> tuple:
    leaves, tree = flatten(args[argnum])
    leaf = leaves[leaf_index]
    if isinstance(leaf, float) or np.ndim(leaf) == 0 and not isinstance(leaf, np.ndarray):
        new_leaf = type(leaf)(leaf + delta) if isinstance(leaf, (float, np.floating)) else leaf + delta
    else:
        new_leaf = np.array(leaf, copy=True)
        new_leaf.reshape(-1)[flat_index] += delta
    leaves = list(leaves)
    leaves[leaf_index] = new_leaf
    return args[:argnum] + (unflatten(tree, leaves),) + args[argnum + 1:]


def _entry_value(args: tuple, argnum: int, leaf_index: int, flat_index: int) -> float:
    leaves, _ = flatten(args[argnum])
    return float(np.asarray(leaves[leaf_index]).reshape(-1)[flat_index])


def _gradient_like(arg, values: dict[tuple[int, int], float], fill: float = np.nan):
    """A pytree shaped like `arg` (float64 arrays per float leaf, None elsewhere)."""
    leaves, tree = flatten(arg)
    out = []
    for k, leaf in enumerate(leaves):
        if not _is_float_leaf(leaf):
            out.append(None)
            continue
        grad = np.full(np.shape(leaf), fill, np.float64)
        flat = grad.reshape(-1)
        for j in range(flat.size):
            if (k, j) in values:
                flat[j] = values[(k, j)]
        out.append(grad)
    return unflatten(tree, out)


def central_difference(f: Callable, args: Sequence, argnum: int, eps: float = EPS):
    """Numerical gradient of the scalar `f(*args)` w.r.t. `args[argnum]` (a pytree of
    float arrays / Python floats), entry by entry:
    `(f(x + h e_k) - f(x - h e_k)) / 2h` with `h = eps * max(1, |x_k|)`.
    Returns float64 arrays in the argument's structure (None at non-float leaves).

    Example: `central_difference(lambda *a: egad.interpret(primal, *a), args, 0)`"""
    args = tuple(args)
    values = {}
    for leaf_index, flat_index in float_entries(args[argnum]):
        h = _step(_entry_value(args, argnum, leaf_index, flat_index), eps)
        plus = float(f(*_perturbed(args, argnum, leaf_index, flat_index, +h)))
        minus = float(f(*_perturbed(args, argnum, leaf_index, flat_index, -h)))
        values[(leaf_index, flat_index)] = (plus - minus) / (2 * h)
    return _gradient_like(args[argnum], values)


# --- the control path of one run ----------------------------------------------------


def _record_decisions(binding, inputs: list[np.ndarray], outputs: list[np.ndarray], digest) -> None:
    """Feed `digest` what decides the control path / the smooth piece at this op."""
    op = binding.op

    def feed(value) -> None:
        value = np.ascontiguousarray(value)
        digest.update(f"{op}{value.shape}{value.dtype.str}".encode())
        digest.update(value.tobytes())

    for out in outputs:
        if out.dtype.kind in "biu":
            feed(out)
    if not outputs or outputs[0].dtype.kind != "f":
        return
    if op in ("maximum", "minimum"):
        feed(np.sign(inputs[0] - inputs[1]))
    elif op == "abs":
        feed(np.sign(inputs[0]))
    elif op in ("floor", "sign", "floordiv"):
        feed(outputs[0])
    elif op == "mod":
        feed(np.floor(inputs[0] / inputs[1]))
    elif op in ("reduce_max", "reduce_min"):
        axes = tuple(binding.attrs["axes"])
        extreme = (np.max if op == "reduce_max" else np.min)(inputs[0], axis=axes, keepdims=True)
        feed(inputs[0] == extreme)


def _fingerprinting_supported() -> bool:
    return callable(getattr(_interp, "_run_op", None))


@contextlib.contextmanager
def _observing_ops(observe) -> Iterator[None]:
    """Wrap the interpreter's per-op hook so that `observe(binding, inputs, outputs)`
    sees every op it runs."""
    original = _interp._run_op

    def run_op(binding, inputs):
        outputs = original(binding, inputs)
        observe(binding, inputs, outputs)
        return outputs

    _interp._run_op = run_op
    try:
        yield
    finally:
        _interp._run_op = original


def _fingerprinting(digest):
    """Every op's decisions reach `digest`."""
    return _observing_ops(lambda binding, inputs, outputs: _record_decisions(binding, inputs, outputs, digest))


def run_with_fingerprint(program: egad.Program, args: Sequence) -> tuple[Any, str]:
    """`egad.interpret(program, *args)` and the fingerprint of the control path it took."""
    digest = hashlib.blake2b(digest_size=16)
    if _fingerprinting_supported():
        with _fingerprinting(digest):
            out = egad.interpret(program, *args)
    else:  # the hook moved: only the output's ints below (the fingerprint self-test then fails)
        out = egad.interpret(program, *args)
    for leaf in flatten(out)[0]:
        value = np.asarray(leaf)
        if value.dtype.kind in "biu":
            digest.update(value.tobytes())
    return out, digest.hexdigest()


_COMPARISONS = ("gt", "ge", "lt", "le", "eq", "ne")


def run_with_decision_margin(program: egad.Program, args: Sequence) -> tuple[Any, float]:
    """`egad.interpret(program, *args)` and the smallest gap |a - b| / max(|a|, |b|, 1)
    of any float comparison it makes (inf when it makes none). A gap within rounding
    (a sum of centered values, exactly 0 in real arithmetic, compared with 0) means the
    branch is decided by the order of float operations: a compiled program may sum in
    another order and go the other way, and neither result is wrong."""
    smallest = [np.inf]

    def observe(binding, inputs, outputs):
        if binding.op in _COMPARISONS and inputs and np.asarray(inputs[0]).dtype.kind == "f":
            a, b = (np.asarray(x, np.float64) for x in inputs[:2])
            gap = np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1.0)
            if gap.size:
                smallest[0] = min(smallest[0], float(np.min(gap)))

    with _observing_ops(observe):
        out = egad.interpret(program, *args)
    return out, smallest[0]


def path_fingerprint(program: egad.Program, args: Sequence) -> str:
    """A digest of every control decision and kink selection of one interpreted run."""
    return run_with_fingerprint(program, args)[1]


def same_control_path(program: egad.Program, args_plus: Sequence, args_minus: Sequence) -> bool:
    """Whether the primal `program` takes the same trip counts, branches and kink
    pieces at the two points (see the module docstring)."""
    return path_fingerprint(program, args_plus) == path_fingerprint(program, args_minus)


def _scalar_of(out) -> float:
    leaves, _ = flatten(out)
    return float(np.asarray(leaves[0]))


# --- the check ------------------------------------------------------------------------


@dataclasses.dataclass
class GradientCheck:
    """What `assert_gradients_match` compared."""

    grads: tuple  # AD gradients, one per wrt
    numerical: tuple  # central differences (NaN where left out), one per wrt
    error: float  # ||g - g_fd|| / max(||g_fd||, floor) over the compared entries
    floor: float
    compared: int
    left_out: list  # (argnum, leaf, flat index, why)
    value: float

    def describe(self) -> str:
        return (f"norm-wise relative error {self.error:.3g} (floor {self.floor:.3g}), "
                f"{self.compared} entries compared, {len(self.left_out)} left out")


def _flat_float(tree) -> np.ndarray:
    leaves, _ = flatten(tree)
    parts = [np.asarray(leaf, np.float64).reshape(-1) for leaf in leaves if leaf is not None]
    return np.concatenate(parts) if parts else np.zeros(0)


def _check_gradient_structure(grad, arg, argnum: int) -> None:
    """The contract: a gradient has its argument's structure, shapes and dtypes."""
    got_leaves, got_tree = flatten(grad)
    want_leaves, want_tree = flatten(arg)
    where = f"gradient of argument {argnum}"
    assert got_tree == want_tree, f"{where}: structure {got_tree} != argument's {want_tree}"
    for k, (g, a) in enumerate(zip(got_leaves, want_leaves)):
        want_dtype = np.asarray(a).dtype  # a Python float is float64
        assert np.shape(g) == np.shape(a), f"{where} leaf {k}: shape {np.shape(g)} != {np.shape(a)}"
        assert np.asarray(g).dtype == want_dtype, f"{where} leaf {k}: dtype {np.asarray(g).dtype} != {want_dtype}"


def check_gradients(fn: Callable, args: Sequence, wrt: Sequence[int], *, static_argnums: Sequence[int] = (),
                    rtol: float = RTOL, eps: float = EPS, abs_floor: float = ABS_FLOOR,
                    min_compared_fraction: float = 0.5, primal: egad.Program | None = None,
                    grads: tuple | None = None) -> GradientCheck:
    """Trace `fn` (a scalar loss), differentiate w.r.t. `wrt`, and compare with central
    differences of the primal program. Raises `NotComparable` when too few entries
    keep their control path under perturbation; returns the comparison (the caller
    asserts on `.error`). `grads` checks gradients computed elsewhere (e.g. by a
    compiled program) instead of interpreting `egad.grad` of the primal."""
    args = tuple(args)
    wrt = tuple(wrt)
    if primal is None:
        primal = egad.trace(fn, *args, static_argnums=tuple(static_argnums))
    if grads is None:
        grads = egad.interpret(egad.grad(primal, wrt=wrt), *args)
    assert isinstance(grads, tuple) and len(grads) == len(wrt), \
        f"egad.grad(wrt={wrt}) should return a tuple of {len(wrt)} gradients, got {type(grads).__name__}"
    for g, argnum in zip(grads, wrt):
        _check_gradient_structure(g, args[argnum], argnum)

    value_out, base_print = run_with_fingerprint(primal, args)
    value = _scalar_of(value_out)
    numerical, left_out, compared_g, compared_fd = [], [], [], []
    noise_sq, total = 0.0, 0
    for g, argnum in zip(grads, wrt):
        values: dict[tuple[int, int], float] = {}
        g_leaves, _ = flatten(g)
        for leaf_index, flat_index in float_entries(args[argnum]):
            total += 1
            h = _step(_entry_value(args, argnum, leaf_index, flat_index), eps)
            out_plus, print_plus = run_with_fingerprint(primal, _perturbed(args, argnum, leaf_index, flat_index, +h))
            out_minus, print_minus = run_with_fingerprint(primal, _perturbed(args, argnum, leaf_index, flat_index, -h))
            plus, minus = _scalar_of(out_plus), _scalar_of(out_minus)
            where = (argnum, leaf_index, flat_index)
            if print_plus != print_minus:
                left_out.append((*where, "control path differs at x+h and x-h"))
                continue
            forward, backward = (plus - value) / h, (value - minus) / h
            if abs(forward - backward) > ONE_SIDED_TOLERANCE * max(1.0, abs(forward), abs(backward)):
                left_out.append((*where, f"one-sided differences disagree ({forward:.6g} vs {backward:.6g})"))
                continue
            fd = (plus - minus) / (2 * h)
            values[(leaf_index, flat_index)] = fd
            compared_fd.append(fd)
            compared_g.append(float(np.asarray(g_leaves[leaf_index], np.float64).reshape(-1)[flat_index]))
            scale = max(abs(plus), abs(minus), abs(value), 1.0)
            noise_sq += (ROUNDING_ULPS * np.finfo(np.float64).eps * scale / h) ** 2
        numerical.append(_gradient_like(args[argnum], values))

    compared = len(compared_fd)
    if total and compared < min_compared_fraction * total:
        raise NotComparable(f"only {compared} of {total} entries keep their control path under a step of {eps}: "
                            + "; ".join(str(x) for x in left_out[:5]))
    g_vec, fd_vec = np.asarray(compared_g), np.asarray(compared_fd)
    floor = max(abs_floor, float(np.sqrt(noise_sq)) / rtol)
    error = float(np.linalg.norm(g_vec - fd_vec) / max(float(np.linalg.norm(fd_vec)), floor)) if compared else 0.0
    return GradientCheck(tuple(grads), tuple(numerical), error, floor, compared, left_out, value)


def assert_gradients_match(fn: Callable, args: Sequence, wrt: Sequence[int], *, rtol: float = RTOL,
                           context: str = "", **options) -> GradientCheck:
    """Assert that `egad.grad` of the traced scalar `fn` matches central differences
    norm-wise to `rtol` (see the module docstring). Raises `NotComparable` at points
    where too many entries change control path under perturbation.

    Example: `assert_gradients_match(scalar_loss(fn, 0), to_float64(args), wrt=(0, 1))`"""
    result = check_gradients(fn, args, wrt, rtol=rtol, **options)
    if result.error > rtol:
        lines = [f"{context}: gradient does not match central differences: {result.describe()}"]
        for argnum, g, fd in zip(wrt, result.grads, result.numerical):
            g_vec, fd_vec = _flat_float(g), _flat_float(fd)
            keep = ~np.isnan(fd_vec)
            diff = np.abs(g_vec[keep] - fd_vec[keep])
            worst = int(np.argmax(diff)) if diff.size else -1
            lines.append(f"  argument {argnum}: |g - fd| = {np.linalg.norm(diff):.3g}, |fd| = "
                         f"{np.linalg.norm(fd_vec[keep]):.3g}"
                         + (f", worst entry {worst}: g={g_vec[keep][worst]:.10g} fd={fd_vec[keep][worst]:.10g}"
                            if worst >= 0 else ""))
            lines.append(f"    g  = {np.array2string(g_vec, precision=6, max_line_width=200)}")
            lines.append(f"    fd = {np.array2string(fd_vec, precision=6, max_line_width=200)}")
        raise AssertionError("\n".join(lines))
    return result
