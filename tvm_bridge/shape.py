"""Lowering of shape ops: transpose, reshape, broadcast_to, concat, slice, dim."""
from __future__ import annotations

from tvm import relax, te, tirx

from egad.errors import UnsupportedError, message
from egad.ir import shapes
from egad.ir.types import TensorType

from .host_checks import check_shape_fits
from .registry import FunctionScope, axis_size, lowers, symbol_var

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
    return [dim if isinstance(dim, int) else bind_symbol(bb, dim, next(sizes)) for dim in shape]


def bind_symbol(bb, dim: str, size):
    """The function's variable for symbolic dim `dim`, bound (by a match_cast, checked at
    run time) to `size`, an int64 scalar tensor."""
    symbol = symbol_var(FunctionScope.symbols, dim)
    as_shape = bb.emit(relax.op.tensor_to_shape(bb.emit(relax.op.reshape(size, [1]))))
    bb.match_cast(as_shape, relax.ShapeType([symbol]))
    return symbol


@lowers("transpose")
def _transpose(bb, args, attrs, binding):
    return R.permute_dims(args[0], list(attrs["perm"]))


@lowers("reshape")
def _reshape(bb, args, attrs, binding):
    check_shape_fits(bb, binding, args[1:], args[0])
    return R.reshape(args[0], target_shape(bb, attrs["shape"], args[1:]))


@lowers("broadcast_to")
def _broadcast_to(bb, args, attrs, binding):
    check_shape_fits(bb, binding, args[1:])
    return R.broadcast_to(args[0], target_shape(bb, attrs["shape"], args[1:]))


# Operands one concatenation kernel reads at most: Metal binds 31 buffers to a kernel.
# A wider one is a concatenation of concatenations, which fusion joins back into one
# kernel where the device binds more (tvm_bridge/fusion.py limit_kernel_buffers).
MAX_CONCAT_OPERANDS = 16


@lowers("concat")
def _concat(bb, args, attrs, binding):
    args = list(args)
    while len(args) > MAX_CONCAT_OPERANDS:
        args = [bb.emit(R.concat(args[k:k + MAX_CONCAT_OPERANDS], axis=attrs["axis"])) if len(args) - k > 1
                else args[k] for k in range(0, len(args), MAX_CONCAT_OPERANDS)]
    return R.concat(args, axis=attrs["axis"])


_HUGE = 2 ** 62


@lowers("slice")
def _slice(bb, args, attrs, binding):
    axes, begins, ends, strides = [], [], [], []  # the static axes', for TVM's own slice
    along_symbolic = {}  # symbolic axis: its (start, stop, step), ints as the loop below leaves them
    x, x_type = args[0], binding.inputs[0].type
    for axis, (start, stop, step) in enumerate(attrs["index"]):
        if (start, stop, step) in ((None, None, None), (None, None, 1)):
            continue
        if (start, stop, step) == (None, None, -1):
            # a whole axis reversed keeps its size, which TVM's strided_slice cannot
            # infer for a symbolic one (flip keeps the shape)
            x = bb.emit(R.flip(x, axis))
            continue
        symbolic = not isinstance(x_type.shape[axis], int)
        written = f"[{'' if start is None else start}:{'' if stop is None else stop}:{step}]"
        if symbolic and step is not None and step < 0:
            # x[b:e:-s] is x flipped, then [T-1-b : T-1-e : s]: a bound counted from one end
            # is the same count from the other (TVM's length for a reversed slice of a
            # symbolic axis overflowed or went negative: x[-1::-2] failed to build)
            x = bb.emit(R.flip(x, axis))
            start, stop, step = _from_the_other_end(start), _from_the_other_end(stop), -step
        if symbolic and None not in (start, stop) and start < 0 <= stop:
            # TVM's strided_slice gives it a negative length where it is empty (bad_alloc at run time)
            raise UnsupportedError(message(
                f"a slice {written} between bounds counted from opposite ends of the symbolic axis "
                f"{x_type.shape[axis]} does not compile", where=f"op 'slice' at {binding.loc.long()}",
                instead="count both bounds from the same end (x[1:-2], x[-5:-1]), or slice a static length"))
        dropped = shapes.ends_dropped(start, stop, step)
        if symbolic and dropped is not None:
            x = _symbolic_ends_dropped(bb, x, x_type, axis, start or 0, dropped, binding.outputs[0].type.shape[axis])
            continue
        if symbolic and step not in (None, 1) and shapes.ends_dropped(start, stop, None) is not None:
            # x[a:-b:s] is x[a:-b] (a kernel of length max(T - a - b, 0)) then [::s]: TVM's
            # strided_slice gives it a length that is negative where T < a + b (bad_alloc)
            trimmed_dim = shapes.slice_dim(x_type.shape[axis], start, stop, None)
            x = _symbolic_ends_dropped(bb, x, x_type, axis, start or 0, shapes.ends_dropped(start, stop, None),
                                       trimmed_dim)
            start, stop = None, None
            x_type = TensorType(tuple(trimmed_dim if k == axis else d for k, d in enumerate(x_type.shape)),
                                x_type.dtype)
        step = 1 if step is None else step
        if symbolic:
            along_symbolic[axis] = (start, stop, step)
            continue
        if not len(range(x_type.shape[axis])[start:stop:step]):
            # TVM's strided_slice gives an emptied static axis (x[:, 2:1]) the length
            # stop - start, negative (bad_alloc at run time)
            start, stop, step = 0, 0, 1
        axes.append(axis)
        begins.append(start if start is not None else (0 if step > 0 else _HUGE))
        ends.append(stop if stop is not None else (_HUGE if step > 0 else -_HUGE))
        strides.append(step)
    if axes:
        sliced = R.strided_slice(x, axes, begins, ends, strides)
        if not along_symbolic:
            return sliced
        x = bb.emit(sliced)
    if not along_symbolic:
        return x
    # Along a symbolic axis, TVM's strided_slice kernel computes its length by another formula
    # than Relax infers for it (min(max(T + 1, 0), T + 3) - min(max(T - 1, 0), T + 3) for
    # min(1, T) + 1), and neither is the static length the IR may know ((T+3)[-3:] is 3 long):
    # Relax could not prove them equal, so the slice's uses lost their shapes and failed to
    # build. Here the slice runs from its first index for exactly the IR's dim (assume_inbound:
    # both Relax and the kernel read the length off begin and end): static, a dim the function
    # has (the rows of a slice's gradient, iota(T)[:2], have the slice's dim `T[:2]`), else a
    # new one bound to the length computed at run time.
    out_type = binding.outputs[0].type
    firsts, lasts = [], []
    sizes = bb.normalize(x).ty.shape.values
    for axis, (start, stop, step) in along_symbolic.items():
        dim = out_type.shape[axis]
        if isinstance(dim, int) or _known(dim):
            length = dim if isinstance(dim, int) else symbol_var(FunctionScope.symbols, dim)
        else:
            length = bind_symbol(bb, dim, _slice_length(bb, axis_size(bb, x, x_type, axis), start, stop, step))
        first = _first_index(start or 0, sizes[axis])
        firsts.append(first)
        lasts.append(first + length * step)
    return R.strided_slice(x, list(along_symbolic), firsts, lasts, [step for _, _, step in along_symbolic.values()],
                           assume_inbound=True)


def _first_index(start: int, size):
    """The first index x[start::step] reads (step > 0) along an axis of `size`, as numpy
    clamps it."""
    if start == 0:
        return 0
    return tirx.max(size + start, 0) if start < 0 else tirx.min(tirx.const(start, "int64"), size)


def _known(dim: str) -> bool:
    """Whether the function has symbolic dim `dim`, or every part of it (`T+U`)."""
    parts = shapes.joined_parts(dim)
    return dim in FunctionScope.symbols or bool(parts) and all(
        isinstance(part, int) or part in FunctionScope.symbols for part in parts)


def _slice_length(bb, size, start, stop, step: int):
    """len(range(size)[start:stop:step]) for step > 0, as an int64 scalar tensor computed
    from `size`, one (a symbolic axis's slices with a negative step are flipped first)."""
    def const(value):
        return relax.const(value, "int64")

    def clamped(bound):  # as numpy reads a bound: negative from the end, within [0, size]
        if bound < 0:
            return bb.emit(R.maximum(R.add(size, const(bound)), const(0)))
        return bb.emit(R.minimum(size, const(bound)))

    first = const(0) if not start else clamped(start)
    end = size if stop is None else clamped(stop)
    span = bb.emit(R.maximum(R.subtract(end, first), const(0)))
    return span if step == 1 else bb.emit(R.floor_divide(R.add(span, const(step - 1)), const(step)))


def _from_the_other_end(bound):
    """An index counted from the other end of an axis: i >= 0 is T - 1 - i, i.e. -(i + 1);
    -k is T - k, which is k - 1 from the other end (None stays open)."""
    if bound is None:
        return None
    return -bound - 1


def _symbolic_ends_dropped(bb, x, x_type, axis: int, start: int, dropped: int, dim: str):
    """`x[start:T-(dropped-start)]` along a symbolic axis T, as a kernel whose length is
    the IR's derived dim (`T-1`, egad/ir/shapes.py slice_dim), bound at run time to
    max(T - dropped, 0) where first met. So `x[1:] - x[:-1]` has one shape in Relax:
    TVM's strided_slice infers a different expression for each, which it can neither
    broadcast nor, once match_cast to one dim, fuse (FuseTIR)."""
    grown = shapes.grown_dim(x_type.shape[axis])
    if grown and dropped <= grown[1] and _expressible(dim):
        # a concatenation's axis (`T+3`, Relax's T + 3): what is left is exactly its
        # dim (`T`, or `T+1`), in bounds; TVM's own slice gives that shape, where a
        # kernel reading a T + 3 buffer would not fuse with the concatenation
        length = symbol_var(FunctionScope.symbols, dim)
        return bb.emit(R.strided_slice(x, [axis], [start], [start + length], assume_inbound=True))
    if dim in FunctionScope.symbols:
        length = FunctionScope.symbols[dim]
    else:
        size = axis_size(bb, x, x_type, axis)
        length = bind_symbol(bb, dim, R.maximum(R.subtract(size, relax.const(dropped, "int64")),
                                                relax.const(0, "int64")))
    if grown:
        # more dropped than the static part holds (`(T+2)[:-3]` is `T-1`): TVM's own slice, as
        # above; a kernel reading a buffer of length T + 2 failed to bind its T when called
        return bb.emit(R.strided_slice(x, [axis], [start], [start + length], assume_inbound=True))

    def rows(data):
        out_shape = [length if k == axis else d for k, d in enumerate(data.shape)]
        return te.compute(out_shape, lambda *i: data[tuple(v + start if k == axis else v for k, v in enumerate(i))],
                          name="ends_dropped")

    return bb.emit_te(rows, x, primfunc_name_hint="slice_ends_dropped")


def _expressible(dim: str) -> bool:
    """Whether the function has `dim` already, or the symbol that `dim` (`D+c`) grows."""
    grown = shapes.grown_dim(dim)
    return dim in FunctionScope.symbols or (grown is not None and grown[0] in FunctionScope.symbols)


@lowers("dim")
def _dim(bb, args, attrs, binding):
    size = axis_size(bb, args[0], binding.inputs[0].type, attrs["axis"])
    return relax.const(size, "int64") if isinstance(size, int) else size
