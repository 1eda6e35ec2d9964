"""Targets (issue 4 item 4): llvm runs; cuda builds here (the library holds CUDA
source) and runs where a GPU is present; metal, opencl and webgpu produce source;
vulkan builds only with a TVM that has Vulkan codegen and otherwise says how to get
one."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tvm

import egad
import egad.numpy as enp
from egad.ir.program import walk_bindings
from egad.tvm_bridge import build
from egad.tvm_bridge.cache import BuildCache
from tests.trees import assert_trees_close

RNG = np.random.default_rng(0)
X, W = RNG.standard_normal((2, 3)).astype("float32"), RNG.standard_normal((3, 3)).astype("float32")


def _rnn(x, W):
    return enp.sum(egad.fori_loop(0, 4, lambda i, h: enp.tanh(h @ W + 0.5), x))


def _elementwise(x, W):  # no loop, no matmul: small device code that builds in well under a second
    return enp.tanh(x * 2.0 + enp.sum(W, axis=0)) * enp.exp(-x)


def test_cuda_builds_without_a_gpu_and_holds_cuda_source(tmp_path):
    compiled = build(egad.value_and_grad(egad.trace(_rnn, X, W)), target="cuda")
    assert "__global__" in compiled.source["cuda"]
    if shutil.which("g++") or shutil.which("gcc"):
        path = tmp_path / "rnn_cuda.so"
        compiled.export_library(str(path))
        assert path.stat().st_size > 0 and b"__global__" in path.read_bytes()


def test_the_benchmark_models_gradients_build_for_cuda():
    """The LSTM and GNMT-lite gradients: TVM's own GPU pipeline failed both (dlight's
    GEMV rule asserted on an LSTM kernel, its Reduction rule's rfactor failed a check on
    a GNMT one); egad's guards each rule (tvm_bridge/gpu.py)."""
    from benchmarks import gnmt_lite, lstm_lm

    params = gnmt_lite.init_params("tiny")
    programs = [egad.value_and_grad(egad.trace(lstm_lm.loss, *lstm_lm.arguments(4)), wrt=lstm_lm.WRT),
                egad.value_and_grad(egad.trace(gnmt_lite.loss, params, *gnmt_lite.make_batch("tiny")), wrt=(0,))]
    for program in programs:
        assert "__global__" in build(program, target="cuda").source["cuda"]


def test_a_dlight_rule_that_raises_lets_the_next_rule_schedule():
    from tvm.s_tir import dlight as dl

    from egad.tvm_bridge.gpu import GuardedRule

    class Raising(dl.ScheduleRule):
        def apply(self, func, target, tunable):
            raise AssertionError("a rule misreading the kernel")

    lowered = tvm.relax.transform.LegalizeOps()(egad.tvm_bridge.lower(egad.trace(_elementwise, X, W)))
    target = tvm.target.Target("cuda")
    with target:
        with pytest.raises(AssertionError, match="misreading"):  # unguarded, as in TVM's pipeline
            dl.ApplyDefaultSchedule(Raising(), dl.gpu.Fallback())(lowered)
        scheduled = dl.ApplyDefaultSchedule(GuardedRule(Raising()), GuardedRule(dl.gpu.Fallback()))(lowered)
    kernels = [f for f in scheduled.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert kernels and all(f.attrs["tirx.is_scheduled"] for f in kernels)


@pytest.mark.parametrize("target, marker", [("metal", "kernel void"), ("opencl", "__kernel"), ("webgpu", "@compute")])
def test_source_targets_emit_kernels(target, marker):
    compiled = build(egad.trace(_elementwise, X, W), target=target)
    (kind, source), = compiled.source.items()
    assert kind == target and marker in source


def test_webgpu_loop_with_int64_counter_is_refused_clearly():
    with pytest.raises(egad.UnsupportedError, match="WebGPU has no int64, and its for loop counts in int64"):
        build(egad.trace(_rnn, X, W), target="webgpu")


@pytest.mark.parametrize("target, program, says", [
    ("metal", lambda: egad.trace(lambda x: x * 2.0, np.ones(3)), "Metal has no float64, and argument x of"),
    ("webgpu", lambda: egad.trace(lambda x: x * 2.0, np.ones(3)), "WebGPU has no float64, and argument x of"),
    ("webgpu", lambda: egad.trace(lambda x: enp.sum(x > 0), X), "WebGPU has no int64, and this program computes"),
    ("webgpu", lambda: egad.trace(lambda x: enp.argmax(x, axis=1), X), "computes argmax in int64"),
], ids=["metal-float64-argument", "webgpu-float64-argument", "webgpu-int64-sum-of-bools", "webgpu-argmax"])
def test_a_dtype_the_device_lacks_is_refused_naming_where_it_is(target, program, says):
    """TVM's errors vary ("Cannot convert type float64 to Metal type", "only support f16
    or f32", a line of TIR): a failed build for a device without float64 (or int64)
    says which argument or op has it. Found by fuzzing GPU builds."""
    with pytest.raises(egad.UnsupportedError, match=says):
        build(program(), target=target, cache=BuildCache(None))


def test_a_float32_program_keeps_float64_off_the_device():
    """A Python 0.0 loop state and the gradient of maximum were float64 on the device,
    so a float32 program's gradient could not build for Metal. Found by fuzzing."""
    xs = X.astype("float32")
    loop = egad.trace(lambda xs: egad.fori_loop(0, xs.shape[0], lambda i, s: s + enp.sum(xs[i]), 0.0), xs)
    clipped = egad.value_and_grad(egad.trace(lambda x: enp.sum(enp.clip(enp.maximum(x, 0.5), -1.0, 1.0)), xs))
    for program in (loop, clipped):
        assert not [b for b in walk_bindings(program.region) if "float64" in str(b.outputs[0].type.dtype)
                    and b.op != "const"]
        assert build(program, target="metal", cache=BuildCache(None)).source


@pytest.mark.parametrize("target", ["metal", "webgpu", "opencl"])
def test_float32_log1p_builds_in_float32_without_a_libm_name(target):
    """log1p was computed in float64, which Metal and WebGPU lack; TVM's own tirx.log1p
    prints `log1pf`, a function only CUDA has."""
    compiled = build(egad.trace(lambda x: enp.log1p(x) * 2.0, X), target=target, cache=BuildCache(None))
    (_, source), = compiled.source.items()
    assert "log(" in source and not any(name in source for name in ("log1pf", "double", "f64"))


def _sum_of_many(*xs):
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def _stack_of_many(*xs):
    return enp.sin(enp.stack([x * 2.0 for x in xs]))


@pytest.mark.parametrize("function", [_sum_of_many, _stack_of_many], ids=["fused-sum", "stack"])
def test_metal_kernels_bind_at_most_31_buffers(function):
    """Metal binds at most 31 buffers to a kernel: a fused sum of 40 arrays had 34 and a
    stack of 40 products 56, built without complaint and unusable on a Mac."""
    xs = [np.full(4, float(k), "float32") for k in range(40)]
    program = egad.trace(function, *xs)
    (_, source), = build(program, target="metal", cache=BuildCache(None)).source.items()
    kernels = source.split("kernel void ")[1:]
    assert kernels and max(kernel.split("{")[0].count("[[ buffer(") for kernel in kernels) <= 31
    assert_trees_close(build(program, cache=BuildCache(None))(*xs), egad.interpret(program, *xs), rtol=1e-6)


def test_vulkan_builds_or_says_how_to_get_a_vulkan_tvm():
    if tvm.get_global_func("target.build.vulkan", allow_missing=True) is None:
        with pytest.raises(egad.UnsupportedError, match="USE_VULKAN"):
            egad.optimize(egad.trace(_elementwise, X, W), target="vulkan")
    else:
        assert build(egad.trace(_elementwise, X, W), target="vulkan").source


def test_target_dicts_and_cpu_alias_run():
    program = egad.trace(_rnn, X, W)
    expected = egad.interpret(program, X, W)
    for target in ("cpu", {"kind": "llvm", "num-cores": 1}):
        np.testing.assert_allclose(build(program, target=target)(X, W), expected, rtol=1e-5)


def test_bad_targets_are_refused_with_the_options():
    program = egad.trace(_rnn, X, W)
    with pytest.raises(egad.UnsupportedError, match="(?s)unknown target 'tpu'.*cuda"):
        egad.optimize(program, target="tpu")
    with pytest.raises(egad.UnsupportedError, match="neither a target name nor a TVM target dict"):
        egad.optimize(program, target=42)
    with pytest.raises(egad.UnsupportedError, match="TVM does not accept"):
        egad.optimize(program, target={"kind": "llvm", "no-such-option": 1})


def test_running_a_gpu_build_without_the_device_says_so():
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA device")
    f = egad.optimize(egad.trace(_rnn, X, W), wrt=(1,), target="cuda")
    with pytest.raises(egad.UnsupportedError, match="no cuda device"):
        f(X, W)
    assert "__global__" in f.source["cuda"]


@pytest.mark.gpu
def test_cuda_runs_value_and_gradient_on_a_gpu():
    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA device")
    program = egad.trace(_rnn, X, W)
    value, (dW,) = egad.optimize(program, wrt=(1,), target="cuda")(X, W)
    expected_value, (expected_dW,) = egad.interpret(egad.value_and_grad(program, wrt=(1,)), X, W)
    np.testing.assert_allclose(value, expected_value, rtol=1e-4)
    np.testing.assert_allclose(dW, expected_dW, rtol=1e-4, atol=1e-5)


def test_an_llvm_target_for_another_machine_builds_and_says_it_runs_there():
    """A foreign `mtriple` got the host's mcpu added (LLVM refused it per kernel) and the
    first call raised TVM's raw "architecture mismatch". Found by fuzzing."""
    foreign = {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
    assert "mcpu" not in str(egad.tvm_bridge.targets.resolve(foreign).tvm_target)
    f = egad.optimize(egad.trace(_elementwise, X, W), wrt=None, rules=(), target=foreign)
    with pytest.raises(egad.UnsupportedError, match="built for aarch64-linux-gnu, not for this machine"):
        f(X, W)
    assert "R.function" in f.relax_text
