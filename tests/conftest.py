"""Test-session setup: builds are cached in memory only (exporting every test's
library through the C compiler would only slow the suite; tests/tvm_bridge/
test_build_cache.py exercises the disk cache in temporary directories), and never
in the user's ~/.cache."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("EGAD_DISK_CACHE", "0")
os.environ.setdefault("EGAD_CACHE_DIR", tempfile.mkdtemp(prefix="egad-test-cache-"))
