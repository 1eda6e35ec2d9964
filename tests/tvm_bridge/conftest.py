"""Every build in these tests: a kernel the prefetch pass (tvm_bridge/prefetch.py) fails
on fails the test, where a user's build goes on without its prefetches."""
from __future__ import annotations

import pytest

from egad.tvm_bridge import prefetch


@pytest.fixture(autouse=True)
def prefetch_errors_raise(monkeypatch):
    monkeypatch.setattr(prefetch, "RAISE_ERRORS", True)
