"""The closed op table: every op egad knows, declared once (CONVENTIONS 1-2).

Each entry gathers, in the same order every time: the numpy implementation (the
semantic oracle), the shape/dtype rule, and the pretty form. VJPs and costs are
added beside each op by the AD and e-graph layers (`OpDef.vjp`, `OpDef.cost`).

IR ops are strict where numpy is lenient: binary ops take operands of one dtype
(the front end inserts `cast` after numpy's promotion rules), float-only ops take
floats. Symbolic output dims come from attributes, and the run-time sizes of those
dims come in as int64 scalar inputs (`full`, `iota`, `reshape`, `broadcast_to`),
so nothing needs a symbol table to run.
"""
from __future__ import annotations

import dataclasses
import string
from typing import Any, Callable

import numpy as np

from ..errors import ShapeError, UnsupportedError
from . import shapes
from .types import TapeType, TensorType, is_float, is_int

ImplFn = Callable[[list, dict], tuple]
ShapeRule = Callable[[list[TensorType], dict], list[TensorType]]
PrettyFn = Callable[[list[str], dict], str]


@dataclasses.dataclass
class OpDef:
    name: str
    doc: str  # one line: what the op computes
    family: str  # elementwise | reduction | linalg | shape | index | creation | nn | control | misc
    impl: ImplFn | None  # numpy semantics; None for control ops (the interpreter runs regions)
    shape_rule: ShapeRule | None  # input types + attrs -> output types; raises ShapeError (None: control)
    num_inputs: int | None = None  # None: variadic
    pretty: PrettyFn | None = None
    differentiable: bool = True  # integer/bool-valued ops (argmax, compare) carry no gradient
    vjp: Callable | None = None  # filled in by egad.ad
    cost: Callable | None = None  # filled in by the e-graph layer


OPS: dict[str, OpDef] = {}


def define(op: OpDef) -> OpDef:
    assert op.name not in OPS, f"op {op.name} defined twice"
    OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise UnsupportedError(f"unknown op {name!r}") from None


def _format_attr(value) -> str:
    if isinstance(value, np.ndarray):
        return np.array2string(value, threshold=6, precision=4, separator=",").replace("\n", "")
    return repr(value) if isinstance(value, str) else str(value)


def default_pretty(name: str) -> PrettyFn:
    def pretty(args: list[str], attrs: dict) -> str:
        parts = list(args) + [f"{k}={_format_attr(v)}" for k, v in attrs.items()]
        return f"{name}({', '.join(parts)})"

    return pretty


def _one(fn):
    """Wrap a single-output numpy function as an impl returning a 1-tuple."""
    return lambda inputs, attrs: (np.asarray(fn(*inputs, **attrs)),)


def _require(condition: bool, text: str):
    if not condition:
        raise ShapeError(text)


def _dtype_allowed(kinds: str, dtype: str) -> bool:
    """Operand dtype classes: float, num (anything but bool), bool, any."""
    return {"float": is_float(dtype), "num": dtype != "bool", "bool": dtype == "bool", "any": True}[kinds]


# --- elementwise -------------------------------------------------------------------

def _unary_rule(kinds: str, name: str) -> ShapeRule:
    def rule(types, attrs):
        (x,) = types
        _require(_dtype_allowed(kinds, x.dtype), f"{name} needs a {kinds} operand, got {x}")
        return [TensorType(x.shape, x.dtype)]

    return rule


def _sigmoid(x):
    # e^x / (1 + e^x) below 0 keeps the relative accuracy of small results, which
    # 0.5 * tanh(0.5 x) + 0.5 rounds away (to 0 below x = -37; sigmoid(-40) is 4.2e-18)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _unary(name: str, fn, kinds: str, doc: str, symbol: str | None = None):
    pretty = (lambda a, _: f"{symbol}{a[0]}") if symbol else None
    define(OpDef(name, doc, "elementwise", _one(fn), _unary_rule(kinds, name), 1, pretty,
                 differentiable=kinds != "bool"))


_unary("neg", np.negative, "num", "-x", symbol="-")
_unary("abs", np.abs, "num", "|x|")
_unary("sign", np.sign, "num", "-1, 0 or 1 by the sign of x")
_unary("exp", np.exp, "float", "e^x")
_unary("expm1", np.expm1, "float", "e^x - 1, accurate near 0")
_unary("log", np.log, "float", "natural logarithm")
_unary("log1p", np.log1p, "float", "log(1 + x), accurate near 0")
_unary("tanh", np.tanh, "float", "hyperbolic tangent")
_unary("sin", np.sin, "float", "sine")
_unary("cos", np.cos, "float", "cosine")
_unary("sqrt", np.sqrt, "float", "square root")
_unary("floor", np.floor, "float", "round down")
_unary("sigmoid", _sigmoid, "float", "1 / (1 + e^-x)")
_unary("logical_not", np.logical_not, "bool", "not x", symbol="!")


def vjp(name: str):
    """Attach the decorated function as `name`'s VJP (CONVENTIONS 3: it reads as a formula).

    A VJP gets `(ad, inputs, outputs, cotangents, attrs)`: `ad` is egad.numpy plus
    adjoint helpers (egad/ad/adjoint_math.py), inputs/outputs are the primal values,
    cotangents one per output (None: symbolic zero). It returns one cotangent per
    input, None where the input gets no gradient (ints, or a zero derivative)."""
    def attach(fn):
        OPS[name].vjp = fn
        return fn

    return attach


@vjp("neg")
def _neg_vjp(ad, ins, outs, cts, attrs):
    """y = -x;  dx = -g"""
    return [-cts[0]]


@vjp("abs")
def _abs_vjp(ad, ins, outs, cts, attrs):
    """y = |x|;  dx = g * sign(x)"""
    return [cts[0] * ad.sign(ins[0])]


@vjp("sign")
@vjp("floor")
def _piecewise_constant_vjp(ad, ins, outs, cts, attrs):
    """y = sign(x) or floor(x): piecewise constant;  dx = 0 (almost everywhere)"""
    return [None]


@vjp("exp")
def _exp_vjp(ad, ins, outs, cts, attrs):
    """y = e^x;  dx = g * y"""
    return [cts[0] * outs[0]]


@vjp("expm1")
def _expm1_vjp(ad, ins, outs, cts, attrs):
    """y = e^x - 1;  dx = g * (y + 1)"""
    return [cts[0] * (outs[0] + 1)]


@vjp("log")
def _log_vjp(ad, ins, outs, cts, attrs):
    """y = log x;  dx = g / x"""
    return [cts[0] / ins[0]]


@vjp("log1p")
def _log1p_vjp(ad, ins, outs, cts, attrs):
    """y = log(1 + x);  dx = g / (1 + x)"""
    return [cts[0] / (ins[0] + 1)]


@vjp("tanh")
def _tanh_vjp(ad, ins, outs, cts, attrs):
    """y = tanh x;  dx = g * (1 - y²)"""
    return [cts[0] * (1 - outs[0] * outs[0])]


@vjp("sin")
def _sin_vjp(ad, ins, outs, cts, attrs):
    """y = sin x;  dx = g * cos x"""
    return [cts[0] * ad.cos(ins[0])]


@vjp("cos")
def _cos_vjp(ad, ins, outs, cts, attrs):
    """y = cos x;  dx = -g * sin x"""
    return [-cts[0] * ad.sin(ins[0])]


@vjp("sqrt")
def _sqrt_vjp(ad, ins, outs, cts, attrs):
    """y = √x;  dx = g / (2y)"""
    return [cts[0] / (outs[0] * 2)]


@vjp("sigmoid")
def _sigmoid_vjp(ad, ins, outs, cts, attrs):
    """y = σ(x);  dx = g * y * (1 - y)"""
    return [cts[0] * outs[0] * (1 - outs[0])]



def _binary_rule(kinds: str, name: str, out_dtype: str | None = None) -> ShapeRule:
    def rule(types, attrs):
        a, b = types
        _require(a.dtype == b.dtype, f"{name} needs operands of one dtype, got {a} and {b}")
        _require(_dtype_allowed(kinds, a.dtype), f"{name} needs {kinds} operands, got {a} and {b}")
        return [TensorType(shapes.broadcast_shapes(a.shape, b.shape), out_dtype or a.dtype)]

    return rule


def _binary(name: str, fn, kinds: str, doc: str, symbol: str | None = None, out_dtype: str | None = None):
    pretty = (lambda a, _: f"{a[0]} {symbol} {a[1]}") if symbol else None
    define(OpDef(name, doc, "elementwise", _one(fn), _binary_rule(kinds, name, out_dtype), 2, pretty,
                 differentiable=out_dtype != "bool" and kinds != "bool"))


_binary("add", np.add, "num", "a + b", "+")
_binary("sub", np.subtract, "num", "a - b", "-")
_binary("mul", np.multiply, "num", "a * b", "*")
_binary("div", np.true_divide, "float", "a / b", "/")
_binary("floordiv", np.floor_divide, "num", "floor(a / b), numpy's //", "//")
_binary("mod", np.mod, "num", "a - b * floor(a / b), numpy's %", "%")
_binary("pow", np.power, "num", "a ** b", "**")
_binary("maximum", np.maximum, "num", "elementwise max")
_binary("minimum", np.minimum, "num", "elementwise min")
_binary("logical_and", np.logical_and, "bool", "a and b", "&")
_binary("logical_or", np.logical_or, "bool", "a or b", "|")
_binary("logical_xor", np.logical_xor, "bool", "a xor b", "^")
_binary("eq", np.equal, "any", "a == b", "==", out_dtype="bool")
_binary("ne", np.not_equal, "any", "a != b", "!=", out_dtype="bool")
_binary("lt", np.less, "any", "a < b", "<", out_dtype="bool")
_binary("le", np.less_equal, "any", "a <= b", "<=", out_dtype="bool")
_binary("gt", np.greater, "any", "a > b", ">", out_dtype="bool")
_binary("ge", np.greater_equal, "any", "a >= b", ">=", out_dtype="bool")


@vjp("add")
def _add_vjp(ad, ins, outs, cts, attrs):
    """y = a + b;  da = g, db = g (each summed over the axes it was broadcast along)"""
    g = cts[0]
    return [ad.unbroadcast(g, ins[0]), ad.unbroadcast(g, ins[1])]


@vjp("sub")
def _sub_vjp(ad, ins, outs, cts, attrs):
    """y = a - b;  da = g, db = -g"""
    g = cts[0]
    return [ad.unbroadcast(g, ins[0]), ad.unbroadcast(-g, ins[1])]


@vjp("mul")
def _mul_vjp(ad, ins, outs, cts, attrs):
    """y = a * b;  da = g * b, db = g * a"""
    a, b = ins
    g = cts[0]
    return [ad.unbroadcast(g * b, a), ad.unbroadcast(g * a, b)]


@vjp("div")
def _div_vjp(ad, ins, outs, cts, attrs):
    """y = a / b;  da = g / b, db = -g * y / b"""
    a, b = ins
    g = cts[0]
    return [ad.unbroadcast(g / b, a), ad.unbroadcast(-g * outs[0] / b, b)]


@vjp("floordiv")
def _floordiv_vjp(ad, ins, outs, cts, attrs):
    """y = floor(a / b): piecewise constant;  da = db = 0 (almost everywhere)"""
    return [None, None]


@vjp("mod")
def _mod_vjp(ad, ins, outs, cts, attrs):
    """y = a - b * floor(a / b);  da = g, db = -g * floor(a / b)"""
    a, b = ins
    g = cts[0]
    return [ad.unbroadcast(g, a), ad.unbroadcast(-g * ad.floor(a / b), b)]


@vjp("pow")
def _pow_vjp(ad, ins, outs, cts, attrs):
    """y = a ** b;  da = g * b * a ** (b - 1) (0 where b = 0), db = g * y * log a (0 where a <= 0)"""
    a, b = ins
    g = cts[0]
    da = ad.where(b == 0, 0, g * b * a ** (b - 1))
    db = ad.where(a > 0, g * outs[0] * ad.log(ad.where(a > 0, a, 1)), 0)
    return [ad.unbroadcast(da, a), ad.unbroadcast(db, b)]


@vjp("maximum")
@vjp("minimum")
def _extremum_vjp(ad, ins, outs, cts, attrs):
    """y = max(a, b) (or min);  the chosen side gets g, a tie splits it in half"""
    a, b = ins
    g = cts[0]
    half, one, zero = (np.asarray(v, g.dtype) for v in (0.5, 1.0, 0.0))  # in g's dtype: no float64 for float32
    a_share = ad.where(a == b, half, ad.where(a == outs[0], one, zero))
    return [ad.unbroadcast(g * a_share, a), ad.unbroadcast(g * (1 - a_share), b)]



def _select_rule(types, attrs):
    pred, a, b = types
    _require(pred.dtype == "bool", f"select needs a bool predicate, got {pred}")
    _require(a.dtype == b.dtype, f"select needs branches of one dtype, got {a} and {b}")
    return [TensorType(shapes.broadcast_shapes(pred.shape, a.shape, b.shape), a.dtype)]


# where(pred, a, b): numpy's where; the gradient flows to the chosen side only.
define(OpDef("select", "pred ? a : b elementwise", "elementwise", _one(np.where), _select_rule, 3))


@vjp("select")
def _select_vjp(ad, ins, outs, cts, attrs):
    """y = p ? a : b;  da = p ? g : 0, db = p ? 0 : g"""
    pred, a, b = ins
    g = cts[0]
    return [None, ad.unbroadcast(ad.where(pred, g, 0), a), ad.unbroadcast(ad.where(pred, 0, g), b)]



def _cast_rule(types, attrs):
    return [TensorType(types[0].shape, attrs["dtype"])]


# cast: numpy's astype (float -> int truncates toward zero).
define(OpDef("cast", "convert to attrs.dtype", "elementwise",
             lambda inputs, attrs: (np.asarray(inputs[0]).astype(attrs["dtype"]),), _cast_rule, 1))


@vjp("cast")
def _cast_vjp(ad, ins, outs, cts, attrs):
    """y = float(x) of a float x;  dx = g in x's dtype (no gradient through ints)"""
    source = ins[0].type.dtype
    return [cts[0].astype(source) if is_float(source) and is_float(attrs["dtype"]) else None]



def _identity_rule(types, attrs):
    return [TensorType(types[0].shape, types[0].dtype)]


# stop_gradient: the value of x; its adjoint is zero by definition, not by omission.
define(OpDef("stop_gradient", "x, with no gradient flowing back", "misc",
             lambda inputs, attrs: (inputs[0],), _identity_rule, 1))


@vjp("stop_gradient")
def _stop_gradient_vjp(ad, ins, outs, cts, attrs):
    """y = x;  dx = 0 by definition"""
    return [None]



# --- linear algebra ----------------------------------------------------------------

def _matmul_rule(types, attrs):
    a, b = types
    _require(a.dtype != "bool", f"matmul of bool operands ({a} and {b}) is not supported: cast them to int or "
                                f"float first (a bool result is then `!= 0`)")
    _require(a.dtype == b.dtype, f"matmul needs numeric operands of one dtype, got {a} and {b}")
    _require(a.ndim >= 1 and b.ndim >= 1, f"matmul needs operands of rank >= 1, got {a} and {b}")
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    _require(a_shape[-1] == b_shape[-2],
             f"matmul contraction mismatch: {a} @ {b} ({a_shape[-1]} vs {b_shape[-2]})")
    batch = shapes.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    out = batch + (a_shape[-2],) * (a.ndim > 1) + (b_shape[-1],) * (b.ndim > 1)
    return [TensorType(out, a.dtype)]


define(OpDef("matmul", "numpy's a @ b (batched, 1-D operands promoted)", "linalg",
             _one(np.matmul), _matmul_rule, 2, lambda a, _: f"{a[0]} @ {a[1]}"))


@vjp("matmul")
def _matmul_vjp(ad, ins, outs, cts, attrs):
    """y = a @ b;  da = g @ bᵀ, db = aᵀ @ g (batch axes summed where broadcast; 1-D
    operands handled as a row / column)"""
    a, b = ins
    g = cts[0]
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if b.ndim == 1:
        g2 = ad.expand_dims(g2, -1)
    if a.ndim == 1:
        g2 = ad.expand_dims(g2, -2)
    da = ad.unbroadcast(g2 @ ad.swapaxes(b2, -1, -2), a2)
    db = ad.unbroadcast(ad.swapaxes(a2, -1, -2) @ g2, b2)
    return [ad.reshape(da, a.shape) if a.ndim == 1 else da, ad.reshape(db, b.shape) if b.ndim == 1 else db]



def parse_einsum(spec: str, ranks: list[int]) -> tuple[list[str], str]:
    """Input and output subscripts of an einsum spec, with numpy's implicit output."""
    spec = spec.replace(" ", "")
    _require("." not in spec, f"einsum spec {spec!r}: ellipsis is not supported; write the axes out")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    _require(len(terms) == len(ranks), f"einsum spec {spec!r} names {len(terms)} operands, got {len(ranks)}")
    for term, rank in zip(terms, ranks):
        _require(len(term) == rank and all(c in string.ascii_letters for c in term),
                 f"einsum spec {spec!r}: term {term!r} does not match an operand of rank {rank}")
    if not arrow:
        letters = "".join(terms)
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, output


def _einsum_rule(types, attrs):
    terms, output = parse_einsum(attrs["spec"], [t.ndim for t in types])
    _require(len({t.dtype for t in types}) == 1 and types[0].dtype != "bool",
             f"einsum needs numeric operands of one dtype, got {', '.join(map(str, types))}")
    sizes: dict[str, Any] = {}
    for term, t in zip(terms, types):
        for letter, dim in zip(term, t.shape):
            known = sizes.setdefault(letter, dim)
            if known != dim:
                if known == 1:
                    sizes[letter] = dim
                else:
                    _require(dim == 1, f"einsum {attrs['spec']!r}: axis {letter!r} has sizes {known} and {dim}")
    for letter in output:
        _require(letter in sizes, f"einsum {attrs['spec']!r}: output axis {letter!r} is not in any input")
    return [TensorType(tuple(sizes[c] for c in output), types[0].dtype)]


define(OpDef("einsum", "numpy's einsum(attrs.spec, *operands)", "linalg",
             lambda inputs, attrs: (np.asarray(np.einsum(attrs["spec"], *inputs)),), _einsum_rule, None))


@vjp("einsum")
def _einsum_vjp(ad, ins, outs, cts, attrs):
    """y = einsum(spec, *xs);  dx_k = einsum(out, *others -> term_k)(g, *others),
    broadcast along axes only x_k has (sums over them in the forward)"""
    terms, output = parse_einsum(attrs["spec"], [x.ndim for x in ins])
    g = cts[0]
    grads = []
    for k, term in enumerate(terms):
        if len(set(term)) != len(term):
            ad.unsupported(f"the gradient of einsum {attrs['spec']!r} (a repeated index in one operand)")
        others = [(t, x) for j, (t, x) in enumerate(zip(terms, ins)) if j != k]
        present = set(output).union(*(set(t) for t, _ in others))
        kept = "".join(c for c in term if c in present)
        spec = ",".join([output] + [t for t, _ in others]) + "->" + kept
        partial = ad.einsum(spec, g, *[x for _, x in others])
        grads.append(ad.expand_to_term(partial, kept, term, ins[k]))
    return grads



# --- shape -------------------------------------------------------------------------

def _transpose_rule(types, attrs):
    (x,) = types
    perm = attrs["perm"]
    _require(sorted(perm) == list(range(x.ndim)), f"transpose perm {perm} is not a permutation of {x.ndim} axes")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


define(OpDef("transpose", "permute axes by attrs.perm", "shape",
             lambda inputs, attrs: (np.transpose(inputs[0], attrs["perm"]),), _transpose_rule, 1))


@vjp("transpose")
def _transpose_vjp(ad, ins, outs, cts, attrs):
    """y = transpose(x, perm);  dx = transpose(g, perm⁻¹)"""
    inverse = tuple(int(p) for p in np.argsort(attrs["perm"]))
    return [ad.transpose(cts[0], inverse)]



def _dynamic_sizes_ok(types, shape, op: str):
    """Ops with symbolic output dims take one int64 scalar per symbolic dim as input."""
    symbolic = [d for d in shape if isinstance(d, str)]
    _require(len(types) == len(symbolic), f"{op} with shape {shape} needs {len(symbolic)} size inputs, got {len(types)}")
    for t in types:
        _require(t.ndim == 0 and is_int(t.dtype), f"{op} size inputs are int scalars, got {t}")


def concrete_shape(shape, sizes) -> tuple[int, ...]:
    """Fill the symbolic dims of `shape`, in order, from the run-time `sizes`."""
    sizes = iter(sizes)
    return tuple(int(next(sizes)) if isinstance(d, str) else d for d in shape)


def _reshape_rule(types, attrs):
    x, *sizes = types
    shape = tuple(attrs["shape"])
    _dynamic_sizes_ok(sizes, shape, "reshape")
    same_symbols = shapes.symbols_of(shape) == shapes.symbols_of(x.shape)
    same_static = shapes.product_of_static(shape) == shapes.product_of_static(x.shape)
    _require((x.is_static and all(isinstance(d, int) for d in shape) and same_static)
             or (same_symbols and same_static) or not same_symbols,
             f"cannot reshape {x} to {shape}: element counts differ")
    return [TensorType(shape, x.dtype)]


def _reshape_impl(inputs, attrs):
    x, *sizes = inputs
    target = concrete_shape(attrs["shape"], sizes)
    if int(np.prod(target)) != x.size:
        raise ShapeError(f"cannot reshape an array of shape {x.shape} to {target}")
    return (np.reshape(x, target),)


define(OpDef("reshape", "reshape to attrs.shape (C order)", "shape", _reshape_impl, _reshape_rule, None))


@vjp("reshape")
def _reshape_vjp(ad, ins, outs, cts, attrs):
    """y = reshape(x);  dx = reshape(g, x.shape)"""
    return [ad.reshape(cts[0], ins[0].shape)] + [None] * (len(ins) - 1)



def _broadcast_rule(types, attrs):
    x, *sizes = types
    shape = tuple(attrs["shape"])
    _dynamic_sizes_ok(sizes, shape, "broadcast_to")
    _require(shapes.broadcast_shapes(x.shape, shape) == shape, f"cannot broadcast {x} to {shape}")
    return [TensorType(shape, x.dtype)]


define(OpDef("broadcast_to", "numpy's broadcast_to(x, attrs.shape)", "shape",
             lambda inputs, attrs: (np.broadcast_to(inputs[0], concrete_shape(attrs["shape"], inputs[1:])).copy(),),
             _broadcast_rule, None))


@vjp("broadcast_to")
def _broadcast_to_vjp(ad, ins, outs, cts, attrs):
    """y = broadcast_to(x);  dx = g summed over the broadcast axes"""
    return [ad.unbroadcast(cts[0], ins[0])] + [None] * (len(ins) - 1)



def _concat_rule(types, attrs):
    _require(len(types) >= 1, "concatenate needs at least one operand")
    first = types[0]
    axis = attrs["axis"]
    _require(first.ndim > 0, "concatenate needs operands of rank >= 1")
    _require(0 <= axis < first.ndim, f"concatenate axis {axis} out of range for {first}")
    for t in types:
        _require(t.dtype == first.dtype and t.ndim == first.ndim, f"concatenate needs one dtype and rank: {first} vs {t}")
        _require(all(t.shape[i] == first.shape[i] for i in range(first.ndim) if i != axis),
                 f"concatenate along axis {axis}: shapes {first.shape} and {t.shape} differ off that axis")
    shape = list(first.shape)
    shape[axis] = shapes.joined_dim([t.shape[axis] for t in types])
    return [TensorType(tuple(shape), first.dtype)]


define(OpDef("concat", "numpy's concatenate(operands, attrs.axis)", "shape",
             lambda inputs, attrs: (np.concatenate(inputs, axis=attrs["axis"]),), _concat_rule, None))


@vjp("concat")
def _concat_vjp(ad, ins, outs, cts, attrs):
    """y = concatenate(xs, axis);  dx_k = the slice of g where x_k sits. Where several
    operands have symbolic sizes, those from the first to the last of them start at a
    run-time offset: their rows are gathered (take) at that offset plus arange of their
    own size, which keeps their own dims; the others sit at static bounds."""
    axis, g = attrs["axis"], cts[0]
    sizes = [x.type.shape[axis] for x in ins]
    symbolic = [k for k, size in enumerate(sizes) if not isinstance(size, int)]
    at_run_time = range(symbolic[0], symbolic[-1] + 1) if len(symbolic) > 1 else range(0)
    grads, offset = [], 0
    for k, x in enumerate(ins):
        if k in at_run_time:
            grads.append(ad.take(g, ad.arange(ad.size_of(x, axis)) + offset, axis=axis))
        else:
            index = [slice(None)] * x.ndim
            index[axis] = _concat_part(sizes, k)
            grads.append(g[tuple(index)])
        if at_run_time:
            offset = offset + ad.size_of(x, axis)
    return grads


def _concat_part(sizes: list, k: int) -> slice:
    """Where operand k of a concatenation of axes of `sizes` sits, in static bounds:
    counted from the start up to the first symbolic operand, from the end after it (with
    several symbolic operands, for those before the first or after the last only); the
    symbolic operand's part drops the static ones from each end, which
    egad/ir/shapes.py slice_dim names by the operand's own dim."""
    if sizes[k] == 0:
        return slice(0, 0)
    symbolic = next((j for j, size in enumerate(sizes) if not isinstance(size, int)), len(sizes))
    if k < symbolic:
        before = sum(sizes[:k])
        return slice(before, before + sizes[k])
    after = sum(sizes[k + 1:])
    stop = -after if after else None
    return slice(sum(sizes[:k]), stop) if k == symbolic else slice(-(after + sizes[k]), stop)


def _slice_rule(types, attrs):
    (x,) = types
    index = attrs["index"]
    _require(len(index) == x.ndim, f"slice needs one (start, stop, step) per axis of {x}")
    return [TensorType(tuple(shapes.slice_dim(d, *s) for d, s in zip(x.shape, index)), x.dtype)]


define(OpDef("slice", "x[start:stop:step, ...] with static bounds per axis", "shape",
             lambda inputs, attrs: (inputs[0][tuple(slice(*s) for s in attrs["index"])].copy(),), _slice_rule, 1))


@vjp("slice")
def _slice_vjp(ad, ins, outs, cts, attrs):
    """y = x[s];  dx = zeros like x with g written at s (one scatter-add per sliced axis)"""
    return [ad.unslice(cts[0], ins[0], attrs["index"])]



# --- reductions --------------------------------------------------------------------

def _reduce_rule(name: str, kinds: str, out_dtype: str | None = None) -> ShapeRule:
    def rule(types, attrs):
        (x,) = types
        _require(_dtype_allowed(kinds, x.dtype), f"{name} needs a {kinds} operand, got {x}")
        axes = attrs["axes"]
        _require(all(0 <= a < x.ndim for a in axes), f"{name} axes {axes} out of range for {x}")
        if name in ("reduce_max", "reduce_min"):
            _require(all(x.shape[a] != 0 for a in axes), f"{name} of an empty axis has no identity")
        return [TensorType(shapes.reduced_shape(x.shape, axes, attrs["keepdims"]), out_dtype or x.dtype)]

    return rule


def _reduce(name: str, fn, kinds: str, doc: str, out_dtype: str | None = None):
    def impl(inputs, attrs):
        result = fn(inputs[0], axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"])
        return (np.asarray(result).astype(out_dtype or inputs[0].dtype, copy=False),)

    define(OpDef(name, doc, "reduction", impl, _reduce_rule(name, kinds, out_dtype), 1,
                 differentiable=kinds != "bool"))


_reduce("reduce_sum", np.sum, "num", "sum over attrs.axes")
_reduce("reduce_mean", np.mean, "float", "mean over attrs.axes")
_reduce("reduce_max", np.max, "num", "max over attrs.axes")
_reduce("reduce_min", np.min, "num", "min over attrs.axes")
_reduce("reduce_any", np.any, "bool", "logical or over attrs.axes")
_reduce("reduce_all", np.all, "bool", "logical and over attrs.axes")


@vjp("reduce_sum")
def _sum_vjp(ad, ins, outs, cts, attrs):
    """y = sum(x, axes);  dx = g broadcast back over axes"""
    return [ad.expand_reduced(cts[0], ins[0], attrs["axes"], attrs["keepdims"])]


@vjp("reduce_mean")
def _mean_vjp(ad, ins, outs, cts, attrs):
    """y = mean(x, axes);  dx = g broadcast back over axes / count"""
    x = ins[0]
    count = 1
    for axis in attrs["axes"]:
        count = count * x.shape[axis]
    return [ad.expand_reduced(cts[0], x, attrs["axes"], attrs["keepdims"]) / count]


@vjp("reduce_max")
@vjp("reduce_min")
def _extremum_reduce_vjp(ad, ins, outs, cts, attrs):
    """y = max(x, axes) (or min);  dx = g at the extremal entries, shared equally by ties"""
    x = ins[0]
    axes, keepdims = attrs["axes"], attrs["keepdims"]
    hit = (x == ad.expand_reduced(outs[0], x, axes, keepdims)).astype(x.dtype)
    share = hit / ad.sum(hit, axis=axes, keepdims=True)
    return [ad.expand_reduced(cts[0], x, axes, keepdims) * share]



def _argmax_rule(types, attrs):
    (x,) = types
    axis = attrs["axis"]
    _require(x.dtype != "bool" and 0 <= axis < x.ndim and x.shape[axis] != 0, f"argmax over axis {axis} of {x}")
    return [TensorType(shapes.reduced_shape(x.shape, (axis,), False), "int64")]


# argmax: first index of the maximum, numpy's tie rule. An index: no gradient.
define(OpDef("argmax", "index of the max along attrs.axis", "reduction",
             lambda inputs, attrs: (np.asarray(np.argmax(inputs[0], axis=attrs["axis"])).astype("int64"),),
             _argmax_rule, 1, differentiable=False))


def _cumsum_rule(types, attrs):
    (x,) = types
    axis = attrs["axis"]
    _require(_dtype_allowed("num", x.dtype), f"cumsum needs a num operand, got {x}")
    _require(isinstance(axis, int) and 0 <= axis < x.ndim, f"cumsum axis {axis} out of range for {x}")
    _require(isinstance(attrs["reverse"], bool), f"cumsum's reverse must be a bool, got {attrs['reverse']!r}")
    return [TensorType(x.shape, x.dtype)]


def _cumsum(inputs, attrs):
    x, axis = inputs[0], attrs["axis"]
    if not attrs["reverse"]:
        return (np.cumsum(x, axis=axis, dtype=x.dtype),)
    # from the last element: the running sums of x flipped, flipped back (a copy, not a view)
    return (np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis).copy(),)


# cumsum: running sums in x's own dtype (the front end widens bool and int32 to int64, as numpy).
define(OpDef("cumsum", "running sums along attrs.axis, from the last element when attrs.reverse", "reduction",
             _cumsum, _cumsum_rule, 1))


@vjp("cumsum")
def _cumsum_vjp(ad, ins, outs, cts, attrs):
    """y_j = Σ_{i≤j} x_i;  dx_i = Σ_{j≥i} g_j: cumsum(g) from the other end (not Σ g - prefix,
    which cancels catastrophically where the late g are small beside the early ones)"""
    return [ad.cumsum_along(cts[0], attrs["axis"], reverse=not attrs["reverse"])]


# --- neural-net primitives (fused for stability and for the lowering) ---------------

def _float_same_rule(name: str) -> ShapeRule:
    def rule(types, attrs):
        (x,) = types
        _require(is_float(x.dtype), f"{name} needs a float operand, got {x}")
        _require(0 <= attrs["axis"] < x.ndim, f"{name} axis {attrs['axis']} out of range for {x}")
        return [TensorType(x.shape, x.dtype)]

    return rule


# The maximum of nothing is -inf here (numpy raises): softmax over an empty axis is
# empty and logsumexp of nothing is -inf, as in jax and in compiled code.
def _softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _logsumexp(x, axes, keepdims):
    peak = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    peak = np.where(np.isfinite(peak), peak, 0).astype(x.dtype)
    out = np.log(np.sum(np.exp(x - peak), axis=axes, keepdims=True)) + peak
    return out if keepdims else np.squeeze(out, axis=axes)


define(OpDef("softmax", "exp(x - max) / sum(exp(x - max)) along attrs.axis", "nn",
             lambda inputs, attrs: (_softmax(inputs[0], attrs["axis"]).astype(inputs[0].dtype),),
             _float_same_rule("softmax"), 1))
define(OpDef("log_softmax", "x - logsumexp(x) along attrs.axis", "nn",
             lambda inputs, attrs: (_log_softmax(inputs[0], attrs["axis"]).astype(inputs[0].dtype),),
             _float_same_rule("log_softmax"), 1))
define(OpDef("logsumexp", "log(sum(exp(x))) over attrs.axes, computed stably", "nn",
             lambda inputs, attrs: (np.asarray(_logsumexp(inputs[0], tuple(attrs["axes"]), attrs["keepdims"])).astype(inputs[0].dtype),),
             _reduce_rule("logsumexp", "float"), 1))


@vjp("softmax")
def _softmax_vjp(ad, ins, outs, cts, attrs):
    """y = softmax(x);  dx = y * (g - Σ g·y) along the axis"""
    y, g = outs[0], cts[0]
    return [y * (g - ad.sum(g * y, axis=attrs["axis"], keepdims=True))]


@vjp("log_softmax")
def _log_softmax_vjp(ad, ins, outs, cts, attrs):
    """y = x - logsumexp(x);  dx = g - exp(y) * Σ g along the axis"""
    y, g = outs[0], cts[0]
    return [g - ad.exp(y) * ad.sum(g, axis=attrs["axis"], keepdims=True)]


@vjp("logsumexp")
def _logsumexp_vjp(ad, ins, outs, cts, attrs):
    """y = log Σ exp(x);  dx = g * exp(x - y) (g and y broadcast back over the axes)"""
    x = ins[0]
    axes, keepdims = attrs["axes"], attrs["keepdims"]
    y = ad.expand_reduced(outs[0], x, axes, keepdims)
    return [ad.expand_reduced(cts[0], x, axes, keepdims) * ad.exp(x - y)]



def _top_k_rule(types, attrs):
    (x,) = types
    k = attrs["k"]
    _require(x.ndim >= 1 and x.dtype != "bool", f"top_k needs a numeric operand of rank >= 1, got {x}")
    last = x.shape[-1]
    _require(isinstance(k, int) and k >= 0 and (not isinstance(last, int) or k <= last),
             f"top_k with k={k} on {x}: k must be an int between 0 and the last dim")
    shape = x.shape[:-1] + (k,)
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


TOP_K_TOO_SHORT = "top_k needs at least k elements along the last axis"


def _top_k(inputs, attrs):
    x, k = inputs[0], attrs["k"]
    if x.shape[-1] < k:  # a symbolic last axis shorter than k at run time (a static one is refused when traced)
        raise ValueError(f"{TOP_K_TOO_SHORT}: k={k}, {x.shape[-1]} given")
    # A stable sort, largest first: ties keep the lower index first (as jax.lax.top_k), and
    # NaN ranks above +inf (as jax, torch and numpy's sort). ~x reverses integers without
    # overflow (-x does not: -INT_MIN); a float's key is -x after the NaNs.
    if x.dtype.kind == "f":
        order = np.lexsort((-x, ~np.isnan(x)), axis=-1)[..., :k]  # lexsort is stable
    else:
        order = np.argsort(~x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype("int64")


define(OpDef("top_k", "the k largest along the last axis, descending, and their indices", "nn",
             _top_k, _top_k_rule, 1, differentiable=True))


@vjp("top_k")
def _top_k_vjp(ad, ins, outs, cts, attrs):
    """values, indices = top_k(x);  dx[..., j] = Σ_k g[..., k] · [indices[..., k] = j]"""
    x, g = ins[0], cts[0]
    if g is None:
        return [None]
    picked = ad.one_hot(outs[1], ad.size_of(x, x.type.ndim - 1), dtype=x.dtype)  # (..., k, n)
    return [ad.sum(ad.expand_dims(g, -1) * picked, axis=-2)]



# --- indexing ----------------------------------------------------------------------

def _take_rule(types, attrs):
    x, index = types
    axis = attrs["axis"]
    _require(is_int(index.dtype), f"take needs an integer index, got {index}")
    _require(0 <= axis < x.ndim, f"take axis {axis} out of range for {x}")
    return [TensorType(x.shape[:axis] + index.shape + x.shape[axis + 1:], x.dtype)]


def check_index_range(index: np.ndarray, size: int):
    """numpy's rule for integer indices: -size <= i < size, negatives wrap. Returns
    the wrapped indices; raises IndexError naming the first offender otherwise."""
    if index.ndim == 0:  # the common case, a row index: stay in Python ints
        value = int(index)
        if not -size <= value < size:
            raise IndexError(f"index {value} is out of range for an axis of size {size}")
        return value + size if value < 0 else value
    bad = (index < -size) | (index >= size)
    if bad.any():
        raise IndexError(f"index {int(index[bad].flat[0])} is out of range for an axis of size {size}")
    return np.where(index < 0, index + size, index)


def _take_impl(inputs, attrs):
    x, index = inputs
    axis = attrs["axis"]
    return (np.take(x, check_index_range(index, x.shape[axis]), axis=axis),)


# take(x, i): rows of x along attrs.axis at integer indices i (rank 0 i: one row).
define(OpDef("take", "x[..., i, ...] along attrs.axis, i any int array", "index", _take_impl, _take_rule, 2))


@vjp("take")
def _take_vjp(ad, ins, outs, cts, attrs):
    """y = take(x, i, axis);  dx = index_add(0, i, g, axis) — kept as sparse rows inside
    loops so an invariant x gets one scatter-add after the loop (DESIGN §4)"""
    x, index = ins
    return [ad.sparse_rows(x, index, cts[0], attrs["axis"]), None]



def _update_rule(types, attrs):
    x, index, value = types
    _require(is_int(index.dtype) and index.ndim == 0, f"update needs an int scalar index, got {index}")
    _require(x.ndim >= 1 and value.shape == x.shape[1:] and value.dtype == x.dtype,
             f"update writes a row {TensorType(x.shape[1:], x.dtype)} of {x}, got {value}")
    return [TensorType(x.shape, x.dtype)]


def _update_impl(inputs, attrs):
    x, index, value = inputs
    out = x.copy()
    out[int(check_index_range(index, x.shape[0]))] = value
    return (out,)


# update(x, i, v): x with row i replaced by v (functional; x.at[i].set(v)).
define(OpDef("update", "x with row i (axis 0) set to v", "index", _update_impl, _update_rule, 3))


@vjp("update")
def _update_vjp(ad, ins, outs, cts, attrs):
    """y = x with row i set to v;  dx = g with row i zeroed, dv = g[i]"""
    x, index, value = ins
    g = cts[0]
    return [g.at[index].set(0), None, ad.take(g, index, axis=0)]



def _index_add_rule(types, attrs):
    x, index, value = types
    axis = attrs["axis"]
    _require(is_int(index.dtype), f"index_add needs an integer index, got {index}")
    _require(0 <= axis < x.ndim, f"index_add axis {axis} out of range for {x}")
    expected = x.shape[:axis] + index.shape + x.shape[axis + 1:]
    _require(value.shape == expected and value.dtype == x.dtype,
             f"index_add into {x} at {index} needs values of shape {expected}, got {value}")
    return [TensorType(x.shape, x.dtype)]


def _index_add_impl(inputs, attrs):
    x, index, value = inputs
    axis = attrs["axis"]
    out = x.copy()
    wrapped = check_index_range(index, x.shape[axis])
    np.add.at(out, (slice(None),) * axis + (wrapped,), value)
    return (out,)


# index_add(x, i, v): scatter-add (duplicates accumulate); the VJP of take.
define(OpDef("index_add", "x with v added at indices i along attrs.axis", "index",
             _index_add_impl, _index_add_rule, 3))


@vjp("index_add")
def _index_add_vjp(ad, ins, outs, cts, attrs):
    """y = x + scatter(i, v);  dx = g, dv = take(g, i)"""
    g = cts[0]
    return [g, None, ad.take(g, ins[1], axis=attrs["axis"])]



def _dim_rule(types, attrs):
    (x,) = types
    _require(0 <= attrs["axis"] < x.ndim, f"dim axis {attrs['axis']} out of range for {x}")
    return [TensorType((), "int64")]


# dim(x): the run-time size of one axis, as an int64 scalar (x.shape[k] for a symbolic k).
define(OpDef("dim", "size of axis attrs.axis of x", "shape",
             lambda inputs, attrs: (np.asarray(inputs[0].shape[attrs["axis"]], "int64"),), _dim_rule, 1,
             lambda a, attrs: f"{a[0]}.shape[{attrs['axis']}]", differentiable=False))


# --- creation ----------------------------------------------------------------------

def _creation_rule(name: str) -> ShapeRule:
    def rule(types, attrs):
        shape = tuple(attrs["shape"])
        _dynamic_sizes_ok(types, shape, name)
        return [TensorType(shape, attrs["dtype"])]

    return rule


define(OpDef("full", "an array of attrs.shape filled with attrs.value", "creation",
             lambda inputs, attrs: (np.full(concrete_shape(attrs["shape"], inputs), attrs["value"], attrs["dtype"]),),
             _creation_rule("full"), None, differentiable=False))


def _iota_impl(inputs, attrs):
    shape = concrete_shape(attrs["shape"], inputs)
    axis = attrs["axis"]
    line = np.arange(shape[axis], dtype=attrs["dtype"])
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return (np.broadcast_to(line.reshape(view), shape).copy(),)


define(OpDef("iota", "0, 1, 2, ... along attrs.axis, broadcast to attrs.shape", "creation",
             _iota_impl, _creation_rule("iota"), None, differentiable=False))


def _const_rule(types, attrs):
    value = attrs["value"]
    return [TensorType(value.shape, value.dtype.name)]


def _const_pretty(args, attrs):
    value = attrs["value"]
    if value.ndim == 0:
        return f"const {value[()]!s}"  # numpy's shortest repr for the dtype: 0.9, not 0.899999976
    if value.size > 1 and (value == value.flat[0]).all():
        return f"const splat({value.flat[0]!s})"
    return f"const {_format_attr(value)}"


define(OpDef("const", "a literal array (attrs.value)", "creation",
             lambda inputs, attrs: (attrs["value"],), _const_rule, 0, _const_pretty, differentiable=False))


# --- tapes ---------------------------------------------------------------------------
# Reverse-mode AD's per-iteration residuals: a LIFO stack per residual, threaded
# through loops as state. Tapes are opaque to algebraic rewrites; the interpreter
# runs them (egad/interp.py) and accounts their bytes.

def _tape_alloc_rule(types, attrs):
    _require(not types, "tape_alloc takes no inputs")
    return [TapeType(attrs["elem"])]


def _tape_push_rule(types, attrs):
    tape, value = types
    _require(isinstance(tape, TapeType) and tape.elem.same_as(value),
             f"tape_push of {value} onto {tape}")
    return [tape]


def _tape_pop_rule(types, attrs):
    (tape,) = types
    _require(isinstance(tape, TapeType), f"tape_pop from {tape}, which is not a tape")
    return [TensorType(tape.elem.shape, tape.elem.dtype), tape]


define(OpDef("tape_alloc", "an empty tape of attrs.elem values", "tape", None, _tape_alloc_rule, 0,
             differentiable=False))
define(OpDef("tape_push", "the tape with value pushed on top", "tape", None, _tape_push_rule, 2,
             differentiable=False))
define(OpDef("tape_pop", "the top value, and the tape without it", "tape", None, _tape_pop_rule, 1,
             differentiable=False))

TAPE_OPS = frozenset({"tape_alloc", "tape_push", "tape_pop"})


# --- control flow ------------------------------------------------------------------
# Control ops carry regions; the interpreter runs them and the verifier checks their
# region signatures (egad/ir/verify.py: `control_result_types`).
#
#   if(pred, *operands; then, else)             regions: (*operands) -> outs
#   switch(index, *operands; *branches)         index clamped to [0, n-1]
#   for(lo, hi, *inits, *invariants; body)      body: (i, *state, *invariants) -> (*state, *ys)
#        attrs: n_state, reverse (i from hi-1 down to lo), trip_dim (leading dim of ys),
#        trip_guess (optional: the cost model's trip count where lo, hi are not constants)
#   while(*inits, *invariants; cond, body)      cond: (*state, *invariants) -> bool
#        attrs: n_state, max_iters, trip_guess   body: (*state, *invariants) -> *state

def _group(label: str, names: list[str]) -> str:
    return f" {label}({', '.join(names)})" if names else ""


def _pretty_branch(name: str) -> PrettyFn:
    return lambda a, attrs: f"{name} {a[0]}" + _group("operands", a[1:])


def _pretty_for(a, attrs):
    n_state = attrs["n_state"]
    text = f"for [{a[0]}, {a[1]})" + (" reversed" if attrs.get("reverse") else "")
    return text + _group("state", a[2:2 + n_state]) + _group("invariants", a[2 + n_state:])


def _pretty_while(a, attrs):
    n_state = attrs["n_state"]
    bound = f" max_iters={attrs['max_iters']}" if attrs.get("max_iters") is not None else ""
    return "while" + bound + _group("state", a[:n_state]) + _group("invariants", a[n_state:])


define(OpDef("if", "run the then- or else-region on operands by a bool predicate", "control",
             None, None, None, _pretty_branch("if")))
define(OpDef("switch", "run branch[clamp(index)] on operands", "control", None, None, None, _pretty_branch("switch")))
define(OpDef("for", "iterate body over i in [lo, hi) carrying state, stacking per-step ys", "control",
             None, None, None, _pretty_for))
define(OpDef("while", "iterate body while cond(state) holds", "control", None, None, None, _pretty_while))

CONTROL_OPS = frozenset({"if", "switch", "for", "while"})
