"""The build cache (issue 4 item 5): built modules are found again by program
fingerprint and target, in memory and on disk; a damaged disk entry is rebuilt,
never trusted; writes leave no partial files."""
from __future__ import annotations

import gc
import importlib

import json
import shutil

import numpy as np
import pytest
import tvm

import egad
import egad.numpy as enp
from egad.ir.fingerprint import fingerprint
from egad.tvm_bridge import build, build_all
from egad.tvm_bridge.cache import BuildCache, cache_key
from egad.tvm_bridge.targets import resolve

needs_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("gcc")),
                                    reason="exporting a CPU library needs a C compiler")


def _loss(W, xs, h0):
    return enp.sum(egad.fori_loop(0, xs.shape[0], lambda t, h: enp.tanh(xs[t] @ W + h), h0) ** 2)


ARGS = (np.eye(3) * 0.5, np.linspace(-1, 1, 30).reshape(5, 2, 3), np.zeros((2, 3)))


def _gradient():
    return egad.value_and_grad(egad.trace(_loss, *ARGS))


def test_fingerprint_is_stable_and_sees_constants_and_attrs():
    assert fingerprint(_gradient()) == fingerprint(_gradient())
    scaled = egad.trace(lambda x: x * 2.0, np.ones(3))
    assert fingerprint(scaled) != fingerprint(egad.trace(lambda x: x * 3.0, np.ones(3)))
    assert fingerprint(egad.trace(lambda x: enp.sum(x, axis=0), np.ones((2, 2)))) != \
        fingerprint(egad.trace(lambda x: enp.sum(x, axis=1), np.ones((2, 2))))
    assert fingerprint(egad.trace(lambda x: x + np.arange(3.0), np.ones(3))) != \
        fingerprint(egad.trace(lambda x: x + np.arange(3.0)[::-1], np.ones(3)))


def test_key_depends_on_target():
    program = _gradient()
    assert cache_key(program, resolve("llvm")) != cache_key(program, resolve({"kind": "llvm", "num-cores": 1}))


def test_memory_cache_returns_the_same_executable():
    cache = BuildCache(None)
    first, second = build(_gradient(), cache=cache), build(_gradient(), cache=cache)
    assert (first.origin, second.origin) == ("built", "memory")
    assert second.executable is first.executable


def test_builds_side_by_side_equal_builds_one_at_a_time():
    forward = egad.trace(_loss, *ARGS)
    together = build_all([_gradient(), forward, _gradient()], cache=BuildCache(None))
    assert [c.origin for c in together] == ["built", "built", "memory"]  # the same program twice: built once
    np.testing.assert_allclose(together[0](*ARGS)[1][0], egad.interpret(_gradient(), *ARGS)[1][0], rtol=1e-10)
    np.testing.assert_allclose(together[1](*ARGS), egad.interpret(forward, *ARGS), rtol=1e-12)
    alone = build(forward, cache=BuildCache(None))
    np.testing.assert_array_equal(alone(*ARGS), together[1](*ARGS))


def test_builds_on_threads_run_with_the_garbage_collector_paused(monkeypatch):
    """An unreachable egglog EGraph collected on a build thread raised "EGraph is
    unsendable, but is being dropped on another thread": the collector runs in whichever
    thread allocates, so the threaded builds run with it off, and it is on again after."""
    build_module = importlib.import_module(build_all.__module__)  # the module: `build` is also a function
    seen = []
    compile_one = build_module._compile

    def recording(module, target, name):
        seen.append(gc.isenabled())
        return compile_one(module, target, name)

    monkeypatch.setattr(build_module, "_compile", recording)
    assert gc.isenabled()
    build_all([egad.trace(_loss, *ARGS), _gradient()], cache=BuildCache(None))
    assert seen == [False, False] and gc.isenabled()


@needs_compiler
def test_a_build_written_to_disk_runs_from_the_library_written(tmp_path):
    built = build(_gradient(), cache=BuildCache(tmp_path))
    # a library loaded from the file (no JIT at the first call), not the Executable tvm.compile made
    assert built.origin == "built" and isinstance(built.executable, tvm.runtime.Module)
    np.testing.assert_allclose(built(*ARGS)[1][0], egad.interpret(_gradient(), *ARGS)[1][0], rtol=1e-10)


@needs_compiler
def test_a_build_keeps_running_when_its_cache_file_is_rewritten_in_place(tmp_path):
    built = build(_gradient(), cache=BuildCache(tmp_path))
    (library,) = tmp_path.glob("*.so")
    library.write_bytes(library.read_bytes()[:1000])  # same file, truncated: a mapping of it would fault (SIGBUS)
    np.testing.assert_allclose(built(*ARGS)[1][0], egad.interpret(_gradient(), *ARGS)[1][0], rtol=1e-10)


@needs_compiler
def test_a_library_loaded_from_disk_keeps_running_when_its_file_is_rewritten_in_place(tmp_path):
    """A build read from the disk cache was loaded from the cache file itself: rewriting
    it in place (`cp backup/KEY.so cache/`) killed the process (SIGBUS). Found by fuzzing."""
    build(_gradient(), cache=BuildCache(tmp_path))
    loaded = build(_gradient(), cache=BuildCache(tmp_path))
    (library,) = tmp_path.glob("*.so")
    library.write_bytes(library.read_bytes()[:1000])
    assert loaded.origin == "disk"
    np.testing.assert_allclose(loaded(*ARGS)[1][0], egad.interpret(_gradient(), *ARGS)[1][0], rtol=1e-10)


@needs_compiler
def test_an_entry_filed_under_another_key_is_rebuilt_not_run(tmp_path):
    """Nothing tied an entry to its key: two entries' files swapped (a hand-copied
    cache) ran each program with the other's library, 15 for 6. Found by fuzzing."""
    doubled, tripled = (egad.trace(lambda x, c=c: enp.sum(x * c), np.ones(3)) for c in (2.0, 5.0))
    build_all([doubled, tripled], cache=BuildCache(tmp_path))
    keys = [cache_key(p, resolve("llvm")) for p in (doubled, tripled)]
    for suffix in (".so", ".json"):
        first, second = (tmp_path / f"{key}{suffix}" for key in keys)
        first_bytes = first.read_bytes()
        first.write_bytes(second.read_bytes())
        second.write_bytes(first_bytes)
    for program, want in ((doubled, 6.0), (tripled, 15.0)):
        rebuilt = build(program, cache=BuildCache(tmp_path))
        assert rebuilt.origin == "built" and "another key" in rebuilt.disk_problem
        assert rebuilt(np.ones(3)) == want


@needs_compiler
def test_a_damaged_entry_that_cannot_be_deleted_is_rebuilt_and_said(tmp_path, monkeypatch):
    """In a cache directory the user cannot write, deleting a damaged entry raised a raw
    PermissionError at every call. Found by fuzzing."""
    import pathlib

    build(_gradient(), cache=BuildCache(tmp_path))
    (library,) = tmp_path.glob("*.so")
    library.write_bytes(library.read_bytes()[:1000])
    monkeypatch.setattr(pathlib.Path, "unlink", lambda self, missing_ok=False: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")))
    rebuilt = build(_gradient(), cache=BuildCache(tmp_path))
    assert rebuilt.origin == "built" and "not deleted (PermissionError)" in rebuilt.disk_problem
    np.testing.assert_allclose(rebuilt(*ARGS)[0], egad.interpret(_gradient(), *ARGS)[0], rtol=1e-12)


@needs_compiler
def test_disk_cache_survives_a_new_process_cache(tmp_path):
    built = build(_gradient(), cache=BuildCache(tmp_path))
    loaded = build(_gradient(), cache=BuildCache(tmp_path))  # a fresh cache: as in a new process
    assert (built.origin, loaded.origin) == ("built", "disk")
    np.testing.assert_allclose(loaded(*ARGS)[0], built(*ARGS)[0], rtol=1e-12)
    np.testing.assert_allclose(loaded(*ARGS)[1][0], egad.interpret(_gradient(), *ARGS)[1][0], rtol=1e-10)
    assert loaded.relax_text == built.relax_text
    assert not list(tmp_path.glob(".partial-*"))


@needs_compiler
@pytest.mark.parametrize("damage", ["truncate library", "flip a byte", "garbage json", "delete library"])
def test_damaged_disk_entry_is_rebuilt(tmp_path, damage):
    build(_gradient(), cache=BuildCache(tmp_path))
    (library,) = tmp_path.glob("*.so")
    meta = library.with_suffix(".json")
    if damage == "truncate library":
        library.write_bytes(library.read_bytes()[:1000])
    elif damage == "flip a byte":
        data = bytearray(library.read_bytes())
        data[len(data) // 2] ^= 0xFF
        library.write_bytes(bytes(data))
    elif damage == "garbage json":
        meta.write_text("{not json")
    else:
        library.unlink()
    cache = BuildCache(tmp_path)
    rebuilt = build(_gradient(), cache=cache)
    assert rebuilt.origin == "built" and "corrupt cache entry" in rebuilt.disk_problem
    np.testing.assert_allclose(rebuilt(*ARGS)[0], egad.interpret(_gradient(), *ARGS)[0], rtol=1e-12)
    assert json.loads(meta.read_text())["format"] == 2  # written again, whole
    assert build(_gradient(), cache=BuildCache(tmp_path)).origin == "disk"


def test_disk_cache_can_be_turned_off(monkeypatch, tmp_path):
    from egad.tvm_bridge.cache import default_directory

    monkeypatch.setenv("EGAD_DISK_CACHE", "0")
    assert default_directory() is None
    monkeypatch.setenv("EGAD_DISK_CACHE", "1")
    monkeypatch.setenv("EGAD_CACHE_DIR", str(tmp_path))
    assert default_directory() == tmp_path
