"""A rewrite's left side as plain Python data, so that `egad rules check` can build
instances of it (egad/rule_check.py).

A rule's `rewrite(lhs).to(rhs, *conditions)` holds egglog expressions. `read_rewrite`
turns the left side into a tree of `OpPattern` (an op of the table on inputs, with
attributes), `ConstantPattern` (a `Scalar` or `Splat`) and `PatternVar` (a rule
variable: a `Term`, an `Attr` or an `i64`), and keeps the conditions as egglog
declarations that `evaluate_condition` reads against a typed instance:

    pattern = read_rewrite(rewrite(op.exp(op.add(a, b))).to(op.mul(op.exp(a), op.exp(b))))
    pattern.lhs             # exp(add(a, b))
    pattern.term_vars       # (a, b)

A left side that holds something else (an `If`, a `Switch`, a loop, a `Get`, a
`Vec` variable) cannot be built in isolation: `read_rewrite` raises
`NotGenerable` with the reason, and the rule is checked on whole programs instead.
"""
from __future__ import annotations

import dataclasses
import struct

from egglog import declarations as decls

from .ir.types import TensorType


class NotGenerable(Exception):
    """The left side holds a construct an instance cannot be built from (the reason)."""


@dataclasses.dataclass(frozen=True)
class PatternVar:
    name: str
    sort: str  # "Term", "Attr" or "i64"

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class OpPattern:
    op: str
    attrs: tuple[tuple[str, object], ...]  # (key, value); a value may be or hold a PatternVar
    inputs: tuple

    def __str__(self) -> str:
        parts = [str(x) for x in self.inputs] + [f"{key}={_show(value)}" for key, value in self.attrs]
        return f"{self.op}({', '.join(parts)})"


@dataclasses.dataclass(frozen=True)
class ConstantPattern:
    dtype: str
    bits: object  # int (float64 bits for floats, the value for ints), or an i64 PatternVar
    shape: object = None  # None: a rank-0 Scalar; else the Splat's shape (a tuple or an Attr PatternVar)

    def __str__(self) -> str:
        value = self.bits if isinstance(self.bits, PatternVar) else constant_value(self.dtype, self.bits)
        if self.shape is None:
            return f"{value}:{self.dtype}"
        return f"full({_show(self.shape)}, {value}:{self.dtype})"


@dataclasses.dataclass(frozen=True)
class RewritePattern:
    lhs: object  # OpPattern | ConstantPattern | PatternVar
    rhs_text: str
    conditions: tuple  # egglog fact declarations
    term_vars: tuple[PatternVar, ...]  # in order of first appearance
    attr_vars: tuple[PatternVar, ...]
    int_vars: tuple[PatternVar, ...]  # i64 variables the left side holds (constant bits, attribute ints)
    attr_keys: dict  # Attr/i64 var -> (op, key) where it stands in the left side ("splat" for a Splat's shape)
    outer_vars: frozenset  # Term vars an `invariant_in` condition asks about: values from outside a loop
    search_order: tuple[PatternVar, ...] = ()  # every variable, an op's attributes before its inputs

    @property
    def in_loop(self) -> bool:
        return bool(self.outer_vars)

    def __str__(self) -> str:
        return f"{self.lhs} -> {self.rhs_text}"


def constant_value(dtype: str, bits: int):
    """The Python value of a constant's bits (as `egad.egraph.language.scalar_bits` keys them)."""
    if dtype in ("float16", "float32", "float64"):
        return struct.unpack("<d", struct.pack("<q", bits))[0]
    return bool(bits) if dtype == "bool" else bits


def read_rewrite(item) -> RewritePattern:
    """The left side and conditions of a `Rewrite` (rules/registry.py) as Python data."""
    if not hasattr(item, "lhs"):
        raise NotGenerable("a rule(...).then(...) derivation has several patterns; it is checked on programs")
    reader = _Reader()
    lhs = reader.term(item.lhs.__egg_typed_expr__)
    conditions = tuple(_fact_decl(c) for c in item.conditions)
    outer: set[PatternVar] = set()
    for condition in conditions:
        call = _unwrap(condition)
        if isinstance(call, decls.CallDecl) and _callable_name(call) == "InvariantIn":
            subject = reader.term(call.args[0])
            outer.update(v for v in term_vars_of(subject))
    return RewritePattern(lhs, _rhs_text(item.rhs), conditions, tuple(reader.order["Term"]),
                          tuple(reader.order["Attr"]), tuple(reader.order["i64"]), reader.attr_keys,
                          frozenset(outer), tuple(_search_order(lhs)))


def _search_order(pattern) -> list[PatternVar]:
    """Every variable of the left side, an op's attributes before its inputs, so that a
    search can type an op as soon as its last input has a type."""
    order: list[PatternVar] = []

    def visit(node):
        if isinstance(node, OpPattern):
            for _, value in node.attrs:
                visit(value)
            for x in node.inputs:
                visit(x)
        elif isinstance(node, ConstantPattern):
            visit(node.bits)
            visit(node.shape)
        elif isinstance(node, tuple):
            for item in node:
                visit(item)
        elif isinstance(node, PatternVar) and node not in order:
            order.append(node)

    visit(pattern)
    return order


def term_vars_of(pattern) -> list[PatternVar]:
    if isinstance(pattern, PatternVar):
        return [pattern] if pattern.sort == "Term" else []
    if isinstance(pattern, OpPattern):
        return [v for x in pattern.inputs for v in term_vars_of(x)]
    return []


def substitute(value, assignment: dict):
    """An attribute or constant field with its pattern variables replaced by their values."""
    if isinstance(value, PatternVar):
        return assignment[value]
    if isinstance(value, tuple):
        return tuple(substitute(v, assignment) for v in value)
    return value


def free_vars(value) -> set[PatternVar]:
    if isinstance(value, PatternVar):
        return {value}
    if isinstance(value, tuple):
        return set().union(*(free_vars(v) for v in value)) if value else set()
    if isinstance(value, OpPattern):
        return set().union(*(free_vars(x) for x in value.inputs), *(free_vars(v) for _, v in value.attrs))
    if isinstance(value, ConstantPattern):
        return free_vars(value.bits) | free_vars(value.shape)
    return set()


# --- conditions ----------------------------------------------------------------------------

UNKNOWN = object()  # a condition this reader cannot decide: the e-graph decides it


def evaluate_condition(condition, reader_env) -> object:
    """True, False or UNKNOWN. `reader_env` is an `InstanceEnv`: the values of the
    variables assigned so far and the types of left-side terms."""
    try:
        return _evaluate(condition, reader_env)
    except _Undecided:
        return UNKNOWN


def derived_value(condition, var: PatternVar, env) -> object:
    """The value `var` must take for `eq(var).to(expr)` (either way round) to hold, once
    `expr` can be read; UNKNOWN otherwise. A search sets such a variable instead of
    trying every value of its domain."""
    if not isinstance(condition, decls.EqDecl) or var.sort == "Term":
        return UNKNOWN
    for side, other in ((condition.left, condition.right), (condition.right, condition.left)):
        side = _unwrap(side)
        if isinstance(side, decls.UnboundVarDecl) and side.name == var.name:
            try:
                return _value(other, env)
            except _Undecided:
                return UNKNOWN
    return UNKNOWN


def derived_shape(condition, var: PatternVar, env) -> object:
    """The shape the Term variable `var` must have for `eq(shape_of(var)).to(expr)`
    (either way round) to hold, once `expr` can be read; UNKNOWN otherwise."""
    if not isinstance(condition, decls.EqDecl) or var.sort != "Term":
        return UNKNOWN
    for side, other in ((condition.left, condition.right), (condition.right, condition.left)):
        side = _unwrap(side)
        if isinstance(side, decls.CallDecl) and _callable_name(side) == "shape_of" and \
                isinstance(_unwrap(side.args[0]), decls.UnboundVarDecl) and _unwrap(side.args[0]).name == var.name:
            try:
                value = _value(other, env)
            except _Undecided:
                return UNKNOWN
            return value if isinstance(value, tuple) else UNKNOWN
    return UNKNOWN


class InstanceEnv:
    """What conditions read: variable values, term types and which vars are outer."""

    def __init__(self, assignment: dict, type_of, outer_vars: frozenset):
        self.assignment = assignment
        self.type_of = type_of  # pattern -> TensorType, or raises _Undecided / returns None when ill-typed
        self.outer_vars = outer_vars


class _Undecided(Exception):
    pass


_COMPARE = {"__lt__": lambda a, b: a < b, "__le__": lambda a, b: a <= b, "__gt__": lambda a, b: a > b,
            "__ge__": lambda a, b: a >= b, "!=": lambda a, b: a != b}


def _evaluate(condition, env: InstanceEnv):
    if isinstance(condition, decls.EqDecl):
        return _value(condition.left, env) == _value(condition.right, env)
    call = _unwrap(condition)
    if not isinstance(call, decls.CallDecl):
        raise _Undecided
    name = _callable_name(call)
    if name == "InvariantIn":
        subject = _Reader().term(call.args[0])
        return all(v in env.outer_vars for v in term_vars_of(subject))
    if name in _COMPARE and len(call.args) == 2:
        return _COMPARE[name](_value(call.args[0], env), _value(call.args[1], env))
    raise _Undecided


def _value(expr, env: InstanceEnv):
    expr = _unwrap(expr)
    if isinstance(expr, decls.LitDecl):
        return expr.value
    if isinstance(expr, decls.UnboundVarDecl):
        for var, value in env.assignment.items():
            if var.name == expr.name and var.sort != "Term":
                return value
        raise _Undecided
    if isinstance(expr, decls.CallDecl):
        name = _callable_name(expr)
        if name in ("shape_of", "dtype_of", "rank_of"):
            try:
                subject = _Reader().term(expr.args[0])
            except NotGenerable:
                raise _Undecided from None
            if any(v not in env.assignment for v in free_vars(subject)):
                raise _Undecided
            type_ = env.type_of(subject)
            if not isinstance(type_, TensorType):
                raise _Undecided
            return {"shape_of": tuple(type_.shape), "dtype_of": type_.dtype, "rank_of": type_.ndim}[name]
        try:
            return _Reader().attr(expr)  # a literal attribute, e.g. a shape written in the rule
        except NotGenerable:
            raise _Undecided from None
    raise _Undecided


# --- reading egglog declarations --------------------------------------------------------------

def _unwrap(expr):
    while isinstance(expr, (decls.TypedExprDecl, decls.ExprFactDecl)):
        expr = expr.expr if isinstance(expr, decls.TypedExprDecl) else expr.typed_expr
    return expr


def _fact_decl(condition):
    fact = getattr(condition, "fact", None)
    return fact if fact is not None else condition.__egg_typed_expr__


def _callable_name(call: decls.CallDecl) -> str:
    ref = call.callable
    if isinstance(ref, (decls.MethodRef, decls.ClassMethodRef)):
        return ref.method_name
    ident = getattr(ref, "ident", None)
    return getattr(ident, "name", "") if ident is not None else ""


def _class_name(call: decls.CallDecl) -> str:
    ident = getattr(call.callable, "ident", None)
    return getattr(ident, "name", "")


def _sort_of(typed) -> str:
    tp = getattr(typed, "tp", None)
    ident = getattr(tp, "ident", None)
    return getattr(ident, "name", "")


class _Reader:
    def __init__(self):
        self.vars: dict[tuple[str, str], PatternVar] = {}
        self.order: dict[str, list[PatternVar]] = {"Term": [], "Attr": [], "i64": []}
        self.attr_keys: dict[PatternVar, tuple[str, str]] = {}

    def var(self, name: str, sort: str) -> PatternVar:
        key = (name, sort)
        if key not in self.vars:
            self.vars[key] = PatternVar(name, sort)
            self.order.setdefault(sort, []).append(self.vars[key])
        return self.vars[key]

    def term(self, typed):
        expr = _unwrap(typed)
        if isinstance(expr, decls.UnboundVarDecl):
            return self.var(expr.name, "Term")
        if not isinstance(expr, decls.CallDecl) or _class_name(expr) != "Term":
            raise NotGenerable(f"the left side holds {type(expr).__name__}, not a term of ops")
        kind = _callable_name(expr)
        args = expr.args
        if kind in ("op0", "op1", "op2", "op3", "opn"):
            name = self.literal(args[0], "an op name")
            attrs = self.attrs(args[1], name)
            inputs = args[2:] if kind != "opn" else self.vec(args[2])
            return OpPattern(name, attrs, tuple(self.term(x) for x in inputs))
        if kind == "scalar":
            return ConstantPattern(self.literal(args[0], "a dtype"), self.int_field(args[1], ("scalar", "bits")))
        if kind == "splat":
            dtype = self.literal(args[0], "a dtype")
            return ConstantPattern(dtype, self.int_field(args[1], ("scalar", "bits")),
                                   self.attr(args[2], ("splat", "shape")))
        raise NotGenerable(f"the left side holds Term.{kind} (a region, a loop or a constant table entry): "
                           "its instances need a whole program")

    def literal(self, typed, what: str):
        expr = _unwrap(typed)
        if isinstance(expr, decls.LitDecl):
            return expr.value
        raise NotGenerable(f"{what} in the left side is a variable")

    def int_field(self, typed, where):
        expr = _unwrap(typed)
        if isinstance(expr, decls.UnboundVarDecl):
            var = self.var(expr.name, "i64")
            self.attr_keys.setdefault(var, where)
            return var
        return self.literal(typed, "an integer")

    def vec(self, typed) -> tuple:
        expr = _unwrap(typed)
        if isinstance(expr, decls.CallDecl) and _class_name(expr) == "Vec":
            if isinstance(expr.callable, decls.InitRef):
                return tuple(expr.args)
            if _callable_name(expr) == "empty":
                return ()
        raise NotGenerable("the left side holds a Vec that is not written out (a Vec variable)")

    def attrs(self, typed, op: str) -> tuple:
        expr = _unwrap(typed)
        items = []
        while isinstance(expr, decls.CallDecl) and _callable_name(expr) == "with_":
            rest, key, value = expr.args
            key = self.literal(key, "an attribute key")
            items.append((key, self.attr(value, (op, key))))
            expr = _unwrap(rest)
        if not (isinstance(expr, decls.CallDecl) and isinstance(expr.callable, decls.InitRef)):
            raise NotGenerable(f"the attributes of {op} are a variable")
        return tuple(sorted(items))

    def attr(self, typed, where=("?", "?")):
        expr = _unwrap(typed)
        if isinstance(expr, decls.UnboundVarDecl):
            var = self.var(expr.name, "Attr")
            self.attr_keys.setdefault(var, where)
            return var
        if not isinstance(expr, decls.CallDecl) or _class_name(expr) != "Attr":
            raise NotGenerable(f"an attribute in the left side is {type(expr).__name__}")
        kind, args = _callable_name(expr), expr.args
        if kind == "int_":
            return self.int_field(args[0], where)
        if kind in ("bool_", "str_"):
            return self.literal(args[0], "an attribute")
        if kind == "none":
            return None
        if kind == "float_bits":
            return constant_value("float64", self.literal(args[0], "a float attribute"))
        if kind == "tuple_":
            return tuple(self.attr(item, where) for item in self.vec(args[0]))
        raise NotGenerable(f"the left side holds an Attr.{kind} attribute")


def _show(value) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def _rhs_text(rhs) -> str:
    try:
        return str(_Reader().term(rhs.__egg_typed_expr__))
    except NotGenerable:
        return " ".join(str(rhs).split())
