"""Test-session setup: builds are cached in memory only (exporting every test's
library through the C compiler would only slow the suite; tests/tvm_bridge/
test_build_cache.py exercises the disk cache in temporary directories), and never
in the user's ~/.cache."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("EGAD_DISK_CACHE", "0")
if "EGAD_CACHE_DIR" not in os.environ:
    os.environ["EGAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="egad-test-cache-")
    atexit.register(shutil.rmtree, os.environ["EGAD_CACHE_DIR"], ignore_errors=True)
