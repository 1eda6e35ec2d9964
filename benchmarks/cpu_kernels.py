"""egad's CPU schedules (tvm_bridge/schedule.py) against single-threaded numpy,
measured side by side in one run:

- a float32 (32x512) @ (512x1024) matmul built with `egad.tvm_bridge.build`
  (target ratio egad/numpy <= 1.25);
- one LSTM cell step (B=32, I=128, H=256, float32), value and gradients with respect
  to its weights, built with `egad.optimize(..., rules=())`, against the same
  forward and backward written by hand in numpy (target ratio <= 1.5).

egad is timed twice: as a user calls it ("call": numpy arguments copied into TVM
tensors, results copied out) and the compiled code alone ("compiled": the Relax VM's
main on TVM tensors made beforehand), which is what the schedules decide. Ratios are
egad / numpy for each. Both run on one thread, like for like (set below, before
numpy and TVM are imported; egad otherwise gives TVM's pool every CPU,
tvm_bridge/__init__.py): the target is "within 1.25x of single-threaded numpy".

    python -m benchmarks.cpu_kernels        # prints a table, writes results/cpu_kernels.json
"""
from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TVM_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import json  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import egad  # noqa: E402
import egad.numpy as enp  # noqa: E402
from egad.tvm_bridge import build  # noqa: E402

from . import lstm  # noqa: E402
from .timing import median_seconds  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results"
M, K, N = 32, 512, 1024
B, I, H = 32, 128, 256
WRT = (0, 1, 2)  # gradients with respect to Wx, Wh, b
TARGETS = {"matmul": 1.25, "lstm_cell": 1.5}
ROUNDS = 7  # medians over rounds (benchmarks/timing.py); each round times a batch of calls of each side


def lstm_cell_loss(Wx, Wh, b, x, h, c):
    """One LSTM step (benchmarks/lstm.py's cell) and a scalar of its outputs: sum(h' * h' + c')."""
    h_next, c_next = lstm.cell(Wx, Wh, b, x, h, c)
    return enp.sum(h_next * h_next + c_next)


def lstm_cell_numpy(Wx, Wh, b, x, h, c):
    """`lstm_cell_loss` and its gradients with respect to (Wx, Wh, b), by hand."""
    hidden = h.shape[1]
    gates = x @ Wx + h @ Wh + b
    i, f, o = (1.0 / (1.0 + np.exp(-gates[:, k * hidden:(k + 1) * hidden])) for k in (0, 1, 3))
    g = np.tanh(gates[:, 2 * hidden:3 * hidden])
    c_next = f * c + i * g
    tanh_c = np.tanh(c_next)
    h_next = o * tanh_c
    loss = np.sum(h_next * h_next + c_next)
    d_h = 2.0 * h_next
    d_c = 1.0 + d_h * o * (1.0 - tanh_c * tanh_c)
    d_gates = np.concatenate([d_c * g * i * (1.0 - i), d_c * c * f * (1.0 - f),
                              d_c * i * (1.0 - g * g), d_h * tanh_c * o * (1.0 - o)], axis=1)
    return loss, (x.T @ d_gates, h.T @ d_gates, d_gates.sum(axis=0))


def _compiled_code(compiled, args):
    """A call of the compiled code alone: the VM's main on TVM tensors made once
    (tvm_bridge passes the loop driver's invoke_closure first)."""
    vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
    invoke = vm.module["invoke_closure"]
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(arg), tvm.cpu()) for arg in args]
    return lambda: vm["main"](invoke, *tensors)


def _matmul_row(rng) -> dict:
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    compiled = build(egad.trace(lambda a, b: a @ b, a, b))
    np.testing.assert_allclose(compiled(a, b), a @ b, rtol=1e-4, atol=1e-3)
    times = median_seconds(rounds=ROUNDS, calls={"egad_call": lambda: compiled(a, b), "egad_compiled": _compiled_code(compiled, (a, b)),
                             "numpy": lambda: a @ b})
    return {"name": "matmul", "shape": f"({M}x{K}) @ ({K}x{N}) float32", **times}


def _lstm_row(rng) -> dict:
    def normal(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    args = (normal((I, 4 * H), I ** -0.5), normal((H, 4 * H), H ** -0.5), normal((4 * H,), 0.1),
            normal((B, I), 1.0), normal((B, H), 0.5), normal((B, H), 0.5))
    program = egad.trace(lstm_cell_loss, *args)
    optimized = egad.optimize(program, wrt=WRT, rules=())
    value, grads = optimized(*args)
    compiled = build(egad.value_and_grad(program, wrt=WRT))  # what optimize built (a cache hit)
    expected_value, expected_grads = lstm_cell_numpy(*args)
    np.testing.assert_allclose(value, expected_value, rtol=1e-4)
    for got, expected in zip(grads, expected_grads):
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
    times = median_seconds(rounds=ROUNDS, calls={"egad_call": lambda: optimized(*args), "egad_compiled": _compiled_code(compiled, args),
                             "numpy": lambda: lstm_cell_numpy(*args)})
    return {"name": "lstm_cell", "shape": f"B={B} I={I} H={H} float32, value + grads of (Wx, Wh, b)", **times}


def _tvm_threads() -> int | None:
    num_threads = tvm.get_global_func("runtime.NumThreads", allow_missing=True)
    return int(num_threads()) if num_threads is not None else None


def main() -> int:
    rng = np.random.default_rng(0)
    rows = [_matmul_row(rng), _lstm_row(rng)]
    for row in rows:
        row["ratio_call"] = row["egad_call"] / row["numpy"]
        row["ratio_compiled"] = row["egad_compiled"] / row["numpy"]
        row["target_ratio"] = TARGETS[row["name"]]
    print(f"{'kernel':>10} {'numpy ms':>9} {'egad call':>10} {'ratio':>6} {'compiled':>9} {'ratio':>6} {'target':>7}"
          "  shape")
    for row in rows:
        print(f"{row['name']:>10} {row['numpy'] * 1e3:>9.3f} {row['egad_call'] * 1e3:>10.3f} {row['ratio_call']:>6.2f} "
              f"{row['egad_compiled'] * 1e3:>9.3f} {row['ratio_compiled']:>6.2f} {'<=' + str(row['target_ratio']):>7}"
              f"  {row['shape']}")
    threads = _tvm_threads()
    print(f"TVM threads: {threads}; numpy: OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "cpu_kernels.json"
    out.write_text(json.dumps({"machine": platform.platform(), "processor": platform.processor(),
                               "tvm_threads": threads, "openblas_threads": os.environ["OPENBLAS_NUM_THREADS"],
                               "rounds": ROUNDS, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
