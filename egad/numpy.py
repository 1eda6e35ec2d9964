"""`egad.numpy`: numpy's names and semantics on traced values (`import egad.numpy as enp`).

The implementation lives in `egad/frontend/numpy_api.py`; this module is its public face.
"""
from .frontend.numpy_api import *  # noqa: F401,F403
from .frontend.numpy_api import __all__  # noqa: F401


def __getattr__(name: str):
    """numpy's names that egad.numpy lacks: a clear error, not a bare AttributeError."""
    from .frontend.numpy_api import missing_function

    raise missing_function(f"enp.{name}", name)
