"""egad's IR: types, the op table, programs in A-normal form, verifier, printer."""
from .ops import OPS, OpDef
from .printer import format_program
from .program import ArgSignature, Binding, Program, Region, Var, walk_bindings
from .types import DTYPES, Dim, TensorType
from .verify import verify

__all__ = [
    "OPS", "OpDef", "format_program", "ArgSignature", "Binding", "Program", "Region", "Var",
    "walk_bindings", "DTYPES", "Dim", "TensorType", "verify",
]
