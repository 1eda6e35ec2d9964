"""`egad.numpy`: numpy's names and semantics on traced values (`import egad.numpy as enp`).

The implementation lives in `egad/frontend/numpy_api.py`; this module is its public face.
"""
from .frontend.numpy_api import *  # noqa: F401,F403
from .frontend.numpy_api import __all__  # noqa: F401
