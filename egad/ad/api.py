"""`egad.grad` and `egad.value_and_grad`: Program -> Program."""
from __future__ import annotations

import numpy as np

from .. import source
from ..errors import ArgumentError, EgadError, UnsupportedError, message
from ..frontend import context
from ..frontend import numpy_api as enp
from ..frontend.primitives import to_tracer
from ..frontend.tracer import Tracer
from ..ir import ops
from ..ir.program import ArgSignature, Program, Region, Var, walk_bindings
from ..ir.types import is_float
from ..ir.dce import eliminate_dead_code
from ..ir.verify import verify
from ..pytree import TreeDef, leaf_paths
from .activity import analyze
from .transform import BackwardRegion, ForwardRegion, GradientBuilder, TapeThread, accumulate


def grad(program: Program, wrt=(0,), has_aux: bool = False) -> Program:
    """The gradient program of a scalar-valued `program` with respect to the
    positional arguments `wrt` (a tuple gives a tuple of gradients, an int the bare
    gradient, as JAX's argnums). With `has_aux`, the program returns
    `(loss, aux)` and the gradient program `(grads, aux)`.

    Example: `dW = egad.interpret(egad.grad(egad.trace(loss, W, xs)), W, xs)`"""
    return _differentiate(program, wrt, has_aux, with_value=False)


def value_and_grad(program: Program, wrt=(0,), has_aux: bool = False) -> Program:
    """A program returning `(value, grads)` (or `((value, aux), grads)` with `has_aux`).

    Example: `loss, (dW, dU) = egad.interpret(egad.value_and_grad(prog, wrt=(0, 1)), W, U, xs)`"""
    return _differentiate(program, wrt, has_aux, with_value=True)


def differentiated_params(program: Program, wrt) -> tuple[bool, tuple, list[list[int]]]:
    """`wrt` read against `program`: whether it is a single index, the indices, and the
    params (leaf positions) of each; an ArgumentError naming what does not fit."""
    single = isinstance(wrt, (int, np.integer)) and not isinstance(wrt, (bool, np.bool_))
    if not single and not isinstance(wrt, (tuple, list)):
        raise ArgumentError(message(f"wrt={wrt!r} is neither an argument index nor a tuple of them",
                                    instead="pass wrt=0, or wrt=(0, 2) for several arguments"))
    argnums = (int(wrt),) if single else tuple(wrt)
    offsets = _leaf_offsets(program.signature)
    wrt_params = []
    for argnum in argnums:
        if isinstance(argnum, (bool, np.bool_)) or not isinstance(argnum, (int, np.integer)) \
                or not -len(offsets) <= argnum < len(offsets):
            raise ArgumentError(message(f"wrt={wrt!r}: {argnum!r} is not a positional argument index of {program.name}",
                                        instead=f"name arguments by their positions, 0 to {len(offsets) - 1}"))
        argnum %= len(offsets)
        if offsets[argnum] is None:
            raise ArgumentError(message(f"wrt={wrt!r}: argument {argnum} is static (static_argnums) and has no gradient"))
        start, stop = offsets[argnum]
        tree = program.signature.trees[argnum]
        for path, param in zip(leaf_paths(tree, f"argument {argnum}"), program.params[start:stop]):
            if not is_float(param.type.dtype):
                raise EgadError(message(
                    f"cannot differentiate with respect to {path}, which is {param.type.dtype}",
                    where=str(program.loc.long()),
                    instead="differentiate only float arguments (wrt=...); integer and bool values carry no gradient"))
        wrt_params.append(list(range(start, stop)))
    return single, argnums, wrt_params


def _differentiate(program: Program, wrt, has_aux: bool, with_value: bool) -> Program:
    if not isinstance(program, Program):
        raise ArgumentError(message(f"egad.grad needs an egad.Program, got {type(program).__name__}",
                                    instead="trace the function first: egad.grad(egad.trace(fn, *args))"))
    if any(b.op in ops.TAPE_OPS for b in walk_bindings(program.region)):
        raise UnsupportedError(message("differentiating a gradient program (higher-order gradients) is not supported",
                                       where=str(program.loc)))
    single, argnums, wrt_params = differentiated_params(program, wrt)
    offsets = _leaf_offsets(program.signature)
    loss_index, aux_leaves, aux_tree = _split_output(program, has_aux)
    loss_type = program.region.results[loss_index].type
    if loss_type.shape != () or not is_float(loss_type.dtype):
        raise EgadError(message(
            f"egad.grad differentiates a float scalar output, but {program.name} returns {loss_type}",
            where=str(program.loc.long()),
            instead="reduce the output to a scalar loss (e.g. enp.sum(...)); return other values as aux with has_aux=True"))

    region = program.region
    flat_wrt = {k for group in wrt_params for k in group}
    activity = analyze(region, [k in flat_wrt for k in range(len(region.params))],
                       [k == loss_index for k in range(len(region.results))])
    # what the transformation makes for no binding of the user's (the loss's seed 1.0,
    # zeros for a parameter the loss does not read) belongs to the program, not to the
    # line that asked for the gradient: programs differentiated from two lines are one
    # (the optimizer's cache keys on source lines)
    with context.open_region("program", top_level=True) as top, source.located_at(program.loc):
        params = [Var(p.type, p.hint) for p in region.params]
        env = {old.uid: Tracer(top, new) for old, new in zip(region.params, params)}
        gradient = GradientBuilder(activity)
        tapes = TapeThread(top, top_level=True)
        forward = ForwardRegion(gradient, top, tapes, env)
        forward.run(region.bindings)
        loss_var = region.results[loss_index]
        cts: dict[int, list] = {}
        if activity.is_active(loss_var):
            accumulate(cts, loss_var, to_tracer(enp.ones((), loss_type.dtype)))
        backward = BackwardRegion(gradient, top, tapes, forward)
        backward.run(region.bindings, cts)
        gradients: dict[int, Var] = {}  # per param, so that a repeated wrt index repeats the gradient
        for k in sorted({k for group in wrt_params for k in group}):
            old = region.params[k]
            gradients[k] = top.resolve(to_tracer(backward.dense(cts, old, env[old.uid])))
        grads = [gradients[k] for group in wrt_params for k in group]
        value = [top.resolve(to_tracer(env[loss_var.uid]))]
        aux = [top.resolve(to_tracer(env[region.results[k].uid])) for k in aux_leaves]

    grad_trees = [program.signature.trees[a % len(offsets)] for a in argnums]
    grads_tree = grad_trees[0] if single else TreeDef("tuple", None, tuple(grad_trees))
    leaf = TreeDef("leaf")
    out_leaves, out_tree = list(grads), grads_tree
    if has_aux:
        out_leaves, out_tree = grads + aux, TreeDef("tuple", None, (grads_tree, aux_tree))
    if with_value:
        value_tree = TreeDef("tuple", None, (leaf, aux_tree)) if has_aux else leaf
        out_leaves = value + aux + grads if has_aux else value + grads
        out_tree = TreeDef("tuple", None, (value_tree, grads_tree))
    result = Program(Region(tuple(params), top.bindings, tuple(out_leaves), "program"),
                     program.signature, out_tree,
                     name=f"{'value_and_grad' if with_value else 'grad'}_{program.name}", loc=program.loc)
    return verify(eliminate_dead_code(result))


def _leaf_offsets(signature: ArgSignature) -> list[tuple[int, int] | None]:
    """Per positional argument, its range of flat params (None for static ones)."""
    offsets, position = [], 0
    for tree in signature.trees:
        if tree is None:
            offsets.append(None)
            continue
        offsets.append((position, position + tree.num_leaves))
        position += tree.num_leaves
    return offsets


def _split_output(program: Program, has_aux: bool) -> tuple[int, list[int], TreeDef | None]:
    """(index of the loss among flat results, indices of aux leaves, aux tree)."""
    tree = program.out_tree
    if not has_aux:
        if tree.kind != "leaf":
            raise EgadError(message(
                f"egad.grad differentiates a scalar output, but {program.name} returns a {tree}",
                where=str(program.loc.long()), instead="return the loss alone, or (loss, aux) with has_aux=True"))
        return 0, [], None
    if tree.kind not in ("tuple", "list") or len(tree.children) != 2 or tree.children[0].kind != "leaf":
        raise EgadError(message(f"has_aux=True needs {program.name} to return (loss, aux), but it returns {tree}",
                                where=str(program.loc.long())))
    aux_tree = tree.children[1]
    return 0, list(range(1, 1 + aux_tree.num_leaves)), aux_tree

