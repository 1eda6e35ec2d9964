"""batching: per-step work on rows of an invariant table becomes one batched op before the loop.

The cuDNN RNN trick, found by rewriting: in `h = tanh(xs[t] @ U + h @ W)` the input
projection `xs[t] @ U` depends on the step only through the row `xs[t]` of the
invariant `xs`, so `xs @ U` can be computed once, as one large matmul, and the loop
reads its rows: `take(X, i) @ U -> take(X @ U, i)`. No rule moves anything: the new
`X @ U` reads no `Arg` of the loop, so decoding places it before the loop
(egad/egraph/placement.py), and only the row read stays inside.

Assumes `take` along axis 0 and the `invariant_in`/`rank_of` facts of
egad/egraph/analysis.py. Shapes: for X of rank >= 2 and U of rank 1 or 2, axis 0 of X
is never the contracted axis and `X @ U` keeps it in front, so taking rows commutes
with the product (any index shape). The batched op computes rows the loop may never
read (a loop that stops early): the cost model weighs that; only total functions are
batched, so no unread row can raise. A take out of range raises in both forms.

`batch-weight-gradient` (a loop transformer) does the same for the weight gradients of
a reverse loop: `dW' = dW + h_t^T @ dz_t` per step becomes `dW0 + einsum('tki,tkj->ij',
hs, dzs)` after a new loop that carries everything but dW and stacks h_t and dz_t as
outputs (`ys`): one large contraction instead of a transpose, a matmul and an add per
step, and a carried state fewer. The new loop is a copy of the old one (a region of its
own: the classes that read the loop's Args, each through its earliest recorded node,
with the Args renumbered); every output of the old loop is unioned with the new loop's
(the kept state and ys with its Gets, each batched accumulator with `acc0 + contraction`),
so an extraction can take all of them from the new loop. An output (ys) that is a
contraction of rows the new loop stacks anyway (AD's `dx_t = dz_t @ W.T` beside
`dW += x_t^T @ dz_t`: a scan's input gradient) is computed after the loop too, as one
einsum that keeps the step axis, and the new loop no longer computes it.

Assumes: a `for` loop (its `trip_dim` attribute set: the stacked outputs' first dim), an
accumulator whose update is `add(Arg(acc), step)` (either order, same dtype) with the
step a contraction of per-step values: a matmul of rank-2 operands (transposes
peeled), an einsum, a reduce_sum, under reshapes; an operand that reads no Arg of the
loop is not stacked, and neither is `take(X, i, axis=0)` of an invariant X at the
counter of a loop from 0 over all of X's rows: its stacked rows are X (the input
gradient's `xs[t]`, which AD reads again rather than tapes). The step may also be
scatters of such contractions at constant rows, in range, `index_add(..index_add(Z, r1,
c1).., rn, cn)` into an all-zero Z, or the update `index_add(..index_add(Arg(acc), r1,
c1).., rn, cn)` itself: the adjoint of reading rows `b[0]` .. `b[3]` of one bias weight
(an LSTM's gates), with `scatter-into-sum`. A scatter is linear in its values, so all
steps' scatters are the same chain of the values' sums, into acc0 after the loop; a
row that is not a constant (an argument) could be out of range where a loop that runs
no trip never scatters, so it stays; so does a contraction with an invariant factor that
may raise (`X[j] @ dz_t`), unless the loop surely runs. Nothing the new loop
computes (the other state, the ys, the stacked operands) may read a batched
accumulator: an accumulator read elsewhere stays in the loop, and the others are
checked again. The body holds no control node and no
tape allocation. Sums are reassociated (the rounding of float sums differs in the last
bits); a loop that runs zero times gives `acc0 + 0` (a `-0.0` becomes `0.0`). Both loops
pop the same tapes, so an extraction must take every output from one of them: the
extractor keeps tapes linear (egad/extract.py).
"""
from __future__ import annotations

import dataclasses
import string

import numpy as np
from egglog import i64, var, vars_

from egad.egraph.analysis import invariant_in, rank_of
from egad.egraph.attrs import NO_ATTRS, attrs_node
from egad.egraph.enode import ClassId, ENode
from egad.egraph.language import Term, op
from egad.egraph.placement import may_raise, surely_runs
from egad.errors import EgadError
from egad.ir import ops
from egad.ir.types import TensorType

from .loop_body import copy_loop, loop_body
from .patterns import INT_DTYPES, constant_integers, int_constant, is_index_add, is_zeros, op_node
from .registry import family, rewrite

BATCHING = family("batching", __doc__)

table, weights, index = vars_("table weights index", Term)
loop = var("loop", i64)

BATCHING.rewrites(
    "batch-input-projection", "take(X, i) @ U = take(X @ U, i) for invariant X, U: one batched matmul "
                              "before the loop instead of one small matmul per step",
    rewrite(op.matmul(op.take(table, index, axis=0), weights)).to(
        op.take(op.matmul(table, weights), index, axis=0), invariant_in(table, loop), invariant_in(weights, loop),
        rank_of(table) >= i64(2), rank_of(weights) <= i64(2)))

# Elementwise functions defined (and finite) everywhere, so rows the loop never reads cannot fail.
_TOTAL_UNARY = ("neg", "abs", "tanh", "sigmoid", "sin", "cos")

BATCHING.rewrites(
    "batch-elementwise-rows", "f(take(X, i)) = take(f(X), i) for an invariant X and an elementwise total f: "
                              "one kernel over all rows before the loop",
    *(rewrite(getattr(op, name)(op.take(table, index, axis=0))).to(
        op.take(getattr(op, name)(table), index, axis=0), invariant_in(table, loop))
      for name in _TOTAL_UNARY))


# --- batch-weight-gradient: a loop transformer ------------------------------------------------

_LETTERS = string.ascii_lowercase + string.ascii_uppercase
MAX_RESHAPES = 4  # reshapes peeled off a step's contribution (AD writes one: the bias gradient's)
MAX_SCATTERS = 16  # index_adds followed down one chain (an LSTM's bias gradient: one per gate)


@dataclasses.dataclass(frozen=True)
class _Contraction:
    """A step's contribution to an accumulator, `reshape?(einsum(terms -> output, *leaves))`:
    each leaf a class, each term its subscripts within one step."""

    leaves: tuple[tuple[ClassId, str], ...]
    output: str
    reshape: tuple | None  # the contribution's shape, where the einsum's differs (keepdims, a reshape)


@dataclasses.dataclass(frozen=True)
class _Scatters:
    """A step's contribution as scatters, `index_add(...index_add(base, r1, c1)..., rn, cn)`
    at constant rows, each value a contraction, into all zeros or into the accumulator
    itself: the adjoint of reading rows of a weight (`b[0]`, ..., `b[3]`, an LSTM's
    gate biases). A scatter is linear in its values, so the sum over all steps is the
    same chain, into acc0, of each value's sum over the steps."""

    parts: tuple[tuple[ClassId, ClassId, _Contraction], ...]  # (attrs, rows, value), innermost first

    @property
    def contractions(self) -> list[_Contraction]:
        return [value for _, _, value in self.parts]


def _contractions(plan) -> list[_Contraction]:
    return plan.contractions if isinstance(plan, _Scatters) else [plan]


@BATCHING.transformer("batch-weight-gradient",
                      "acc' = acc + A_t^T @ B_t in a for loop = acc0 + einsum('tbi,tbj->ij', As, Bs) after it: "
                      "one large contraction instead of a small matmul, a transpose and an add per step",
                      finite_only=True)
def batch_weight_gradients(view) -> int:
    snapshot = view.snapshot
    outputs = view.outputs()  # loop class -> {output index: its Get class}
    batched, touched = 0, set()
    for cid, members in snapshot.nodes.items():
        for node in members:
            gets = outputs.get(cid, {})
            if node.head != "For" or not gets or touched & set(gets.values()) or _batched_already(view, gets):
                continue
            if _batch(view, node, gets):
                touched.update(gets.values())
                batched += 1
    return batched


def _batched_already(view, gets: dict[int, ClassId]) -> bool:
    """The loop's outputs already hold this rule's nodes: it is an old loop or the new one."""
    origins = view.editor.origins
    return any(origins.get(n) is not None and origins[n].site == view.site
               for get in gets.values() for n in view.snapshot.nodes[get])


def _batch(view, loop: ENode, gets: dict[int, ClassId]) -> bool:
    snapshot, types = view.snapshot, view.types
    region, lo, hi, inits, results, attrs_class = loop.args
    if view.attrs(attrs_class).get("trip_dim") is None:
        return False  # stacked outputs need the trip count as a dim
    n_state = len(inits)
    invariant = view.facts.invariant.get(region, set())
    plans: dict[int, tuple[_Contraction, bool]] = {}  # state k -> (its contraction, acc written first)
    for k in range(n_state):
        acc = snapshot.index.get(ENode("Arg", (region, 1 + k)))
        acc_type = types.get(acc)
        if acc is None or not isinstance(acc_type, TensorType) or not _same_type(types.get(results[k]), acc_type):
            continue
        for node in snapshot.nodes[results[k]]:
            if node.head != "Op2" or node.args[0] != "add" or acc not in node.args[2:]:
                continue
            first, second = node.args[2:]
            step = second if first == acc else first
            step_type = types.get(step)
            if step == acc or not isinstance(step_type, TensorType) or step_type.dtype != acc_type.dtype:
                continue
            plan = _contraction(view, step, invariant) or _scatters(view, step, invariant, is_zeros)
            if plan is not None:
                plans[k] = (plan, first == acc)
                break
        else:  # `acc' = index_add(...index_add(acc, r1, c1)..., rn, cn)` (`scatter-into-sum` writes it)
            plan = _scatters(view, results[k], invariant, lambda node: node == ENode("Arg", (region, 1 + k)))
            if plan is not None:
                plans[k] = (plan, True)
    # a sum of one per-step value (a bias gradient, a running loss) is cheap in the loop;
    # batching it pays only when that value is stacked for a product anyway
    stacked_for_products = {leaf for plan, _ in plans.values() for part in _contractions(plan)
                            if len(part.leaves) > 1 for leaf, _ in part.leaves}
    plans = {k: (plan, first) for k, (plan, first) in plans.items()
             if all(len(part.leaves) > 1 or all(leaf in stacked_for_products for leaf, _ in part.leaves)
                    for part in _contractions(plan))}
    # after the loop, the contraction computes its invariant leaves even where the loop
    # runs no trip: one that may raise (`X[j]`) stays in a loop that may not run
    may_not_run = not surely_runs(lo, hi, lambda cid: snapshot.nodes.get(cid, ()))

    def raises(plan) -> bool:
        return may_not_run and any(leaf in invariant and may_raise(snapshot, leaf)
                                   for part in _contractions(plan) for leaf, _ in part.leaves)

    plans = {k: entry for k, entry in plans.items() if not raises(entry[0])}
    # the new loop computes everything but the batched accumulators and outputs (a batched
    # output reads only the stacked leaves): none of it may read a batched accumulator
    ys = list(results[n_state:])
    while plans:
        kept = [k for k in range(n_state) if k not in plans]
        ys_plans = {j: plan for j, plan in _stacked_output_plans(view, ys, set(_stacked(plans, invariant)),
                                                                 invariant).items() if not raises(plan)}
        kept_ys = [j for j in range(len(ys)) if j not in ys_plans]
        starts = [results[k] for k in kept] + [ys[j] for j in kept_ys] + _stacked(plans, invariant)
        walked = loop_body(view, region, starts, invariant)
        if walked is None:
            return False
        body, reads = walked
        unsafe = {k for k in plans if 1 + k in reads}
        if not unsafe:
            break
        for k in unsafe:
            del plans[k]
    if not plans:
        return False

    stacked_ys = [ys[j] for j in kept_ys]
    whole = {leaf: rows for leaf in _stacked(plans, invariant)
             if (rows := _rows_of_invariant(view, region, lo, hi, leaf, invariant)) is not None}
    # a leaf the loop stacks already is reused; one that is a row of an invariant is not stacked
    stacked = [c for c in _stacked(plans, invariant) if c not in stacked_ys and c not in whole]
    new_results = [results[k] for k in kept] + stacked_ys + stacked
    new_loop = copy_loop(view, view.snapshot.index[loop], loop, body, new_results, kept)
    outputs = [ENode("Get", (new_loop, j)) for j in range(len(new_results))]
    rows = {cid: outputs[len(kept) + j] for j, cid in enumerate(stacked_ys + stacked)}  # a per-step value -> its rows
    rows.update(whole)
    for k, get in sorted(gets.items()):
        if k >= n_state and k - n_state in ys_plans:
            view.union(get, _batched(view, ys_plans[k - n_state], rows, invariant, keep_steps=True))
        elif k >= n_state:
            view.union(get, outputs[len(kept) + kept_ys.index(k - n_state)])
        elif k not in plans:
            view.union(get, outputs[kept.index(k)])
    for k, (plan, acc_first) in sorted(plans.items()):
        if k in gets and isinstance(plan, _Scatters):
            view.union(gets[k], _scattered(view, plan, rows, invariant, inits[k]))
        elif k in gets:  # an accumulator nothing reads is just dropped
            total = _batched(view, plan, rows, invariant)
            view.union(gets[k], ENode("Op2", ("add", NO_ATTRS, *((inits[k], total) if acc_first else
                                                                  (total, inits[k])))))
    return True


@BATCHING.transformer("stacked-rows-in-counter-order",
                      "index_add(x, is, ys) = x + ys where `is` stacks the counter of a for loop from 0 over x's "
                      "rows: a scan's input gradient is one add, not a search of every row or a serial scatter")
def stacked_rows_in_counter_order(view) -> int:
    """AD of a scan (`xs[t]` read at step t) stacks each step's row gradient and its
    index `t`, then scatters the rows into the input's gradient after the reverse loop.
    A loop from 0 to n stacks the value of iteration i at row i (`ys[i - lo]`, whatever
    its direction: docs/ir.md), so its stacked counter is 0, 1, ..., n-1, and
    adding rows at those indices into an x of n rows adds row r to row r: the values
    must have x's type exactly. Bit-identical."""
    counters = _stacked_counters(view)
    if not counters:
        return 0
    fused = 0
    for cid, members in view.snapshot.nodes.items():
        for node in members:
            if node.head != "Op3" or node.args[0] != "index_add" or node.args[3] not in counters:
                continue
            target, values = node.args[2], node.args[4]
            target_type = view.types.get(target)
            if view.attrs(node.args[1]).get("axis") != 0 or not _same_type(target_type, view.types.get(values)) \
                    or target_type.shape[0] != counters[node.args[3]]:
                continue
            add = ENode("Op2", ("add", NO_ATTRS, target, values))
            if view.snapshot.index.get(add) != cid:
                view.union(cid, add)
                fused += 1
    return fused


def _stacked_counters(view) -> dict[ClassId, int]:
    """The class of each stacked counter of a for loop from constant 0 to constant n -> n."""
    snapshot = view.snapshot
    counters = {}
    for loop_class, members in snapshot.nodes.items():
        for loop in members:
            if loop.head != "For":
                continue
            region, lo, hi, inits, results = loop.args[:5]
            trips = int_constant(view, hi)
            counter = snapshot.index.get(ENode("Arg", (region, 0)))
            if int_constant(view, lo) != 0 or trips is None or counter is None:
                continue
            for j, result in enumerate(results[len(inits):]):
                stacked = snapshot.index.get(ENode("Get", (loop_class, len(inits) + j)))
                if result == counter and stacked is not None:
                    counters[stacked] = trips
    return counters


def _stacked_output_plans(view, ys: list[ClassId], stacked: set[ClassId], invariant) -> dict[int, _Contraction]:
    """The loop outputs (ys) worth computing after the loop from rows it stacks anyway:
    y_t a contraction whose per-step leaves the batched accumulators stack (AD's
    `dx_t = dz_t @ W.T` beside `dW += x_t^T @ dz_t`; a bias gradient's `sum(dz_t)`).
    Then all steps' y are one einsum of the stacked rows, and the loop drops a small
    matmul per step. A y read as a leaf by another plan, or under a reshape, stays."""
    plans = {}
    for j, y in enumerate(ys):
        if y in stacked:
            continue
        plan = _contraction(view, y, invariant)
        if plan is None or plan.reshape is not None:
            continue
        if all(leaf in stacked or leaf in invariant for leaf, _ in plan.leaves):
            plans[j] = plan
    return plans


def _same_type(a, b) -> bool:
    return isinstance(a, TensorType) and isinstance(b, TensorType) and a.shape == b.shape and a.dtype == b.dtype


def _stacked(plans, invariant) -> list[ClassId]:
    """The per-step leaves of the contractions, each once: the new loop's extra ys."""
    leaves: dict[ClassId, None] = {}
    for plan, _ in plans.values():
        for part in _contractions(plan):
            leaves.update((leaf, None) for leaf, _ in part.leaves if leaf not in invariant)
    return list(leaves)


def _rows_of_invariant(view, region: int, lo: ClassId, hi: ClassId, leaf: ClassId, invariant) -> ClassId | None:
    """X when the per-step `leaf` is `take(X, i, axis=0)` at the loop's counter, for an
    invariant X with as many rows as the loop runs trips from 0: its rows stacked over
    the trips (at i - lo, whatever the direction) are X itself, so it needs no stacking."""
    counter = view.snapshot.index.get(ENode("Arg", (region, 0)))
    if counter is None or int_constant(view, lo) != 0:
        return None
    for node in view.snapshot.nodes[leaf]:
        if node.head == "Op2" and node.args[0] == "take" and node.args[3] == counter and node.args[2] in invariant \
                and view.attrs(node.args[1]).get("axis") == 0:
            table_type = view.types.get(node.args[2])
            if isinstance(table_type, TensorType) and table_type.shape[0] == int_constant(view, hi):
                return node.args[2]
    return None


def _contraction(view, cid: ClassId, invariant, reshapes: int = 0) -> _Contraction | None:
    """`cid` as a contraction of per-step values (a matmul of rank-2 operands, their
    transposes peeled; an einsum; a reduce_sum), under at most `MAX_RESHAPES` reshapes."""
    types = view.types
    for node in view.snapshot.nodes[cid]:
        if not node.head.startswith("Op"):
            continue
        name = node.args[0]
        inputs = list(node.args[2]) if node.head == "OpN" else list(node.args[2:])
        if any(not isinstance(types.get(c), TensorType) for c in inputs):
            continue
        leaves, output = None, None
        if name == "reshape" and len(inputs) == 1 and reshapes < MAX_RESHAPES:
            inner = _contraction(view, inputs[0], invariant, reshapes + 1)
            if inner is not None:
                leaves, output = inner.leaves, inner.output
        elif name == "matmul" and [types[c].ndim for c in inputs] == [2, 2]:
            leaves, output = (_peel_transpose(view, inputs[0], "ik"), _peel_transpose(view, inputs[1], "kj")), "ij"
        elif name == "einsum":
            try:
                terms, output = ops.parse_einsum(view.attrs(node.args[1])["spec"], [types[c].ndim for c in inputs])
            except EgadError:
                continue
            leaves = tuple(zip(inputs, terms))
        elif name == "reduce_sum" and len(inputs) == 1:
            attrs = view.attrs(node.args[1])
            letters = _LETTERS[:types[inputs[0]].ndim]
            leaves = ((inputs[0], letters),)
            output = "".join(c for a, c in enumerate(letters) if a not in attrs["axes"])
        if leaves is None or all(leaf in invariant for leaf, _ in leaves):
            continue  # not a contraction, or the same every step
        if len(set("".join(term for _, term in leaves))) >= len(_LETTERS):
            continue  # no letter left for the step axis
        try:
            (computed,) = ops.OPS["einsum"].shape_rule([types[leaf] for leaf, _ in leaves],
                                                       {"spec": ",".join(t for _, t in leaves) + "->" + output})
        except EgadError:
            continue
        shape = types[cid].shape
        if computed.shape == shape:
            return _Contraction(tuple(leaves), output, None)
        if all(isinstance(d, int) for d in shape) and computed.is_static and computed.size() == types[cid].size():
            return _Contraction(tuple(leaves), output, tuple(shape))
    return None


def _scatters(view, cid: ClassId, invariant, is_base) -> _Scatters | None:
    """`cid` as a chain of at most `MAX_SCATTERS` index_adds at constant rows, in range,
    of contractions, down to a class holding a node `is_base` accepts."""
    parts = []
    for _ in range(MAX_SCATTERS):
        node = next((n for n in view.snapshot.nodes[cid] if is_index_add(n)), None)
        if node is None:
            return None
        attrs, base, rows, values = node.args[1:]
        value = _contraction(view, values, invariant)
        if value is None or not _rows_in_range(view, rows, view.types.get(base), view.attrs(attrs).get("axis")):
            return None
        parts.append((attrs, rows, value))
        if any(is_base(member) for member in view.snapshot.nodes[base]):
            return _Scatters(tuple(reversed(parts)))
        cid = base
    return None


def _rows_in_range(view, cid: ClassId, buffer, axis) -> bool:
    """`cid` a constant integer index whose rows all lie within the buffer's axis: a
    scatter after the loop raises only where the loop's own scatters would."""
    if not isinstance(buffer, TensorType) or not isinstance(axis, int) or not -buffer.ndim <= axis < buffer.ndim \
            or not isinstance(buffer.shape[axis], int):
        return False
    rows = constant_integers(view, cid)
    if rows is None or str(rows.dtype) not in INT_DTYPES:
        return False
    return bool(np.all((rows >= 0) & (rows < buffer.shape[axis])))


def _peel_transpose(view, cid: ClassId, term: str) -> tuple[ClassId, str]:
    """(x, "ki") for a class holding transpose(x) of a rank-2 x, else (cid, term)."""
    for node in view.snapshot.nodes[cid]:
        if node.head == "Op1" and node.args[0] == "transpose" and view.attrs(node.args[1])["perm"] == (1, 0):
            return node.args[2], term[::-1]
    return cid, term


def _batched(view, plan: _Contraction, rows: dict[ClassId, ENode], invariant, keep_steps: bool = False) -> ENode:
    """The sum over all steps of the contribution: one einsum of the stacked leaves
    (with `keep_steps`, every step's value stacked: the einsum keeps the step axis)."""
    used = set("".join(term for _, term in plan.leaves))
    step = next(c for c in "t" + _LETTERS if c not in used)
    operands = [leaf if leaf in invariant else rows[leaf] for leaf, _ in plan.leaves]
    terms = [term if leaf in invariant else step + term for leaf, term in plan.leaves]
    output = step + plan.output if keep_steps else plan.output
    attrs = attrs_node({"spec": ",".join(terms) + "->" + output}, view.encoding.constants)
    total = op_node("einsum", attrs, operands)
    if plan.reshape is not None:
        total = ENode("Op1", ("reshape", attrs_node({"shape": plan.reshape}, view.encoding.constants), total))
    return total


def _scattered(view, plan: _Scatters, rows: dict[ClassId, ENode], invariant, acc0: ClassId) -> ENode:
    """acc0 with each part's sum over all steps scattered into it, in the loop's order."""
    total = acc0
    for attrs, index, value in plan.parts:
        total = ENode("Op3", ("index_add", attrs, total, index, _batched(view, value, rows, invariant)))
    return total
