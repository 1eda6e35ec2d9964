"""The e-graph language: egglog sorts mirroring egad's op table (DESIGN §5).

Three sorts. `Term` is one value of the program; `Attrs` an op's attributes, keyed
by name; `Attr` one attribute value. A `Term` is one of:

    Arg(region, i)                  a region's i-th carried value: a loop's counter and
                                    state, or a program parameter (region 0)
    Op0..Op3(name, attrs, *inputs)  a pure op of the table applied to 0-3 inputs
    OpN(name, attrs, Vec[inputs])   the same with 4 or more inputs (concat, einsum, ...)
    Scalar(dtype, bits)             a rank-0 constant; bits are the IEEE-754 bits of the
    Splat(dtype, bits, shape)       value as float64 (or the int64 value), so constants
                                    round-trip bit-exactly (-0.0 and NaN payloads too)
    Array(key)                      any other constant, stored in the ConstantTable
    NewTape(site, attrs)            an empty tape; `site` keeps two allocations apart
    Get(node, k)                    output k of a node with several outputs
    For / While / If / Switch       control, each keyed by a region id (see encoding.py)

Ops are generic (`Op2("matmul", attrs, a, b)`) so that the closed op table stays the
one list of ops; the arity is part of the constructor so rules match inputs directly
(`Vec` contents cannot be matched). Rules are written with the `op` builders:

    rewrite(op.matmul(op.take(X, i, axis=0), U)).to(op.take(op.matmul(X, U), i, axis=0))

`Bound(handle)` is not a constructor but a table: the insertion binds each IR binding
to a handle (A-normal form), so a node refers to its inputs by handle and no term is
deeper than one binding. The egglog names are fixed (`egg_fn`), because the inserter
(insertion.py) and the snapshot (snapshot.py) address them directly.
"""
from __future__ import annotations

import struct

import numpy as np
from egglog import Bool, Expr, StringLike, Vec, function, i64Like, method

from ..ir import ops
from ..ir.types import TensorType

# Ops whose binding has several outputs: their node is only read through `Get`.
MULTI_OUTPUT_OPS = ops.CONTROL_OPS | {"top_k", "tape_pop"}


class Attr(Expr, egg_sort="Attr"):
    """One attribute value: int, bool, str, None, float (bit-exact), tuple, tensor type."""

    @method(egg_fn="AttrInt")
    @classmethod
    def int_(cls, value: i64Like) -> Attr: ...

    @method(egg_fn="AttrBool")
    @classmethod
    def bool_(cls, value: Bool) -> Attr: ...

    @method(egg_fn="AttrStr")
    @classmethod
    def str_(cls, value: StringLike) -> Attr: ...

    @method(egg_fn="AttrNone")
    @classmethod
    def none(cls) -> Attr: ...

    @method(egg_fn="AttrFloat")
    @classmethod
    def float_bits(cls, bits: i64Like) -> Attr: ...

    @method(egg_fn="AttrTuple")
    @classmethod
    def tuple_(cls, items: Vec[Attr]) -> Attr: ...

    @method(egg_fn="AttrArray")
    @classmethod
    def array(cls, key: i64Like) -> Attr: ...

    @method(egg_fn="AttrType")
    @classmethod
    def tensor_type(cls, shape: Attr, dtype: StringLike, weak: Bool) -> Attr: ...


class Attrs(Expr, egg_sort="Attrs"):
    """An op's attributes, keys in sorted order: `Attrs().with_("axes", ...).with_("keepdims", ...)`."""

    @method(egg_fn="NoAttrs")
    def __init__(self) -> None: ...

    @method(egg_fn="WithAttr")
    def with_(self, key: StringLike, value: Attr) -> Attrs: ...


class Term(Expr, egg_sort="Term"):
    """One value of the program (see the module docstring for the constructors)."""

    @method(egg_fn="Arg")
    @classmethod
    def arg(cls, region: i64Like, index: i64Like) -> Term: ...

    @method(egg_fn="Op0")
    @classmethod
    def op0(cls, name: StringLike, attrs: Attrs) -> Term: ...

    @method(egg_fn="Op1")
    @classmethod
    def op1(cls, name: StringLike, attrs: Attrs, a: Term) -> Term: ...

    @method(egg_fn="Op2")
    @classmethod
    def op2(cls, name: StringLike, attrs: Attrs, a: Term, b: Term) -> Term: ...

    @method(egg_fn="Op3")
    @classmethod
    def op3(cls, name: StringLike, attrs: Attrs, a: Term, b: Term, c: Term) -> Term: ...

    @method(egg_fn="OpN")
    @classmethod
    def opn(cls, name: StringLike, attrs: Attrs, inputs: Vec[Term]) -> Term: ...

    @method(egg_fn="Scalar")
    @classmethod
    def scalar(cls, dtype: StringLike, bits: i64Like) -> Term: ...

    @method(egg_fn="Splat")
    @classmethod
    def splat(cls, dtype: StringLike, bits: i64Like, shape: Attr) -> Term: ...

    @method(egg_fn="Array")
    @classmethod
    def array(cls, key: i64Like) -> Term: ...

    @method(egg_fn="NewTape")
    @classmethod
    def new_tape(cls, site: i64Like, attrs: Attrs) -> Term: ...

    @method(egg_fn="Get")
    def get(self, index: i64Like) -> Term: ...

    @method(egg_fn="For")
    @classmethod
    def for_loop(cls, region: i64Like, lo: Term, hi: Term, inits: Vec[Term], results: Vec[Term],
                 attrs: Attrs) -> Term: ...

    @method(egg_fn="While")
    @classmethod
    def while_loop(cls, region: i64Like, inits: Vec[Term], cond: Term, body: Vec[Term], attrs: Attrs) -> Term: ...

    @method(egg_fn="If")
    @classmethod
    def if_(cls, region: i64Like, pred: Term, then: Vec[Term], otherwise: Vec[Term]) -> Term: ...

    @method(egg_fn="Switch")
    @classmethod
    def switch(cls, region: i64Like, index: Term, branches: Vec[Vec[Term]]) -> Term: ...


@function(egg_fn="Bound", merge=lambda old, new: old)
def bound(handle: i64Like) -> Term:
    """The e-class inserted for IR binding `handle` (ANF: nodes refer to inputs by handle)."""


# Every callable the inserter and the snapshot address by egglog name.
LANGUAGE = (
    Attr.int_, Attr.bool_, Attr.str_, Attr.none, Attr.float_bits, Attr.tuple_, Attr.array, Attr.tensor_type,
    Attrs, Attrs.with_,
    Term.arg, Term.op0, Term.op1, Term.op2, Term.op3, Term.opn, Term.scalar, Term.splat, Term.array,
    Term.new_tape, Term.get, Term.for_loop, Term.while_loop, Term.if_, Term.switch, bound,
)


# --- builders for rules ------------------------------------------------------------

def float_bits(value: float) -> int:
    """The IEEE-754 bits of a float64 as a signed int64 (how constants are keyed)."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


def attr(value) -> Attr:
    """An attribute value as an `Attr` term; egglog expressions (rule variables) pass through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return Attr.bool_(Bool(value))
    if isinstance(value, int):
        return Attr.int_(value)
    if isinstance(value, float):
        return Attr.float_bits(float_bits(value))
    if isinstance(value, str):
        return Attr.str_(value)
    if value is None:
        return Attr.none()
    if isinstance(value, tuple):
        return Attr.tuple_(Vec[Attr](*[attr(v) for v in value]) if value else Vec[Attr].empty())
    if isinstance(value, TensorType):
        return Attr.tensor_type(attr(value.shape), value.dtype, Bool(value.weak))
    raise TypeError(f"no Attr for {value!r}")


def attrs(**values) -> Attrs:
    """`attrs(axis=0)`: an `Attrs` term with keys in the canonical (sorted) order."""
    result = Attrs()
    for key in sorted(values):
        result = result.with_(key, attr(values[key]))
    return result


def apply(name: str, inputs, **attr_values) -> Term:
    """The node of op `name` on `inputs`: the constructor is chosen by arity, as on insertion."""
    if name not in ops.OPS or name in MULTI_OUTPUT_OPS or name in ops.TAPE_OPS or name == "const":
        raise ValueError(f"{name!r} is not a pure single-output op of the table")
    arity = ops.OPS[name].num_inputs
    if arity is not None and len(inputs) != arity:  # a pattern that could never match a node of the op
        raise ValueError(f"op {name!r} takes {arity} operand{'s' if arity != 1 else ''}, not {len(inputs)} "
                         f"(docs/ir.md lists the ops)")
    encoded = attrs(**attr_values)
    constructors = {0: Term.op0, 1: Term.op1, 2: Term.op2, 3: Term.op3}
    if len(inputs) in constructors:
        return constructors[len(inputs)](name, encoded, *inputs)
    return Term.opn(name, encoded, Vec[Term](*inputs))


def literal(value, dtype: str) -> Term:
    """A rank-0 constant: `literal(0.0, "float64")` matches an inserted zero of that dtype."""
    return Term.scalar(dtype, scalar_bits(np.asarray(value, dtype)))


def scalar_bits(value: np.ndarray) -> int:
    """The key of one array entry: float64 bits for floats (float32 widens exactly), the
    int64 value for ints and bools."""
    if value.dtype.kind == "f":
        return int(np.asarray(value, "float64").view("int64"))
    return int(np.asarray(value, "int64"))


class _OpBuilders:
    """`op.matmul(a, b)`, `op.take(x, i, axis=0)`: one builder per pure op of the table."""

    def __getattr__(self, name: str):
        if name not in ops.OPS:
            raise AttributeError(f"no op {name!r} in the op table")
        return lambda *inputs, **attr_values: apply(name, inputs, **attr_values)


op = _OpBuilders()


# egglog names of the `Term` constructors (the nodes an extraction chooses between).
TERM_HEADS = frozenset({"Arg", "Op0", "Op1", "Op2", "Op3", "OpN", "Scalar", "Splat", "Array", "NewTape", "Get",
                        "For", "While", "If", "Switch"})
ATTR_HEADS = frozenset({"AttrInt", "AttrBool", "AttrStr", "AttrNone", "AttrFloat", "AttrTuple", "AttrArray", "AttrType",
                        "NoAttrs", "WithAttr"})
# Every table of the language; other tables in the e-graph (analyses, rule marks) are not e-nodes.
LANGUAGE_HEADS = TERM_HEADS | ATTR_HEADS | {"Bound"}
