"""Reverse-mode AD over egad's IR, IR -> IR, without unrolling (DESIGN §4, docs/ad.md)."""
from .api import grad, value_and_grad

__all__ = ["grad", "value_and_grad"]
