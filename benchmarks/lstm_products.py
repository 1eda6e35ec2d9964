"""The five products of the LSTM's gradient (benchmarks/lstm_lm.py, B=32, I=128,
H=256, T=64) built alone with egad's CPU schedules, on all threads, in GFlop/s:
the input projection before the loops, the forward and reverse step products (with
their weights as given, and packed as the loops read them: tvm_bridge/pack_weights.py),
and the two weight gradients after them. Each batched product is also timed with its
operands cold, as in the program (a loop wrote them just before): 48 MiB touched
before each call, that touch timed alone and subtracted. Measured side by side in one
run, medians (benchmarks/timing.py).

    python -m benchmarks.lstm_products      # prints a table, writes results/lstm_products.json
"""
from __future__ import annotations

import json
import pathlib
import platform

import numpy as np
import tvm

import egad
import egad.numpy as enp
from egad.tvm_bridge import build
from egad.tvm_bridge.pack_weights import PACKED_SPEC
from egad.tvm_bridge.schedule import matmul_column_tile
from egad.tvm_bridge.targets import resolve

from .timing import median_seconds

RESULTS = pathlib.Path(__file__).parent / "results"
ROUNDS = 7
CALLS = 10  # calls a round, per product
B, I, H, T = 32, 128, 256, 64
G = 4 * H  # the four gates, side by side

W = matmul_column_tile(resolve("llvm").tvm_target, "float32")  # the column tile loop weights are packed in


def _packed(a, b_packed):  # a step's product as the loops run it (tvm_bridge/pack_weights.py)
    return enp.einsum(PACKED_SPEC, a, b_packed)


PRODUCTS = {  # name: (function, shape of a, shape of b, whether a loop wrote its operands just before)
    "input projection X @ U": (lambda a, b: a @ b, (T * B, I), (I, G), False),
    "forward step h @ W": (lambda a, b: a @ b, (B, H), (H, G), False),
    "forward step, W packed": (_packed, (B, H), (G // W, H, W), False),
    "reverse step dG @ W^T": (lambda a, b: a @ b, (B, G), (G, H), False),
    "reverse step, W^T packed": (_packed, (B, G), (H // W, G, W), False),
    "weight gradient X^T dG": (lambda a, b: a.T @ b, (T * B, I), (T * B, G), True),
    "weight gradient H^T dG": (lambda a, b: a.T @ b, (T * B, H), (T * B, G), True),
}
_EVICTED = np.zeros((48 << 20) // 4, np.float32)  # larger than the caches of the machines measured


def _evict():
    _EVICTED[::16] += 1.0  # a write to every cache line


def _rows(rng) -> list[dict]:
    calls, flops = {"evict": lambda: [_evict() for _ in range(CALLS)]}, {}
    for name, (fn, a_shape, b_shape, cold) in PRODUCTS.items():
        a, b = (rng.standard_normal(shape).astype(np.float32) for shape in (a_shape, b_shape))
        compiled, expected = build(egad.trace(fn, a, b)), fn(a, b)
        np.testing.assert_allclose(np.asarray(compiled(a, b)), expected, rtol=1e-3, atol=1e-2)
        main, invoke, _ = compiled._machine()  # the compiled code alone, on tensors made once
        ta, tb = tvm.runtime.tensor(a), tvm.runtime.tensor(b)
        calls[name] = lambda main=main, invoke=invoke, ta=ta, tb=tb: [main(invoke, ta, tb) for _ in range(CALLS)]
        if cold:
            calls[name + " (cold)"] = lambda main=main, invoke=invoke, ta=ta, tb=tb: [
                (_evict(), main(invoke, ta, tb)) for _ in range(CALLS)]
        depth = a_shape[0] if cold else a_shape[1]
        flops[name] = 2 * depth * expected.size
    times = median_seconds(rounds=ROUNDS, calls=calls)
    result = []
    for name in PRODUCTS:
        for label, seconds in ((name, times[name]), (name + " (cold)", times.get(name + " (cold)"))):
            if seconds is None:
                continue
            if label.endswith("(cold)"):
                seconds -= times["evict"]
            per_call = seconds / CALLS
            result.append({"name": label, "us": per_call * 1e6, "gflops": flops[name] / per_call / 1e9})
    return result


def main() -> int:
    rows = _rows(np.random.default_rng(0))
    print(f"  {'product':32} {'us':>9} {'GFlop/s':>8}")
    for row in rows:
        print(f"  {row['name']:32} {row['us']:9.1f} {row['gflops']:8.1f}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "lstm_products.json"
    path.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "products": rows}, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
