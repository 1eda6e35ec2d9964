"""benchmarks/gpu_run.py: libraries exported where egad is installed run, checked, where
only TVM's runtime is. Here with CPU builds (`--target=llvm`): the same path as a
GPU's but for the device, and `run` in a process with TVM's compiler left unloaded."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tvm_ffi

import egad
from benchmarks import gpu_run, lstm_lm
from egad.tvm_bridge import runtime

REPO = pathlib.Path(__file__).resolve().parents[2]


ARGS = lstm_lm.arguments(5, batch=3, inputs=4, hidden=6)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> pathlib.Path:
    workload = ("tiny lstm", egad.trace(lstm_lm.loss, *ARGS), lstm_lm.WRT, ARGS)
    directory = tmp_path_factory.mktemp("gpu_run")
    gpu_run.export(directory, target="llvm", workloads=[workload])
    return directory


def test_run_with_tvm_runtime_alone_checks_and_times_both_builds(exported, tmp_path):
    result_path = tmp_path / "result.json"
    runtime_copy = tmp_path / "runtime.py"  # --runtime: the loops and tapes from another copy
    runtime_copy.write_text((REPO / "tvm_bridge" / "runtime.py").read_text())
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c",
                           "import sys; from benchmarks import gpu_run; rc = gpu_run.main(sys.argv[1:]); "
                           "import tvm; assert 'tvm_compiler' not in tvm.base._LOADED_LIBS; "
                           "assert 'egad.tvm_bridge' not in sys.modules and 'egglog' not in sys.modules; sys.exit(rc)",
                           "run", str(exported), "--rounds=1", f"--json={result_path}", f"--runtime={runtime_copy}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(result_path.read_text())
    assert result["runtime only"] is True and result["runtime.py"] == str(runtime_copy)
    (row,) = result["rows"]
    assert row["workload"] == "tiny lstm"
    assert row["rules=() ms"] > 0 and row["default ms"] > 0
    assert max(row["relative error"].values()) <= gpu_run.RTOL


def test_profile_with_tvm_runtime_alone_times_each_call_by_loop(exported, tmp_path):
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c",
                           "import sys; from benchmarks import gpu_run; rc = gpu_run.main(sys.argv[1:]); "
                           "assert not any(m == 'egad' or m.startswith(('egad.', 'egglog')) for m in sys.modules); "
                           "sys.exit(rc)", "profile", str(exported)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for side in ("rules=()", "default"):
        printed = done.stdout.split(f"== tiny lstm {side}\n")[1].split("== ")[0]
        assert "self time by kind: " in printed and " kernel " in printed
        assert "loop 1: egad.for_loop in main, entered 1x a call, 5 trips each" in printed
        assert " loop 1 " in printed  # a row of a call inside the forward loop's body


def test_run_refuses_results_that_differ(exported, tmp_path, monkeypatch):
    monkeypatch.delenv("TVM_USE_RUNTIME_LIB", raising=False)
    manifest = json.loads((exported / "manifest.json").read_text())
    (entry,) = manifest["workloads"]
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    for path in exported.iterdir():
        (wrong / path.name).write_bytes(path.read_bytes())
    expected = gpu_run._arrays(exported / entry["expected"])
    expected[0] = expected[0] * 1.01  # the loss, 1% off
    np.savez(wrong / entry["expected"], *expected)
    with pytest.raises(AssertionError, match="differ from the CPU's rules=\\(\\) build"):
        gpu_run.run(wrong, rounds=1)
    # TVM was imported with its compiler here: run set nothing that later subprocesses inherit
    assert "TVM_USE_RUNTIME_LIB" not in os.environ
    # the builds in this process still call back into egad's own runtime module
    assert gpu_run._load_callbacks() is runtime
    assert tvm_ffi.get_global_func("egad.tape_alloc") is not None
    value, _ = egad.optimize(egad.trace(lstm_lm.loss, *ARGS), wrt=lstm_lm.WRT, rules=())(*ARGS)
    assert not runtime._TAPES  # released by the call that made them: the VM called this module's tape_alloc


def test_a_nan_result_is_no_closer_than_any_other():
    """Python's max(0.0, nan) is 0.0: a NaN result passed the check of both benchmarks."""
    from benchmarks.closeness import largest_relative_error

    assert np.isnan(largest_relative_error([np.array([np.nan]), np.ones(2)], [np.ones(1), np.ones(2)]))
    assert np.isnan(largest_relative_error([np.ones(2), np.array([1.0, np.nan])], [np.ones(2), np.ones(2)]))
    assert largest_relative_error([np.array([np.nan, np.inf, 2.0])], [np.array([np.nan, np.inf, 2.2])]) \
        == pytest.approx(0.2 / 2.2)
    with pytest.raises(AssertionError, match="differ from the CPU's rules=\\(\\) build by nan"):
        gpu_run._relative_error([np.array([np.nan])], [np.ones(1)], "a NaN", gpu_run.RTOL)
