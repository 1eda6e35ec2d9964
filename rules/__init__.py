"""Rewrite-rule families for egad's e-graph optimizer, installed as `egad.rules`.

One file per family, each opening with a docstring that says what its rules assume
(DESIGN §5, CONVENTIONS 5). Importing this package registers every family, in the
order the schedule (egad/egraph/schedule.py) runs them:

    algebra         identities: x * 1, -(-x), transpose/reshape pairs, distributivity that saves work
    ad_simplify     adjoint clean-up: zero accumulations, scatters into sums, seed broadcasts
    loop_invariant  reassociate so invariant work becomes a subterm placement hoists
    batching        take(X, i) @ U -> take(X @ U, i): per-step work on rows of X, batched;
                    acc += A_t^T @ B_t in a loop -> one contraction after it (transformer)
    fusion          x @ W1, ..., x @ Wk -> one matmul on concatenated weights (transformer)
    control         constant predicates, results every branch agrees on
    checkpoint      how residuals are kept: taped, or stacked rows the reverse loop reads (transformer)
    unroll          short loops with known trip counts, written out (transformer)

    from egad.rules import families, rules_of
    [rule.name for rule in rules_of("algebra")]
"""
from . import algebra, ad_simplify, loop_invariant, batching, fusion, control, checkpoint, unroll  # noqa: F401
from .registry import Family, Rule, all_rules, families, family, family_named, rules_of, sites

_DEFAULT = ("algebra", "ad_simplify", "loop_invariant", "batching", "fusion", "control", "checkpoint", "unroll")


def default() -> list[Family]:
    """The families `egad.optimize` runs when `rules=None`, in schedule order. A
    research family goes beside them: `rules=[*egad.rules.default(), my_family]`."""
    return [family_named(name) for name in _DEFAULT]


__all__ = ["Family", "Rule", "default", "families", "family", "family_named", "rules_of", "all_rules", "sites"]
