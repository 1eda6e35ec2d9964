"""algebra: identities of the op table that hold for every value.

Assumes: IR ops are strict (a binary op's operands share one dtype, so a constant
operand has the other operand's dtype); a rank-0 constant broadcasts to the other
operand's shape and changes nothing else; floats are IEEE-754. Every rewrite here
is exact, bit for bit, except where its why says otherwise: `add-zero` and
`add-zeros`-like rules may turn a -0.0 result into +0.0 (the sign of a zero is not
preserved, as in XLA's simplifier), and the `factor-*` rules round once less than
the program did and, where a product overflows, need not overflow with it (a*b + a*c
with a*b = inf and a*c = -inf is NaN; a*(b + c) may be finite). A rewrite that
changes a shape is wrong even where values agree, so shape conditions read
`shape_of` (egad/egraph/analysis.py).
"""
from __future__ import annotations

import itertools

from egglog import eq, i64, var, vars_

from egad.egraph.analysis import rank_of, shape_of
from egad.egraph.language import Attr, Term, literal, op

from .patterns import FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, has_dtype, scalars, splat
from .registry import family, rewrite

ALGEBRA = family("algebra", __doc__)

x, y, a, b, c = vars_("x y a b c", Term)
shape, inner_shape = var("shape", Attr), var("inner_shape", Attr)

ALGEBRA.rewrites(
    "mul-one", "x * 1 = x for every value, NaN, inf and -0.0 included",
    *(rewrite(op.mul(x, one)).to(x) for one in scalars(1)),
    *(rewrite(op.mul(one, x)).to(x) for one in scalars(1)))

ALGEBRA.rewrites(
    "div-one", "x / 1 = x for every float",
    *(rewrite(op.div(x, one)).to(x) for one in scalars(1.0, FLOAT_DTYPES)))

ALGEBRA.rewrites(
    "add-zero", "x + 0 = x (a -0.0 x gives +0.0, the one difference); x + -0.0 = x exactly",
    *(rewrite(op.add(x, zero)).to(x) for zero in scalars(0) + scalars(-0.0, FLOAT_DTYPES)),
    *(rewrite(op.add(zero, x)).to(x) for zero in scalars(0) + scalars(-0.0, FLOAT_DTYPES)))

ALGEBRA.rewrites(
    "sub-zero", "x - 0 = x exactly (-0.0 - 0.0 is -0.0)",
    *(rewrite(op.sub(x, zero)).to(x) for zero in scalars(0)))

ALGEBRA.rewrites(
    "neg-neg", "-(-x) = x exactly",
    rewrite(op.neg(op.neg(x))).to(x))

ALGEBRA.rewrites(
    "add-neg", "x + (-y) = x - y exactly (IEEE subtraction is addition of the negation): one op fewer",
    rewrite(op.add(x, op.neg(y))).to(op.sub(x, y)),
    rewrite(op.add(op.neg(y), x)).to(op.sub(x, y)))

ALGEBRA.rewrites(
    "sub-neg", "x - (-y) = x + y exactly: one op fewer",
    rewrite(op.sub(x, op.neg(y))).to(op.add(x, y)))

ALGEBRA.rewrites(
    "sub-self-int", "x - x = 0 for ints (not floats: inf - inf is NaN)",
    *(rewrite(op.sub(x, x)).to(literal(0, dtype), has_dtype(x, dtype), eq(rank_of(x)).to(i64(0)))
      for dtype in INT_DTYPES),
    *(rewrite(op.sub(x, x)).to(splat(0, dtype, shape), has_dtype(x, dtype), eq(shape_of(x)).to(shape),
                               rank_of(x) >= i64(1))
      for dtype in INT_DTYPES))

ALGEBRA.rewrites(
    "add-self", "x + x = 2x exactly (doubling is exact in binary floats and wraps like the sum in ints)",
    *(rewrite(op.add(x, x)).to(op.mul(x, literal(2, dtype)), has_dtype(x, dtype)) for dtype in NUMERIC_DTYPES))


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(perm)), key=lambda k: perm[k]))


# ranks 2 and 3 only: every rule costs a query plan in every e-graph, and AD's transposes are of matrices
_PERMUTATIONS = [perm for rank in (2, 3) for perm in itertools.permutations(range(rank)) if perm != tuple(range(rank))]

ALGEBRA.rewrites(
    "transpose-inverse", "transposing by p then by p's inverse moves every entry back: the identity",
    *(rewrite(op.transpose(op.transpose(x, perm=perm), perm=_inverse(perm))).to(x) for perm in _PERMUTATIONS))

ALGEBRA.rewrites(
    "transpose-identity", "transposing by the identity permutation changes nothing",
    *(rewrite(op.transpose(x, perm=tuple(range(rank)))).to(x) for rank in (1, 2, 3)))

ALGEBRA.rewrites(
    "reshape-reshape", "reshapes in C order compose: only the last target shape matters (static shapes)",
    rewrite(op.reshape(op.reshape(x, shape=inner_shape), shape=shape)).to(op.reshape(x, shape=shape)))

ALGEBRA.rewrites(
    "reshape-to-own-shape", "reshaping to the shape x already has changes nothing",
    rewrite(op.reshape(x, shape=shape)).to(x, eq(shape_of(x)).to(shape)))

ALGEBRA.rewrites(
    "broadcast-to-own-shape", "broadcasting to the shape x already has changes nothing",
    rewrite(op.broadcast_to(x, shape=shape)).to(x, eq(shape_of(x)).to(shape)))

ALGEBRA.rewrites(
    "factor-mul", "a*b + a*c = a*(b + c): one multiply fewer (rounds once less, and a product that "
                  "overflowed may not; shapes broadcast alike)",
    rewrite(op.add(op.mul(a, b), op.mul(a, c))).to(op.mul(a, op.add(b, c))),
    rewrite(op.add(op.mul(b, a), op.mul(c, a))).to(op.mul(op.add(b, c), a)), finite_only=True)

ALGEBRA.rewrites(
    "factor-matmul", "a@b + a@c = a@(b + c) for b, c of one shape: one matmul fewer (rounds differently)",
    rewrite(op.add(op.matmul(a, b), op.matmul(a, c))).to(op.matmul(a, op.add(b, c)),
                                                          eq(shape_of(b)).to(shape_of(c))),
    rewrite(op.add(op.matmul(b, a), op.matmul(c, a))).to(op.matmul(op.add(b, c), a),
                                                          eq(shape_of(b)).to(shape_of(c))), finite_only=True)
