"""control: branches whose outcome is known, and results every branch agrees on.

Assumes the encoding of branches in egad/egraph/encoding.py: `If(r, pred, then,
else)` and `Switch(r, index, branches)` hold the branches' results as Vecs, read
through `Get(node, k)`, and a branch has no `Arg` of its own (it reads outer
classes directly). So a result both branches compute as the same e-class is simply
that class, and a branch chosen by a constant predicate is its results. Both kinds
of rewrite only drop the branch op: nothing that ran in a branch now runs where it
did not (a value every branch computes was computed on every path), so nothing can
newly fail. Predicates fold only for ints and bools; float comparisons are left
alone (NaN). Code that is branch-invariant because both branches *read* it needs no
rule: decoding computes a value used by every branch once before the branch
(egad/egraph/placement.py).

Loop unswitching (an `if` on an invariant predicate inside a loop -> two loops) is
not written yet.
"""
from __future__ import annotations

from egglog import String, Vec, eq, i64, ne, var, vars_

from egad.egraph.analysis import dtype_of, rank_of
from egad.egraph.language import Term, literal, op

from .patterns import FLOAT_DTYPES, INT_DTYPES
from .registry import family, rewrite

CONTROL = family("control", __doc__)

x, pred, selector = vars_("x pred selector", Term)
then, otherwise = vars_("then otherwise", Vec[Term])
branches = var("branches", Vec[Vec[Term]])
region, k, left, right = vars_("region k left right", i64)
TRUE, FALSE = literal(True, "bool"), literal(False, "bool")

CONTROL.rewrites(
    "if-constant-predicate", "an if on a constant predicate is the branch it selects",
    rewrite(Term.if_(region, TRUE, then, otherwise).get(k)).to(then[k]),
    rewrite(Term.if_(region, FALSE, then, otherwise).get(k)).to(otherwise[k]))

CONTROL.rewrites(
    "switch-constant-index", "a switch on a constant index is the branch it selects (index clamped, as switch does)",
    *(rewrite(Term.switch(region, Term.scalar(dtype, left), branches).get(k)).to(
        branches[left.max(i64(0)).min(branches.length() - i64(1))][k]) for dtype in INT_DTYPES))

CONTROL.rewrites(
    "if-same-result", "a result both branches give as one value is that value, whichever branch runs",
    rewrite(Term.if_(region, pred, then, otherwise).get(k)).to(then[k], eq(then[k]).to(otherwise[k])))

CONTROL.rewrites(
    "switch-same-result", "a result every branch gives as one value is that value (2 and 3 branches)",
    rewrite(Term.switch(region, selector, branches).get(k)).to(
        branches[i64(0)][k], eq(branches.length()).to(i64(2)), eq(branches[i64(0)][k]).to(branches[i64(1)][k])),
    rewrite(Term.switch(region, selector, branches).get(k)).to(
        branches[i64(0)][k], eq(branches.length()).to(i64(3)), eq(branches[i64(0)][k]).to(branches[i64(1)][k]),
        eq(branches[i64(0)][k]).to(branches[i64(2)][k])))

_COMPARISONS = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
                "ge": lambda a, b: a >= b}
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def _compare_folds(dtype: str):
    for name, holds in _COMPARISONS.items():
        comparison = getattr(op, name)(Term.scalar(dtype, left), Term.scalar(dtype, right))
        yield rewrite(comparison).to(TRUE, holds(left, right))
        yield rewrite(comparison).to(FALSE, _COMPARISONS[_NEGATED[name]](left, right))
    equal = op.eq(Term.scalar(dtype, left), Term.scalar(dtype, right))
    unequal = op.ne(Term.scalar(dtype, left), Term.scalar(dtype, right))
    yield rewrite(equal).to(TRUE, eq(left).to(right))
    yield rewrite(equal).to(FALSE, ne(left).to(right))
    yield rewrite(unequal).to(FALSE, eq(left).to(right))
    yield rewrite(unequal).to(TRUE, ne(left).to(right))


CONTROL.rewrites(
    "fold-int-comparison", "a comparison of two int constants is a constant predicate",
    *(item for dtype in INT_DTYPES for item in _compare_folds(dtype)))

CONTROL.rewrites(
    "fold-not", "not of a constant predicate is a constant",
    rewrite(op.logical_not(TRUE)).to(FALSE),
    rewrite(op.logical_not(FALSE)).to(TRUE))

CONTROL.rewrites(
    "compare-with-itself", "an int or bool scalar equals itself (floats excluded: NaN != NaN)",
    *(rewrite(getattr(op, name)(x, x)).to(result, *(ne(dtype_of(x)).to(String(dtype)) for dtype in FLOAT_DTYPES),
                                          eq(rank_of(x)).to(i64(0)))
      for name, result in (("eq", TRUE), ("le", TRUE), ("ge", TRUE), ("ne", FALSE), ("lt", FALSE), ("gt", FALSE))))
