"""`egad.numpy`: numpy's names and semantics on traced values (and on numpy values,
which run eagerly through the same op implementations).

Every function here promotes its operands with numpy 2's rules (Python scalars are
weak: `float32_array * 2.0` stays float32), inserts the casts the strict IR ops
need, and records ops through `primitives.apply`.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..errors import ArgumentError, IndexOutOfRangeError, MissingFunctionError, ShapeError, UnsupportedError, message
from ..ir import shapes
from ..ir.types import canonical_dtype, fresh_symbol, is_float, is_int
from ..source import user_location
from . import context
from .primitives import apply1, cast_to, constant, dtype_of, is_tracer, result_dtype, to_tracer

# numpy's dtype names, so `x.astype(enp.float32)` reads like numpy.
bool_ = np.bool_
int32, int64, float32, float64 = np.int32, np.int64, np.float32, np.float64
pi, e, inf, nan, newaxis = np.pi, np.e, np.inf, np.nan, None
ndarray = np.ndarray


def _dtype_name(dtype) -> str:
    try:
        return canonical_dtype(dtype)
    except (TypeError, ValueError) as error:
        raise ShapeError(message(f"unsupported dtype {dtype!r}: {error}", where=user_location().long())) from None


def _rank(x) -> int:
    return x.ndim if is_tracer(x) else np.ndim(x)


def _shape_of(x) -> tuple:
    """Static type shape (ints and symbol names)."""
    return x.type.shape if is_tracer(x) else np.shape(x)


def asarray(x, dtype=None):
    """numpy's asarray: tracers pass through (cast if dtype is given); a weakly typed
    tracer (a traced Python scalar) becomes strong, as numpy's asarray(2.0) is float64."""
    if is_tracer(x):
        if dtype is None and not x.type.weak:
            return x
        return astype(x, dtype if dtype is not None else x.type.dtype)
    return np.asarray(x, dtype=dtype)


array = asarray


# --- elementwise ---------------------------------------------------------------------

def _unary_float(op_name: str):
    def fn(x):
        dtype, weak = dtype_of(x)
        if not is_float(dtype):
            dtype = "float64"  # numpy: exp(int array) is float64
        return apply1(op_name, [cast_to(x, dtype, weak)])

    fn.__name__ = op_name
    fn.__doc__ = f"numpy's {op_name}, elementwise."
    return fn


exp = _unary_float("exp")
expm1 = _unary_float("expm1")
log = _unary_float("log")
log1p = _unary_float("log1p")
tanh = _unary_float("tanh")
sin = _unary_float("sin")
cos = _unary_float("cos")
sqrt = _unary_float("sqrt")
_floor_of_float = _unary_float("floor")


def floor(x):
    """numpy's floor (integers and bools are returned unchanged, as numpy 2 does)."""
    return _floor_of_float(x) if is_float(dtype_of(x)[0]) else asarray(x)


def _unary_same(op_name: str, numpy_name: str, keep_weak: bool = False):
    def fn(x):
        dtype, weak = dtype_of(x)
        return apply1(op_name, [to_tracer(x) if is_tracer(x) else np.asarray(x, dtype)], weak=weak and keep_weak)

    fn.__name__ = numpy_name
    fn.__doc__ = f"numpy's {numpy_name}, elementwise."
    return fn


negative = _unary_same("neg", "negative")
_abs_of_number = _unary_same("abs", "abs")


def abs(x):
    """numpy's abs (of a bool: the bool itself)."""
    return x if dtype_of(x)[0] == "bool" else _abs_of_number(x)


absolute = abs
sign = _unary_same("sign", "sign")


def logical_not(x):
    """numpy's logical_not: any dtype, non-zero is true."""
    return apply1("logical_not", [_as_bool(x)])


def invert(x):
    """`~x`: logical not on bools (ints' bitwise not is not supported)."""
    if dtype_of(x)[0] != "bool":
        raise UnsupportedError(message("~ on integers (bitwise not) is not supported", where=user_location().long(),
                                       instead="use ~ on bool values, or -x - 1"))
    return logical_not(x)


def square(x):
    """numpy's square: x * x, same dtype."""
    return multiply(x, x)


def _as_bool(x):
    dtype, _ = dtype_of(x)
    if dtype == "bool":
        return x if is_tracer(x) else np.asarray(x, bool)
    return not_equal(x, 0)


def _promoted(a, b):
    dtype, weak = result_dtype(a, b)
    return cast_to(a, dtype, weak), cast_to(b, dtype, weak), dtype, weak


_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _beyond(value, dtype: str) -> bool:
    """A Python int that `dtype` cannot hold."""
    if type(value) is not int:
        return False
    limits = np.iinfo(dtype)
    return not limits.min <= value <= limits.max


def _weak_traced_int(value) -> bool:
    """A traced Python int (weakly typed int64)."""
    return is_tracer(value) and value.type.weak and is_int(value.type.dtype)


def _whole(value) -> bool:
    """A Python or numpy int, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _affine_form(value) -> tuple | None:
    """(base, scale, offset) with value = scale * base + offset, for an int scalar: a
    Python int is (None, 0, value), a traced one its recorded form or (itself, 1, 0)."""
    if _whole(value):
        return None, 0, int(value)
    if is_tracer(value) and value.type.ndim == 0 and is_int(value.type.dtype):
        return value._affine or (value, 1, 0)
    return None


def _affine_combination(op_name: str, a, b) -> tuple | None:
    """The affine form of `a op b` (op add, sub or mul), when it has one over a single
    traced base; None otherwise (t * u, t + u of two bases)."""
    forms = _affine_form(a), _affine_form(b)
    if None in forms:
        return None
    (base_a, scale_a, offset_a), (base_b, scale_b, offset_b) = forms
    if op_name == "mul":
        if base_a is not None and base_b is not None:
            return None
        (base, scale, offset), factor = (forms[0], offset_b) if base_b is None else (forms[1], offset_a)
        return (base, scale * factor, offset * factor) if base is not None else None
    if base_a is not None and base_b is not None and base_a is not base_b:
        return None
    sign = 1 if op_name == "add" else -1
    base = base_a if base_a is not None else base_b
    return (base, scale_a + sign * scale_b, offset_a + sign * offset_b) if base is not None else None


def _size_sum_symbol(a, b) -> str | None:
    """The dim a sum of sizes is (`x.shape[0] + 2` is `T+2`, as long as
    enp.concatenate([x, two]) is), so that enp.zeros(x.shape[0] + 2) has that dim; None
    unless both are sizes: a symbolic dim's traced size or a static int >= 0."""
    parts = []
    for value in (a, b):
        if is_tracer(value) and value._symbol:
            parts.append(value._symbol)
        elif _whole(value) and value >= 0:
            parts.append(int(value))
        else:
            return None
    return shapes.joined_dim(parts)


def _binary(op_name: str, numpy_name: str, *, bool_op: str | None = None, float_only: bool = False,
            keep_weak: bool = False):
    def fn(a, b):
        dtype, weak = result_dtype(a, b)
        if op_name in _COMPARISONS and is_int(dtype) and builtins.any(_beyond(v, dtype) or _weak_traced_int(v)
                                                                      for v in (a, b)):
            # numpy 2 compares a Python int with any integer array by value; a traced one
            # (an argument, a loop counter) may hold any int64 at run time
            dtype = "int64"
        if float_only and not is_float(dtype):
            dtype = "float64"  # numpy: int / int is float64
        name = op_name
        if dtype == "bool" and bool_op:
            name = bool_op  # numpy: bool + bool is logical or, bool * bool logical and
        elif dtype == "bool" and op_name not in (*_COMPARISONS, "maximum", "minimum"):
            raise UnsupportedError(message(f"{numpy_name} of bool operands", where=user_location().long(),
                                           instead="convert with .astype('int64') first"))
        elif dtype == "bool":
            name = {"maximum": "logical_or", "minimum": "logical_and"}.get(op_name, op_name)
        result = apply1(name, [cast_to(a, dtype, weak), cast_to(b, dtype, weak)], weak=weak and keep_weak)
        if op_name == "add" and is_tracer(result):
            result._symbol = _size_sum_symbol(a, b)
        if op_name == "sub" and is_tracer(result) and is_tracer(a) and a._symbol and _whole(b) and b >= 0:
            result._less = (a._symbol, int(b))
        if op_name in ("add", "sub", "mul") and is_tracer(result) and result.type.ndim == 0 and is_int(dtype):
            result._affine = _affine_combination(op_name, a, b)
        return result

    fn.__name__ = numpy_name
    fn.__doc__ = f"numpy's {numpy_name} with numpy 2 promotion (Python scalars are weak)."
    return fn


add = _binary("add", "add", bool_op="logical_or")
subtract = _binary("sub", "subtract")
multiply = _binary("mul", "multiply", bool_op="logical_and")
true_divide = _binary("div", "true_divide", float_only=True)
divide = true_divide
floor_divide = _binary("floordiv", "floor_divide")
mod = _binary("mod", "mod")
remainder = mod
power = _binary("pow", "power")
maximum = _binary("maximum", "maximum")
minimum = _binary("minimum", "minimum")
equal = _binary("eq", "equal")
not_equal = _binary("ne", "not_equal")
less = _binary("lt", "less")
less_equal = _binary("le", "less_equal")
greater = _binary("gt", "greater")
greater_equal = _binary("ge", "greater_equal")


# The operators (`a + b`, `-a`, `abs(a)`) keep weakness, as Python arithmetic on Python
# scalars gives Python scalars; the enp functions give strong results, as numpy's do
# (np.sqrt(4.0) is a strong np.float64).
OPERATORS = {
    "add": _binary("add", "add", bool_op="logical_or", keep_weak=True),
    "subtract": _binary("sub", "subtract", keep_weak=True),
    "multiply": _binary("mul", "multiply", bool_op="logical_and", keep_weak=True),
    "true_divide": _binary("div", "true_divide", float_only=True, keep_weak=True),
    "floor_divide": _binary("floordiv", "floor_divide", keep_weak=True),
    "mod": _binary("mod", "mod", keep_weak=True),
    "power": _binary("pow", "power", keep_weak=True),
    "negative": _unary_same("neg", "negative", keep_weak=True),
}
_abs_operator = _unary_same("abs", "abs", keep_weak=True)


def _abs_keeping_weak(x):
    return x if dtype_of(x)[0] == "bool" else _abs_operator(x)


OPERATORS["abs"] = _abs_keeping_weak


def _logical(op_name: str):
    def fn(a, b):
        return apply1(op_name, [_as_bool(a), _as_bool(b)])

    fn.__name__ = op_name
    fn.__doc__ = f"numpy's {op_name}: non-zero is true."
    return fn


logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")


def missing_function(written: str, name: str) -> AttributeError:
    """The error for numpy's `name` (written as `written`) where egad.numpy lacks it; a
    plain AttributeError for a name numpy lacks too."""
    if name.startswith("_") or not hasattr(np, name) and not hasattr(np.ndarray, name):
        return AttributeError(f"egad.numpy has no attribute {name!r}")
    return MissingFunctionError(message(
        f"{written} is not in egad.numpy", where=user_location().long(),
        instead="write it with the functions egad.numpy has (the ops are listed in docs/ir.md), or compute "
                "it outside the traced function"))


def _bitwise(name: str, logical):
    def fn(a, b):
        if result_dtype(a, b)[0] != "bool":
            raise UnsupportedError(message(f"{name} on integers is not supported", where=user_location().long(),
                                           instead="use &, |, ^ on bool values (comparisons)"))
        return logical(a, b)

    fn.__name__ = name
    return fn


bitwise_and = _bitwise("bitwise_and", logical_and)
bitwise_or = _bitwise("bitwise_or", logical_or)
bitwise_xor = _bitwise("bitwise_xor", logical_xor)


def where(condition, x, y):
    """numpy's where(condition, x, y) (the three-argument form)."""
    x, y, _, _ = _promoted(x, y)
    return apply1("select", [_as_bool(condition), x, y])


def clip(a, a_min=None, a_max=None):
    """numpy's clip: minimum(maximum(a, a_min), a_max); either bound may be None. A
    Python scalar `a` is an array to numpy here (strong: clip(3, int32 bounds) is int64)."""
    if isinstance(a, (bool, int, float)) and not isinstance(a, np.generic):
        a = np.asarray(a)
    if a_min is not None:
        a = maximum(a, a_min)
    if a_max is not None:
        a = minimum(a, a_max)
    return a


def astype(x, dtype):
    """numpy's x.astype(dtype)."""
    return apply1("cast", [to_tracer(x) if is_tracer(x) else np.asarray(x)], {"dtype": _dtype_name(dtype)})


def stop_gradient(x):
    """The value of x, with no gradient flowing back through it (pytrees too)."""
    from ..pytree import tree_map

    return tree_map(lambda leaf: apply1("stop_gradient", [leaf]) if is_tracer(leaf) else leaf, x)


UFUNC_TO_ENP = {
    "add": add, "subtract": subtract, "multiply": multiply, "true_divide": true_divide, "divide": true_divide,
    "floor_divide": floor_divide, "remainder": mod, "power": power, "matmul": None, "maximum": maximum,
    "minimum": minimum, "equal": equal, "not_equal": not_equal, "less": less, "less_equal": less_equal,
    "greater": greater, "greater_equal": greater_equal, "bitwise_and": bitwise_and, "bitwise_or": bitwise_or,
    "bitwise_xor": bitwise_xor,
}


# --- linear algebra --------------------------------------------------------------------

def matmul(a, b):
    """numpy's a @ b (batched; 1-D operands are promoted and the axis dropped)."""
    a, b, _, _ = _promoted(a, b)
    return apply1("matmul", [a, b])


UFUNC_TO_ENP["matmul"] = matmul


def dot(a, b):
    """numpy's dot for operands of rank <= 2 (scalars multiply)."""
    if _rank(a) == 0 or _rank(b) == 0:
        return multiply(a, b)
    if _rank(a) > 2 or _rank(b) > 2:
        raise UnsupportedError(message("dot of operands with rank > 2", where=user_location().long(),
                                       instead="use enp.matmul or enp.einsum"))
    return matmul(a, b)


def einsum(subscripts: str, *operands):
    """numpy's einsum with explicit or implicit output (no ellipsis)."""
    dtype, weak = result_dtype(*operands)
    return apply1("einsum", [cast_to(x, dtype, weak) for x in operands], {"spec": subscripts.replace(" ", "")})


# --- reductions ------------------------------------------------------------------------

def _reduce(op_name: str, x, axis, keepdims: bool):
    axes = shapes.normalize_axes(axis, _rank(x))
    return apply1(op_name, [x], {"axes": axes, "keepdims": bool(keepdims)})


def sum(a, axis=None, keepdims=False, dtype=None):
    """numpy's sum (bool and int32 sum to int64, as numpy on 64-bit Linux)."""
    source, _ = dtype_of(a)
    target = _dtype_name(dtype) if dtype is not None else ("int64" if source in ("bool", "int32") else source)
    if target == "bool":  # numpy adds bools as logical or
        return any(a, axis, keepdims)
    return _reduce("reduce_sum", cast_to(a, target), axis, keepdims)


def mean(a, axis=None, keepdims=False):
    """numpy's mean (integers average to float64)."""
    source, _ = dtype_of(a)
    return _reduce("reduce_mean", cast_to(a, source if is_float(source) else "float64"), axis, keepdims)


def var(a, axis=None, keepdims=False, ddof=0):
    """numpy's var: mean squared deviation, divided by (n - ddof)."""
    centered = subtract(a, mean(a, axis=axis, keepdims=True))
    squares = mean(multiply(centered, centered), axis=axis, keepdims=keepdims)
    if ddof == 0:
        return squares
    count = size_of_dims([shape(a)[k] for k in shapes.normalize_axes(axis, _rank(a))])
    if isinstance(count, int):  # Python arithmetic keeps the factor weak, so float32 stays float32
        denominator = builtins.max(count - ddof, 0)
        return multiply(squares, count / denominator if denominator else np.inf)
    return multiply(squares, count / (count - ddof))


def std(a, axis=None, keepdims=False, ddof=0):
    """numpy's std: the square root of var."""
    return sqrt(var(a, axis=axis, keepdims=keepdims, ddof=ddof))


def max(a, axis=None, keepdims=False):
    """numpy's max (amax)."""
    if dtype_of(a)[0] == "bool":
        return any(a, axis, keepdims)
    return _reduce("reduce_max", a, axis, keepdims)


def min(a, axis=None, keepdims=False):
    """numpy's min (amin)."""
    if dtype_of(a)[0] == "bool":
        return all(a, axis, keepdims)
    return _reduce("reduce_min", a, axis, keepdims)


amax, amin = max, min


def any(a, axis=None, keepdims=False):
    """numpy's any: is any element non-zero."""
    return _reduce("reduce_any", _as_bool(a), axis, keepdims)


def all(a, axis=None, keepdims=False):
    """numpy's all: are all elements non-zero."""
    return _reduce("reduce_all", _as_bool(a), axis, keepdims)


def argmax(a, axis=None, keepdims=False):
    """numpy's argmax: the first index of the maximum (flattened when axis is None)."""
    rank = _rank(a)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    if dtype_of(a)[0] == "bool":
        a = astype(a, "int64")
    index = apply1("argmax", [a], {"axis": shapes.normalize_axis(axis, _rank(a))})
    if not keepdims:
        return index
    if rank != _rank(a):  # flattened: numpy keeps every axis, each of size 1
        return reshape(index, (1,) * rank)
    return expand_dims(index, shapes.normalize_axis(axis, rank))


def cumsum(a, axis=None, dtype=None):
    """numpy's cumsum: running sums along `axis` (of the flattened array when axis is
    None), bool and int32 summed in int64 as numpy on 64-bit Linux.

        enp.cumsum(x, axis=-1)  # x = [[1, 2, 3]] -> [[1, 3, 6]]
    """
    source, _ = dtype_of(a)
    target = _dtype_name(dtype) if dtype is not None else ("int64" if source in ("bool", "int32") else source)
    if axis is None or _rank(a) == 0:  # numpy's cumsum of a 0-d array is that of a 1-d one (axis 0 or -1)
        a = reshape(a, (-1,))
    axis = shapes.normalize_axis(0 if axis is None else axis, _rank(a))
    if target == "bool":  # numpy accumulates bools as logical or: any of the prefix
        return not_equal(cumsum(_as_bool(a), axis=axis, dtype="int64"), 0)
    return apply1("cumsum", [cast_to(a, target)], {"axis": axis, "reverse": False})


# --- shapes ----------------------------------------------------------------------------

def dim_size(x, axis: int):
    """Size of one axis: a Python int when static, else a traced int64 scalar that
    remembers its symbol (so `enp.zeros((xs.shape[0], 3))` keeps the dim symbolic)."""
    dim = x.type.shape[axis]
    if isinstance(dim, int):
        return dim
    cached = x._dim_cache.get(axis)
    if cached is None or not _in_scope(cached):  # asked first inside a branch or loop body that has closed
        from .tracer import Tracer

        size = apply1("dim", [x], {"axis": axis}, weak=True)
        cached = x._dim_cache[axis] = Tracer(size._builder, size._var, symbol=dim)
    return cached


def _in_scope(value) -> bool:
    """Whether a traced value can be read in the current region: made in it or in a
    region enclosing it (whose values it captures)."""
    here = context.current()
    return here is not None and here.is_within(value._builder)


def shape(x) -> tuple:
    """numpy's shape: static dims are ints, symbolic dims traced int scalars."""
    return x.shape if is_tracer(x) else np.shape(x)


def ndim(x) -> int:
    return _rank(x)


def size(x):
    """Number of elements (traced when a dim is symbolic)."""
    return size_of_dims(shape(x))


def _split_dims(dims) -> tuple[tuple, list]:
    """A requested shape as (type dims, run-time size inputs for the symbolic ones)."""
    type_dims, sizes = [], []
    for dim in dims:
        if is_tracer(dim):
            if dim.ndim != 0 or not is_int(dim.type.dtype):
                raise ShapeError(message(f"a shape entry must be an int, got a traced {dim.type}",
                                         where=user_location().long()))
            type_dims.append(dim._symbol or fresh_symbol("d"))
            sizes.append(cast_to(dim, "int64"))
        else:
            if isinstance(dim, (bool, float)) or int(dim) != dim:
                raise ShapeError(message(f"shape entries must be ints, got {dim!r}", where=user_location().long()))
            type_dims.append(int(dim))
    return tuple(type_dims), sizes


def _normalize_shape_arg(new_shape) -> tuple:
    if isinstance(new_shape, (list, tuple)):
        return tuple(new_shape)
    return (new_shape,)


def reshape(a, newshape):
    """numpy's reshape (C order); one -1 is inferred."""
    dims = list(_normalize_shape_arg(newshape))
    inferred = [k for k, d in enumerate(dims) if not is_tracer(d) and d == -1]  # (no == on traced dims)
    if inferred:
        if len(inferred) > 1:
            raise ShapeError(message("reshape can infer only one -1 dim", where=user_location().long()))
        position = inferred[0]
        others = size_of_dims([d for i, d in enumerate(dims) if i != position])
        total = size(a)
        if isinstance(total, int) and isinstance(others, int):
            if others == 0 or total % others:
                raise ShapeError(message(f"cannot reshape {_shape_of(a)} to {tuple(newshape)}",
                                         where=user_location().long()))
            dims[position] = total // others
        else:
            dims[position] = floor_divide(total, others)
    return _reshape_to_dims(a, dims)


def size_of_dims(dims):
    """The product of dims (ints, or traced sizes)."""
    total = 1
    for d in dims:
        total = total * d
    return total


def _reshape_to_dims(a, dims: list):
    """Reshape to `dims` (ints or traced sizes); no op when the shape is unchanged."""
    type_dims, sizes = _split_dims(dims)
    if type_dims == tuple(_shape_of(a)):
        return a
    return apply1("reshape", [a, *sizes], {"shape": type_dims})


def transpose(a, axes=None):
    """numpy's transpose (reversed axes by default)."""
    rank = _rank(a)
    perm = tuple(reversed(range(rank))) if axes is None else tuple(shapes.normalize_axis(x, rank) for x in axes)
    if perm == tuple(range(rank)):
        return a
    return apply1("transpose", [a], {"perm": perm})


def swapaxes(a, axis1, axis2):
    perm = list(range(_rank(a)))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(a, perm)


def expand_dims(a, axis):
    """numpy's expand_dims (axis may be a tuple)."""
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    rank = _rank(a) + len(axes)
    positions = {shapes.normalize_axis(x, rank) for x in axes}
    dims = list(shape(a))
    out = []
    for position in range(rank):
        out.append(1 if position in positions else dims.pop(0))
    return _reshape_to_dims(a, out)


def squeeze(a, axis=None):
    """numpy's squeeze: drop size-1 axes (all of them, or those in `axis`). Without
    `axis`, a symbolic dim (an egad.Spec's "T") is kept even where it is 1 at run time,
    where numpy would drop it: one program has one rank (JAX refuses instead)."""
    type_shape = _shape_of(a)
    if axis is None:
        axes = {i for i, d in enumerate(type_shape) if d == 1}
    else:
        axes = set(shapes.normalize_axes(axis, _rank(a)))
        for i in axes:
            if type_shape[i] != 1:
                raise ShapeError(message(f"cannot squeeze axis {i} of size {type_shape[i]}",
                                         where=user_location().long()))
    return _reshape_to_dims(a, [d for i, d in enumerate(shape(a)) if i not in axes])


def broadcast_to(a, new_shape):
    """numpy's broadcast_to."""
    type_dims, sizes = _split_dims(_normalize_shape_arg(new_shape))
    if type_dims == tuple(_shape_of(a)):
        return a
    return apply1("broadcast_to", [a, *sizes], {"shape": type_dims})


def _some_arrays(arrays, name: str) -> list:
    arrays = list(arrays)
    if not arrays:
        raise ArgumentError(message(f"{name} needs at least one array", where=user_location().long(),
                                    instead="check the list is not empty (a loop that ran zero times?)"))
    return arrays


def concatenate(arrays, axis=0):
    """numpy's concatenate."""
    arrays = _some_arrays(arrays, "concatenate")
    dtype, weak = result_dtype(*arrays)
    axis = shapes.normalize_axis(axis, _rank(arrays[0]))
    return apply1("concat", [cast_to(x, dtype, weak) for x in arrays], {"axis": axis})


def stack(arrays, axis=0):
    """numpy's stack: join along a new axis."""
    arrays = _some_arrays(arrays, "stack")
    axis = shapes.normalize_axis(axis, _rank(arrays[0]) + 1)
    return concatenate([expand_dims(x, axis) for x in arrays], axis=axis)


def take(a, indices, axis=None):
    """numpy's take (flattened when axis is None); negative indices wrap."""
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    axis = shapes.normalize_axis(axis, _rank(a))
    if not is_tracer(indices):
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":  # any integer array, as numpy takes: uint8 indices too
            raise ShapeError(message(f"take needs integer indices, got {indices.dtype}", where=user_location().long()))
        indices = indices.astype("int64")
    return apply1("take", [a, indices], {"axis": axis})


# --- creation --------------------------------------------------------------------------

def _fill(shape_arg, value, dtype, weak=False):
    """A fill of `shape_arg`: traced while tracing (a constant of static shape too, so
    that `enp.zeros((n, m)).at[i].set(v)` works as in JAX), numpy's array outside."""
    type_dims, sizes = _split_dims(_normalize_shape_arg(shape_arg))
    if not sizes:
        return constant(np.full(type_dims, value, dtype), dtype, weak=weak)
    return apply1("full", sizes, {"shape": type_dims, "value": value, "dtype": dtype})


def zeros(shape, dtype=float):
    """numpy's zeros (float64 by default)."""
    return _fill(shape, 0, _dtype_name(dtype))


def ones(shape, dtype=float):
    """numpy's ones (float64 by default)."""
    return _fill(shape, 1, _dtype_name(dtype))


def full(shape, fill_value, dtype=None):
    """numpy's full; a traced fill value is broadcast."""
    if is_tracer(fill_value):
        value = fill_value if dtype is None else astype(fill_value, dtype)
        return broadcast_to(value, shape)
    dtype = _dtype_name(dtype if dtype is not None else np.asarray(fill_value).dtype)
    return _fill(shape, fill_value, dtype)


def zeros_like(a, dtype=None):
    """numpy's zeros_like; as weakly typed as a traced `a` unless a dtype is given."""
    return full_like(a, 0, dtype)


def ones_like(a, dtype=None):
    """numpy's ones_like; as weakly typed as a traced `a` unless a dtype is given."""
    return full_like(a, 1, dtype)


def full_like(a, fill_value, dtype=None):
    """numpy's full_like; as weakly typed as a traced `a` unless a dtype is given."""
    if is_tracer(fill_value):
        return full(shape(a), fill_value, dtype if dtype is not None else dtype_of(a)[0])
    weak = dtype is None and is_tracer(a) and a.type.weak
    return _fill(shape(a), fill_value, _dtype_name(dtype) if dtype is not None else dtype_of(a)[0], weak)


def arange(start, stop=None, step=1, dtype=None):
    """numpy's arange; a traced stop (or start) gives a symbolic length."""
    if stop is None:
        start, stop = 0, start
    if not builtins.any(is_tracer(v) for v in (start, stop, step)):
        return np.arange(start, stop, step, dtype=dtype)
    if is_tracer(step) or step != 1:
        return _stepped_arange(start, stop, step, dtype)
    if is_tracer(stop) and stop._symbol and not is_tracer(start) and start == 0:
        length = stop  # arange(x.shape[0]) keeps x's symbolic dim
    else:
        length = maximum(subtract(stop, start), 0)
        sized = (stop._symbol, 0) if is_tracer(stop) and stop._symbol else stop._less if is_tracer(stop) else None
        if sized and _whole(start) and start >= 0:
            # arange(k, T) and arange(T - k) are as long as x[k:] (max(T - k, 0)): the same
            # dim, so they broadcast
            length._symbol = shapes.slice_dim(sized[0], sized[1] + int(start), None, None)
    # numpy's arange counts in int64 or float64 whatever the bounds' widths (arange(np.int32(4)) is int64)
    out_dtype = _dtype_name(dtype) if dtype is not None else \
        ("int64" if is_int(result_dtype(start, stop)[0]) else "float64")
    type_dims, sizes = _split_dims([length if is_tracer(length) else int(length)])
    counter = apply1("iota", sizes, {"shape": type_dims, "axis": 0, "dtype": out_dtype}) if sizes else \
        np.arange(int(length), dtype=out_dtype)
    return add(counter, cast_to(start, out_dtype)) if (is_tracer(start) or start != 0) else counter


def _stepped_arange(start, stop, step, dtype):
    """arange(start, stop, step) with a traced bound and a static int step other than
    1, for int bounds: start + step * arange(n), n = max(ceil((stop - start) / step), 0)
    (a computed length: a fresh dim)."""
    if is_tracer(step) or not _whole(step) or step == 0 or not is_int(result_dtype(start, stop)[0]):
        raise UnsupportedError(message("arange with a traced bound needs int bounds and a static, non-zero int step",
                                       where=user_location().long(),
                                       instead="compute enp.arange(n) * step + start"))
    span = subtract(stop, start) if step > 0 else subtract(start, stop)
    count = maximum(floor_divide(add(span, builtins.abs(int(step)) - 1), builtins.abs(int(step))), 0)
    counter = arange(count, dtype=dtype if dtype is not None else "int64")
    return add(multiply(counter, int(step)), cast_to(start, counter.type.dtype))


# --- indexing --------------------------------------------------------------------------

def getitem(x, index):
    """numpy basic indexing with static ints/slices/None/..., plus traced integer
    indices (scalars or arrays; one array index at most)."""
    if not isinstance(index, tuple):
        index = (index,)
    rank = _rank(x)
    consumed = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if builtins.sum(1 for i in index if i is Ellipsis) > 1:
        raise ShapeError(message("an index can hold only one Ellipsis", where=user_location().long()))
    if consumed > rank:
        raise IndexOutOfRangeError(message(f"too many indices ({consumed}) for an array of rank {rank}",
                                           where=user_location().long()))
    expanded = []
    for entry in index:
        if entry is Ellipsis:
            expanded.extend([slice(None)] * (rank - consumed))
        else:
            expanded.append(entry)
    expanded.extend([slice(None)] * (rank - builtins.sum(1 for i in expanded if i is not None)))

    # 1. Static slices, all in one `slice` op; windows of traced bounds a static length
    #    apart (x[t:t + k]) after it, as takes of k rows.
    type_shape = _shape_of(x)
    slices, windows, axis = [], [], 0
    for entry in expanded:
        if entry is None:
            continue
        traced = isinstance(entry, slice) and builtins.any(is_tracer(b) for b in (entry.start, entry.stop, entry.step))
        if traced:
            start, length = _window(entry)
            slices.append((0, 0, None) if length == 0 else (None, None, None))  # x[t:t] is empty for any t
            if length:
                windows.append((axis, start, length))
            axis += 1
            continue
        if isinstance(entry, slice):
            if entry.step == 0:
                raise ShapeError(message("slice step cannot be zero", where=user_location().long()))
            bounds = (entry.start, entry.stop, entry.step)
            # x[-1::-1] is x[::-1] on an axis of any length (a symbolic one keeps its name)
            slices.append((None, None, -1) if bounds == (-1, None, -1) else bounds)
        else:
            slices.append((None, None, None))
        axis += 1
    if builtins.any(s != (None, None, None) for s in slices):
        x = apply1("slice", [x], {"index": tuple(slices)})
    for axis, start, length in windows:
        x = _window_rows(x, axis, start, length)

    # 2. Integer indices (static, traced, arrays) as takes, last axis first so the
    #    positions of earlier axes stay valid.
    positions, axis = [], 0
    for entry in expanded:
        if entry is None:
            continue
        if not isinstance(entry, slice):
            positions.append((axis, entry))
        axis += 1
    array_indices = [e for _, e in positions if _rank(e) > 0 if not isinstance(e, (int, np.integer))]
    if len(array_indices) > 1:
        raise UnsupportedError(message("more than one array index in one subscript", where=user_location().long(),
                                       instead="index one axis at a time, or use enp.take"))
    for axis, entry in reversed(positions):
        x = _take_index(x, entry, axis, type_shape)

    # 3. None entries insert new axes.
    if builtins.any(entry is None for entry in expanded):
        dims, out, position = list(shape(x)), [], 0
        for entry in expanded:
            if entry is None:
                out.append(1)
            elif isinstance(entry, slice):
                out.append(dims[position])
                position += 1
            elif _rank(entry) > 0:
                out.extend(dims[position:position + _rank(entry)])
                position += _rank(entry)
        out.extend(dims[position:])
        x = _reshape_to_dims(x, out)

    # 4. As numpy: an array index's dims go first when a slice or None separates the
    #    integer and array indices (a[0, :, i]); where they are adjacent, in place.
    advanced = [k for k, entry in enumerate(expanded) if entry is not None and not isinstance(entry, slice)]
    if array_indices and advanced[-1] - advanced[0] + 1 != len(advanced):
        (array,) = array_indices
        where = next(k for k, entry in enumerate(expanded) if entry is array)
        at = builtins.sum(1 for entry in expanded[:where] if entry is None or isinstance(entry, slice))
        moved = list(range(at, at + _rank(array)))
        x = transpose(x, moved + [k for k in range(_rank(x)) if k not in moved])
    return x


def _window(entry: slice) -> tuple:
    """(start, k) for a slice whose traced bounds are k >= 0 apart, `x[t:t + k]` or
    `x[k * t:k * (t + 1)]` (both affine in one traced int, with one scale); refused
    otherwise: its length would depend on the data."""
    start_form, stop_form = _affine_form(entry.start), _affine_form(entry.stop)
    if not is_tracer(entry.step) and entry.step in (None, 1) and start_form and stop_form and start_form[0] is not None \
            and start_form[0] is stop_form[0] and start_form[1] == stop_form[1] and stop_form[2] >= start_form[2]:
        # (x[t:t - 2] is not empty in numpy where t - 2 wraps around: x[1:-1])
        return entry.start, stop_form[2] - start_form[2]
    raise UnsupportedError(message(
        "slicing with traced bounds gives a data-dependent shape unless the bounds are a static length apart",
        where=user_location().long(),
        instead="write a window as x[t:t + k] (k a Python int), index a single row with x[i], or use enp.take"))


def _window_rows(x, axis: int, start, length: int):
    """x[start:start + length] along `axis`: a take of rows start, ..., start + length - 1.
    Only a window inside the axis is numpy's slice of that length, so one that is not
    raises as an index out of range does (a take of the axis' size where the start is
    negative, which take would wrap where numpy's slice is shorter or empty)."""
    rows = add(np.arange(length, dtype="int64"), cast_to(start, "int64"))
    size = shape(x)[axis]
    index = where(greater_equal(start, 0), rows, size if is_tracer(size) else np.int64(size))
    return apply1("take", [x, index], {"axis": axis})


def _take_index(x, entry, axis: int, original_shape):
    if isinstance(entry, (bool, np.bool_)):
        raise UnsupportedError(message("indexing with a bool scalar (x[True]) is not supported",
                                       where=user_location().long(), instead="use x[None] for a new axis"))
    if (not is_tracer(entry) and np.asarray(entry).dtype == bool) or \
            (is_tracer(entry) and entry.type.dtype == "bool"):
        raise UnsupportedError(message("boolean mask indexing gives a data-dependent shape",
                                       where=user_location().long(), instead="use enp.where(mask, x, 0)"))
    if isinstance(entry, (int, np.integer)):
        size_here = _shape_of(x)[axis]
        if isinstance(size_here, int) and not -size_here <= int(entry) < size_here:
            raise IndexOutOfRangeError(message(f"index {int(entry)} is out of range for axis {axis} of size {size_here}",
                                               where=user_location().long()))
        entry = np.asarray(entry, "int64")
    elif is_tracer(entry):
        if not is_int(entry.type.dtype):
            raise ShapeError(message(f"indices must be integers, got a traced {entry.type}",
                                     where=user_location().long(), instead="convert with .astype('int64')"))
    else:
        entry = np.asarray(entry)
        if entry.dtype.kind not in "iu":  # any integer array, as numpy indexes: uint8 indices too
            raise ShapeError(message(f"indices must be integers, got {entry.dtype}", where=user_location().long()))
        entry = entry.astype("int64")
    return apply1("take", [x, entry], {"axis": axis})


class _IndexUpdateHelper:
    """`x.at[i].set(v)`, `.add(v)` and the rest of JAX's functional updates (egad/frontend/
    numpy_api.py `_IndexUpdate`)."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, index):
        return _IndexUpdate(self.x, index)


def _index_text(index: tuple) -> str:
    """An index as the user wrote it, near enough: `0, 1:3, ...`."""
    def text(entry):
        if isinstance(entry, slice):  # `1:`, `:3`, `::2`, `:` (the step's colon only with a step)
            bounds = ":".join("" if v is None else text(v) for v in (entry.start, entry.stop))
            return bounds if entry.step is None else f"{bounds}:{text(entry.step)}"
        if entry is Ellipsis or entry is None:
            return "..." if entry is Ellipsis else "None"
        return "<traced>" if is_tracer(entry) else str(entry)

    return ", ".join(text(entry) for entry in index)


def _is_full_slice(entry) -> bool:
    return isinstance(entry, slice) and builtins.all(bound is None for bound in (entry.start, entry.stop, entry.step))


def _is_integer_index(entry) -> bool:
    if isinstance(entry, (bool, np.bool_)):
        return False
    if is_tracer(entry):
        return is_int(entry.type.dtype)
    return isinstance(entry, (int, np.integer)) or (isinstance(entry, (list, np.ndarray))
                                                    and np.asarray(entry).dtype.kind in "iu")


def _read_modify_write_method(name: str, combine):
    """`x.at[index].<name>(v)`: `x.at[index].set(combine(x[index], v))`."""
    def method(self, value, mode=None, **hints):
        self._check_mode(mode, hints)
        return self._read_modify_write(combine, value, name)

    method.__name__ = name
    return method


class _IndexUpdate:
    """One update of `x.at[index]`: an integer index (a scalar, or an index array for
    `add`) on one axis after full slices (`x.at[i]`, `x.at[:, i]`, `x.at[i, ...]`), or
    scalar indices on the leading axes (`x.at[i, j]`)."""

    def __init__(self, x, index):
        self.x = x
        index = list(index) if isinstance(index, tuple) else [index]
        while index and (index[-1] is Ellipsis or _is_full_slice(index[-1])):
            index.pop()  # x.at[i, :] is x.at[i]
        self.index = tuple(index)

    def _refuse(self, what: str):
        raise UnsupportedError(message(what, where=user_location().long(),
                                       instead="index one integer (or one index array, for .add) on one axis: "
                                               "x.at[i], x.at[:, i], or scalars on the leading axes: x.at[i, j]"))

    def _axis(self) -> int | None:
        """The axis of a single integer index after full slices, else None."""
        leading = 0
        while leading < len(self.index) and _is_full_slice(self.index[leading]):
            leading += 1
        if leading == len(self.index) - 1 and _is_integer_index(self.index[-1]):
            return leading
        return None

    def _scalars(self) -> bool:
        return len(self.index) > 1 and builtins.all(_is_integer_index(e) and _rank(e) == 0 for e in self.index)

    def _set(self, value):
        x, axis = self.x, self._axis()
        if axis is None and self._scalars():  # x.at[i, j].set(v) = x.at[i].set(x[i].at[j].set(v))
            first, rest = self.index[0], self.index[1:]
            return _IndexUpdate(x, first)._set(_IndexUpdate(getitem(x, first), rest)._set(value))
        if axis is None:
            self._refuse(f".at[{_index_text(self.index)}] is not an index egad can update")
        index = self.index[-1]
        if _rank(index) != 0:
            raise UnsupportedError(message(".at[indices].set with an index array", where=user_location().long(),
                                           instead="set rows one at a time, or use .add for a scatter-add"))
        if axis:  # the axis to the front, updated, and back
            perm = [axis] + [k for k in range(_rank(x)) if k != axis]
            moved = _IndexUpdate(transpose(x, perm), index)._set(value)
            return transpose(moved, list(np.argsort(perm)))
        index = index if is_tracer(index) else np.asarray(index, "int64")
        row = broadcast_to(cast_to(value, dtype_of(x)[0]), list(shape(x))[1:])
        return apply1("update", [x, cast_to(index, "int64"), row])

    def _add(self, value):
        x, axis = self.x, self._axis()
        if axis is None and self._scalars():
            first, rest = self.index[0], self.index[1:]
            return _IndexUpdate(x, first)._set(_IndexUpdate(getitem(x, first), rest)._add(value))
        if axis is None:
            self._refuse(f".at[{_index_text(self.index)}] is not an index egad can add into")
        index = self.index[-1]
        index = index if is_tracer(index) else np.asarray(index, "int64")
        dims = list(shape(x))
        rows = broadcast_to(cast_to(value, dtype_of(x)[0]), dims[:axis] + list(shape(index)) + dims[axis + 1:])
        return apply1("index_add", [x, cast_to(index, "int64"), rows], {"axis": axis})

    def _read_modify_write(self, combine, value, name: str):
        """x.at[i].<name>(v) as x.at[i].set(combine(x[i], v)): exact for scalar indices,
        which hit each element once."""
        if not (self._scalars() or (self._axis() is not None and _rank(self.index[-1]) == 0)):
            raise UnsupportedError(message(f".at[indices].{name} with an index array", where=user_location().long(),
                                           instead="apply it one index at a time, or use .add"))
        return self._set(combine(self.get(), value))

    @staticmethod
    def _check_mode(mode, hints):
        # egad checks every index when the program runs (IndexOutOfRangeError): JAX's default and
        # "promise_in_bounds" mean that; clipping, dropping and filling are not done. JAX's
        # indices_are_sorted and unique_indices are hints, with nothing to do here.
        unknown = set(hints) - {"indices_are_sorted", "unique_indices"}
        if unknown:
            raise ArgumentError(message(f".at[...] got unexpected keyword arguments {sorted(unknown)}",
                                        where=user_location().long(), instead="pass mode=, indices_are_sorted= or "
                                                                              "unique_indices= only"))
        if mode not in (None, "promise_in_bounds"):
            raise UnsupportedError(message(f".at[...] with mode={mode!r}", where=user_location().long(),
                                           instead="drop mode=: egad checks indices when the program runs, or "
                                                   "clip them yourself with enp.clip"))

    def get(self, mode=None, **hints):
        self._check_mode(mode, hints)
        return getitem(self.x, self.index)

    def set(self, value, mode=None, **hints):
        self._check_mode(mode, hints)
        return self._set(value)

    def add(self, value, mode=None, **hints):
        self._check_mode(mode, hints)
        return self._add(value)

    # (each right-hand side is this module's function: the class has no such name yet)
    multiply = _read_modify_write_method("multiply", multiply)
    divide = _read_modify_write_method("divide", true_divide)
    power = _read_modify_write_method("power", power)
    min = _read_modify_write_method("min", minimum)
    max = _read_modify_write_method("max", maximum)

    def apply(self, fn, mode=None, **hints):
        self._check_mode(mode, hints)
        return self._read_modify_write(lambda current, _: fn(current), None, "apply")


__all__ = [name for name in dir() if not name.startswith("_") and name not in {
    "annotations", "builtins", "context", "math", "np", "shapes", "message", "user_location", "apply1", "cast_to",
    "constant", "dtype_of", "is_tracer", "result_dtype", "to_tracer", "canonical_dtype", "fresh_symbol", "is_float",
    "is_int", "ArgumentError", "IndexOutOfRangeError", "ShapeError", "UnsupportedError", "dim_size", "getitem",
    "size_of_dims", "UFUNC_TO_ENP"}]
