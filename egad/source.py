"""Where in the user's code something happened, for errors, reports and the visualiser."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import sys
import sysconfig
import threading
import traceback

_EGAD_DIR = os.path.dirname(os.path.abspath(__file__))
# Modules inside the package that are user programs, not library machinery.
_USER_MODULES = {os.path.join(_EGAD_DIR, "demo.py")}


@dataclasses.dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def long(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where} (in {self.function})" if self.function else where


UNKNOWN = SourceLoc("<unknown>", 0)


def _is_internal(filename: str) -> bool:
    # Frames inside the egad package, and Python's own plumbing (functools,
    # contextlib), are never the "user's line".
    if filename in _USER_MODULES:
        return False
    return filename.startswith(_EGAD_DIR) or filename.startswith("<frozen")


class _Overrides(threading.local):
    """`located_at`'s locations, innermost last, one list a thread (programs may be
    traced and differentiated in several threads at once)."""
    locations: list[SourceLoc]

    def __init__(self):
        self.locations = []


_OVERRIDES = _Overrides()


@contextlib.contextmanager
def located_at(loc: SourceLoc):
    """Attribute everything recorded in this block to `loc`: program transformations
    (AD) emit code on behalf of a binding the user wrote, so that is its line."""
    _OVERRIDES.locations.append(loc)
    try:
        yield
    finally:
        _OVERRIDES.locations.pop()


def user_location() -> SourceLoc:
    """The innermost stack frame outside egad: the user's line that caused this."""
    if _OVERRIDES.locations:
        return _OVERRIDES.locations[-1]
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            return SourceLoc(filename, frame.f_lineno, _user_function_name(frame))
        frame = frame.f_back
    return UNKNOWN


def _user_function_name(frame) -> str:
    """The function name to show: code converted by egad.function runs in generated
    helpers (`__egad_body_3`); name the user's function that contains them."""
    while frame is not None and frame.f_code.co_name.startswith("__egad_"):
        frame = frame.f_back
        while frame is not None and _is_internal(frame.f_code.co_filename):
            frame = frame.f_back
    return frame.f_code.co_name if frame is not None else ""


# Python's own library and installed packages (numpy's checks raise from inside numpy):
# never the user's line where an exception was raised.
_LIBRARY_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[key]) + os.sep
                       for key in ("stdlib", "purelib", "platlib")})


def raised_at(error: BaseException) -> SourceLoc:
    """The innermost frame of `error`'s traceback in the user's code: outside egad,
    Python's library and installed packages. UNKNOWN when there is none."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        filename = os.path.abspath(frame.filename) if not frame.filename.startswith("<") else frame.filename
        if not _is_internal(filename) and not filename.startswith(_LIBRARY_DIRS):
            return SourceLoc(frame.filename, frame.lineno or 0, frame.name)
    return UNKNOWN


def run_user_module(name: str, file, package_dir=None):
    """Run the user's Python `file` as a new module `name` (a package searching
    `package_dir` for its submodules when given) and return it. The module is in
    sys.modules while it runs and after (a package's modules import each other
    relatively; dataclasses and pickling look modules up by name); on any error it is
    taken out again and the error raised for the caller to report."""
    search = {} if package_dir is None else {"submodule_search_locations": [str(package_dir)]}
    spec = importlib.util.spec_from_file_location(name, file, **search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
