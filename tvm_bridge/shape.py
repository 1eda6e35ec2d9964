"""Lowering of shape ops: transpose, reshape, broadcast_to, concat, slice, dim."""
from __future__ import annotations

from tvm import relax

from egad.errors import UnsupportedError, message

from .registry import FunctionScope, lowers, symbol_var

R = relax.op


def static_shape(shape, binding) -> tuple[int, ...]:
    """The shape as ints; symbolic target shapes are not lowered yet."""
    if not all(isinstance(d, int) for d in shape):
        raise UnsupportedError(message(
            f"lowering {binding.op} to a symbolic shape {tuple(shape)} is not supported yet",
            where=f"op {binding.op!r} at {binding.loc.long()}",
            instead="run it with egad.interpret, or give the dims static sizes"))
    return tuple(shape)


def target_shape(bb, shape, sizes) -> list:
    """A shape attribute as Relax dims: ints stay, each symbolic dim is bound (by a
    match_cast, checked at run time) to its int64 size input, in order."""
    sizes = iter(sizes)
    dims = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
            continue
        symbol = symbol_var(FunctionScope.symbols, dim)
        as_shape = bb.emit(relax.op.tensor_to_shape(bb.emit(relax.op.reshape(next(sizes), [1]))))
        bb.match_cast(as_shape, relax.ShapeType([symbol]))
        dims.append(symbol)
    return dims


@lowers("transpose")
def _transpose(bb, args, attrs, binding):
    return R.permute_dims(args[0], list(attrs["perm"]))


@lowers("reshape")
def _reshape(bb, args, attrs, binding):
    return R.reshape(args[0], target_shape(bb, attrs["shape"], args[1:]))


@lowers("broadcast_to")
def _broadcast_to(bb, args, attrs, binding):
    return R.broadcast_to(args[0], target_shape(bb, attrs["shape"], args[1:]))


@lowers("concat")
def _concat(bb, args, attrs, binding):
    return R.concat(args, axis=attrs["axis"])


_HUGE = 2 ** 62


@lowers("slice")
def _slice(bb, args, attrs, binding):
    axes, begins, ends, strides = [], [], [], []
    for axis, (start, stop, step) in enumerate(attrs["index"]):
        if (start, stop, step) in ((None, None, None), (None, None, 1)):
            continue
        step = 1 if step is None else step
        axes.append(axis)
        begins.append(start if start is not None else (0 if step > 0 else _HUGE))
        ends.append(stop if stop is not None else (_HUGE if step > 0 else -_HUGE))
        strides.append(step)
    if not axes:
        return args[0]
    return R.strided_slice(args[0], axes, begins, ends, strides)


@lowers("dim")
def _dim(bb, args, attrs, binding):
    size = axis_size(bb, args[0], binding.inputs[0].type, attrs["axis"])
    return relax.const(size, "int64") if isinstance(size, int) else size


def axis_size(bb, x, x_type, axis: int):
    """The size of one axis: an int when static, else read off the tensor at run time."""
    size = x_type.shape[axis]
    if isinstance(size, int):
        return size
    sizes = bb.emit(R.shape_to_tensor(R.shape_of(x)))
    # a constant, in-range index: "clip" only keeps TVM from warning about "fast" mode
    return bb.emit(R.take(sizes, relax.const(axis, "int64"), axis=0, mode="clip"))
