"""Built modules cached by program fingerprint and target, in memory and on disk.

A key is the sha256 of the program's structural fingerprint (egad/ir/fingerprint.py),
the TVM target, the egad and TVM versions and the source of this package and of
egad/ir/index_ranges.py (a change to a lowering must not reuse libraries built by
the old one).

On disk an entry is two files in the cache directory: `<key>.so` (the exported
library) and `<key>.json` (its key, its sha256 and the Relax text). Both are written
to a temporary name and renamed into place, the JSON last, so a reader sees a whole
entry or none. An entry whose JSON does not parse or names another key (a swapped
or hand-copied file), whose library does not match its checksum, or which fails to
load is deleted (where the directory allows) and rebuilt, never trusted. A library
is loaded from a private copy, checked there, so that the file changing later
cannot reach the running code.

The directory is `$EGAD_CACHE_DIR`, else `~/.cache/egad/builds`; `EGAD_DISK_CACHE=0`
turns the disk cache off. Exporting a CPU library needs a C compiler (TVM links
with `g++`); without one the disk cache is skipped and the report says why.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import tempfile

import tvm
from tvm import relax

import egad
from egad.ir import index_ranges
from egad.ir.fingerprint import fingerprint
from egad.ir.program import Program

from .targets import ResolvedTarget, device_source

_FORMAT = 2  # bump when the entry layout changes (2: the JSON names its key)


@dataclasses.dataclass
class Entry:
    """A built executable, its Relax text and where it came from."""

    executable: relax.VMExecutable | tvm.runtime.Module  # built, or loaded from disk
    relax_text: str
    origin: str  # "built", "memory" or "disk"


def cache_key(program: Program, target: ResolvedTarget) -> str:
    parts = [fingerprint(program), target.key, egad.__version__, tvm.__version__, _bridge_source_hash(), str(_FORMAT)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40]


_SOURCE_HASH: list[str] = []


def _bridge_source_hash() -> str:
    if not _SOURCE_HASH:
        digest = hashlib.sha256()
        # the lowering's own sources, and the IR analysis that decides its index checks
        for path in [*sorted(pathlib.Path(__file__).parent.glob("*.py")), pathlib.Path(index_ranges.__file__)]:
            digest.update(path.read_bytes())
        _SOURCE_HASH.append(digest.hexdigest())
    return _SOURCE_HASH[0]


def default_directory() -> pathlib.Path | None:
    if os.environ.get("EGAD_DISK_CACHE", "1") == "0":
        return None
    root = os.environ.get("EGAD_CACHE_DIR")
    return pathlib.Path(root) if root else pathlib.Path.home() / ".cache" / "egad" / "builds"


class BuildCache:
    """Executables by key: a dict in memory, and files in `directory` (None: memory only)."""

    def __init__(self, directory: pathlib.Path | None):
        self.directory = directory
        self.memory: dict[str, Entry] = {}
        self.problems: dict[str, str] = {}  # key -> why its disk entry could not be read or written
        self._memory_only: BuildCache | None = None

    def memory_only(self) -> "BuildCache":
        """This cache without its directory (one per cache), for builds that cannot go to disk."""
        if self.directory is None:
            return self
        if self._memory_only is None:
            self._memory_only = BuildCache(None)
        return self._memory_only

    def get(self, key: str) -> Entry | None:
        entry = self.memory.get(key)
        if entry is not None:
            return Entry(entry.executable, entry.relax_text, "memory")
        entry = self._read(key)
        if entry is not None:
            self.memory[key] = entry
        return entry

    def put(self, key: str, entry: Entry) -> Entry:
        """Store `entry`; the entry to run from now on. For a CPU build written to disk,
        that is the library as written and loaded: its machine code was generated for
        the file, and loading it saves generating it again in a JIT at the first call
        (about as long: 1.5 s for the LSTM T=64 gradient)."""
        entry = self._write(key, entry)
        self.memory[key] = entry
        return entry

    def _paths(self, key: str) -> tuple[pathlib.Path, pathlib.Path]:
        return self.directory / f"{key}.so", self.directory / f"{key}.json"

    def _read(self, key: str) -> Entry | None:
        if self.directory is None:
            return None
        library, meta = self._paths(key)
        if not meta.exists():
            return None
        try:
            record = json.loads(meta.read_text())
            if not isinstance(record, dict) or record.get("format") != _FORMAT or record.get("key") != key:
                raise ValueError("format mismatch, or an entry filed under another key")
            module = _load_private_copy(library, record["sha256"])
            relax.VirtualMachine(module, tvm.cpu())  # loads the VM functions: fails here, not at the first call
            return Entry(module, record["relax_text"], "disk")
        except Exception as error:  # noqa: BLE001 - any damage means: rebuild
            problem = f"corrupt cache entry {key} ({type(error).__name__}: {_short(error)}); rebuilt"
            for path in (meta, library):
                try:
                    path.unlink(missing_ok=True)
                except OSError as cannot:  # a read-only or shared cache: rebuilt here every time, and said so
                    problem += f"; not deleted ({type(cannot).__name__})"
            self._note(key, problem)
            return None

    def _write(self, key: str, entry: Entry) -> Entry:
        """Write `entry` to the disk; the entry to run: a CPU build's library loaded
        from the file written, else `entry` itself."""
        if self.directory is None:
            return entry
        library, meta = self._paths(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            library_tmp = _temporary(self.directory, ".so")
            entry.executable.export_library(str(library_tmp))
            checksum = _sha256(library_tmp)
            if not device_source(entry.executable):  # CPU code only: it loads here
                entry = Entry(_load_private_copy(library_tmp, checksum), entry.relax_text, entry.origin)
            os.replace(library_tmp, library)
            record = {"format": _FORMAT, "key": key, "sha256": checksum, "relax_text": entry.relax_text}
            meta_tmp = _temporary(self.directory, ".json")
            meta_tmp.write_text(json.dumps(record))
            os.replace(meta_tmp, meta)  # last: the entry exists once its JSON does
        except Exception as error:  # noqa: BLE001 - a cache that cannot write is only slower
            self._note(key, f"disk cache not written ({type(error).__name__}: {_short(error)})")
        return entry

    def _note(self, key: str, problem: str) -> None:
        self.problems[key] = f"{self.problems[key]}; {problem}" if key in self.problems else problem


def _load_private_copy(library: pathlib.Path, checksum: str):
    """The library at `library`, loaded from a copy of it that no path names once
    loaded, if the copy's sha256 is `checksum` (else ValueError). Not the file itself:
    the dynamic loader hands out the library it already has for a path (this key's path
    may have held an older library in this process), and a cache file rewritten in
    place (a damaged entry, a user's edit) would pull the pages from under the running
    code (SIGBUS). The copy is what is checked, so the file changing in between cannot
    slip past the checksum."""
    try:
        copy = _temporary(library.parent, ".so")
    except OSError:  # a cache directory this process cannot write to
        copy = _temporary(pathlib.Path(tempfile.gettempdir()), ".so")
    try:
        shutil.copyfile(library, copy)
        if _sha256(copy) != checksum:
            raise ValueError("the library does not match its checksum")
        return tvm.runtime.load_module(str(copy))
    finally:
        copy.unlink(missing_ok=True)  # the loaded mapping keeps the file's data


def _short(error: Exception) -> str:
    """An error's message on one line: its first line, and its last where they differ
    (TVM's compilation errors say what failed on the last)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"[:300]


def _temporary(directory: pathlib.Path, suffix: str) -> pathlib.Path:
    handle, name = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=suffix)
    os.close(handle)
    return pathlib.Path(name)


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_CACHES: dict[pathlib.Path | None, BuildCache] = {}


def shared_cache() -> BuildCache:
    """The process-wide cache for the current cache directory setting."""
    directory = default_directory()
    if directory not in _CACHES:
        _CACHES[directory] = BuildCache(directory)
    return _CACHES[directory]
