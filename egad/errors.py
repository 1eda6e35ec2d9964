"""User-facing errors. Every error egad raises on bad input is an `EgadError`.

A message says three things (CONVENTIONS 10): what was wrong, where (op, region,
the user's source line) and what to do instead. Build messages with `message()`
so they all read the same way.
"""
from __future__ import annotations


class EgadError(Exception):
    """Root of all user-facing egad errors."""


class TracerConversionError(EgadError, TypeError):
    """A traced value was used where Python needs a concrete value (`if`, `bool()`, `int()`)."""


class TracerLeakError(EgadError):
    """A traced value escaped the region (loop body, branch) that produced it."""


class NumpyInteropError(EgadError, TypeError):
    """A numpy function was called on a traced value; the egad.numpy function is needed."""


class ShapeError(EgadError, ValueError):
    """An op got operands whose shapes or dtypes it cannot combine."""


class LoopStateError(EgadError, TypeError):
    """A loop body returned state whose structure, shape or dtype differs from its input.

    When one state leaf is at fault, `leaf` is its path (e.g. "state[0]['h']"),
    `entered`/`returned` its types as text, `body` the body's name, `changed`
    "shape" or "dtype" and `where` the user's line, so callers that know the
    user's names (egad.function) can say the same thing in those names."""

    def __init__(self, text: str, *, leaf: str | None = None, entered: str | None = None,
                 returned: str | None = None, body: str | None = None, changed: str | None = None,
                 where: str | None = None):
        super().__init__(text)
        self.leaf, self.entered, self.returned, self.body = leaf, entered, returned, body
        self.changed, self.where = changed, where


class BranchMismatchError(EgadError, TypeError):
    """Branches of `cond`/`switch` return outputs that disagree in structure, shape or dtype."""


class IndexOutOfRangeError(EgadError, IndexError):
    """A traced index was out of range when the program ran."""


class ArgumentError(EgadError, TypeError):
    """Wrong number, structure or types of arguments given to a program."""


class UnsupportedError(EgadError, NotImplementedError):
    """A construct egad does not support (yet), with the supported alternative."""


class MissingFunctionError(UnsupportedError, AttributeError):
    """A numpy function or array method egad.numpy does not have (an AttributeError too,
    so `hasattr(enp, name)` stays False)."""


class RuleFileError(EgadError):
    """A rule family file (`egad rules check path.py`) could not be loaded, or a family name is unknown."""


class RuleError(EgadError, ValueError):
    """A rewrite rule is malformed (not a rewrite, a side that is not a term, a variable
    only its right side binds, a bad name): raised where it is declared, or where its
    family is first used, naming the rule and its file:line."""


class BuildError(EgadError, RuntimeError):
    """A program could not be lowered to Relax or compiled by TVM: a defect in egad's
    lowering (or TVM), not in the user's program; the error is chained as its cause."""


class VerifyError(EgadError):
    """The IR verifier found an ill-formed program (a bug in a transformation, not user input)."""


# What to do about an index out of range, interpreted or compiled.
INDEX_OUT_OF_RANGE_HINT = ("keep traced indices in range (e.g. enp.clip(i, 0, n - 1)) or check the loop bounds; "
                           "a window x[t:t + k] must lie inside the axis (0 <= t <= n - k)")


def message(what: str, where: str | None = None, instead: str | None = None) -> str:
    """Format an error message: what went wrong, where, and what to do instead."""
    text = what
    if where:
        text += f"\n  at {where}"
    if instead:
        text += f"\n  instead: {instead}"
    return text
