"""Small rewrites of and questions about Relax expressions, shared by egad's Relax passes."""
from __future__ import annotations

import tvm
from tvm import relax, tirx


def substitute(expr, replace: dict):
    """`expr` with each variable or constant that is a key of `replace` replaced by its
    value: a new expression (a call rebuilt even when nothing in it is replaced)."""
    if isinstance(expr, (relax.Var, tvm.ir.Constant)):
        return replace.get(expr, expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([substitute(field, replace) for field in expr.fields], expr.span)
    if isinstance(expr, relax.Call):
        return relax.Call(expr.op, [substitute(arg, replace) for arg in expr.args], expr.attrs, expr.ty_args,
                          expr.span)
    return expr


def leaves_in_order(expr) -> list:
    """The variables and constants `expr` reads, in the order they appear (repeats kept)."""
    if isinstance(expr, (relax.Var, tvm.ir.Constant)):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [leaf for field in expr.fields for leaf in leaves_in_order(field)]
    if isinstance(expr, relax.Call):
        return [leaf for arg in expr.args for leaf in leaves_in_order(arg)]
    return []


def is_static_tensor(expr) -> bool:
    """Whether `expr` is a tensor whose shape is all constants."""
    ty = expr.ty
    return (isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr)
            and all(isinstance(d, tirx.IntImm) for d in ty.shape.values))
