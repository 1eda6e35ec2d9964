"""Test-session setup: builds are cached in a fresh temporary directory, never in
the user's ~/.cache (tvm_bridge/cache.py)."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("EGAD_CACHE_DIR", tempfile.mkdtemp(prefix="egad-test-cache-"))
