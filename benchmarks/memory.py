"""Peak memory of compiled programs (tvm_bridge, llvm), each size in a fresh subprocess.

(a) A forward-only loop with a (32, 256) float32 state, h = tanh(h * a + x), at
    T=100 and T=20,000. Target: the two peaks differ by < 50 MB (the loop driver
    holds one iteration's tensors, not T of them; DESIGN §7).
(b) The LSTM loss and gradient of benchmarks/lstm.py (B=32, I=64, H=128, T=1024)
    built with `egad.optimize`. Target: (peak - C) <= 1.5 x (the interpreter's peak
    tape bytes + the argument bytes), where the constant C is the peak of the same
    call at T=1 (workspace that does not grow with T).

(c) Checkpointing (egad/ad/checkpoint.py): the LSTM of benchmarks/lstm_lm.py (B=32,
    I=128, H=256, T=1024, gate by gate) built with `memory_budget` = 1/8 of its
    store-all tape bytes, beside the same build without a budget. Targets: peak
    during the call - C <= budget, where C is the peak of the store-all call at T=1
    (arguments, outputs and workspace: what does not grow with T); step time <= 2x
    store-all's; gradients equal store-all's (relative 1e-4). Two more builds, at 1/40
    and 1/64 of store-all, are below what one level of even segments reaches: the plan
    cuts binomial segments (one extra pass) and nests two even levels; printed beside
    their budgets, without a target.

(d) Online checkpoints for a `while` loop (egad/ad/online.py): an RNN loop that runs
    as many trips as an argument says (B=32, H=256 float32, h = tanh(h @ W + x)),
    planned on 64 trips with a budget of 1/4 of its store-all tapes there, then run
    on 64, 2048 and 16384 trips: the plan's online segments (doubling) beside the
    same every-k segments kept fixed, and store-all where it fits in memory.
    Printed: peak - C of each run and what the two models predict; no target (the
    issue asks for an online policy; this shows what it keeps on longer runs).

(e) Several loops under one budget (`checkpoint.plan`, a knapsack over (time, bytes)):
    two loops of 64 trips taping the same bytes, one of four 32x256 @ 256x256 matmul
    steps a trip, one of an elementwise step; the budget leaves room for one of them
    checkpointed. The plan checkpoints the cheap one; beside it, the heavy one
    checkpointed instead (what shrinking the first loop with the most bytes does, as
    the plan did before) and store-all, timed interleaved (median of 15 calls).
    Target: the plan's step is the faster of the two that fit.

"Peak during the call" is VmHWM - VmRSS before the call: the child builds, warms
up, trims malloc's free memory, resets the kernel's high-water mark (writing 5 to /proc/self/clear_refs; Linux
only), calls once and reads VmHWM. tracemalloc would not see TVM's buffers, and the
child's ru_maxrss (also printed) is set by LLVM during the build, not by the call.

    python -m benchmarks.memory                 # prints tables, writes results/memory.json
    python -m benchmarks.memory checkpoint      # one section (forward, lstm, checkpoint, online, loops)
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import time

import numpy as np

import egad
import egad.numpy as enp
from benchmarks import lstm

RESULTS = pathlib.Path(__file__).parent / "results"
MB = 2 ** 20
FORWARD_LENGTHS = (100, 20_000)
LSTM_LENGTHS = (1, 1024)
FORWARD_TARGET_MB = 50
LSTM_TARGET_RATIO = 1.5


# --- the child: build, warm up, measure one call -------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _release_free_heap() -> None:
    """Give memory malloc holds but nobody uses back to the kernel (glibc's
    malloc_trim), so that "RSS before the call" is live memory only: the warm-up
    call's small freed buffers would otherwise stay resident and hide the peak."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the measurement is only less exact
        pass


def measure_call(call) -> dict:
    """Run `call()` once; its wall time and the resident memory it added at its peak.
    The host buffers egad keeps for reuse (tape slabs, stacked loop outputs) are
    dropped first, so that the call's own use of them counts."""
    from egad.tvm_bridge import runtime

    runtime.forget_spare_buffers()
    _release_free_heap()
    before_kb = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # the high-water mark restarts from the current RSS
    started = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - started
    peak_mb = (_status_kb("VmHWM") - before_kb) / 1024
    maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"call_s": seconds, "peak_call_mb": peak_mb, "child_maxrss_mb": maxrss_mb, "result": result}


def _forward_loop(h, a, x, n):
    # elementwise on purpose: the unscheduled matmul costs ~3 ms an iteration (64 s at
    # T=20,000), and what is measured here is the driver's memory, not the body's speed
    return egad.fori_loop(0, n, lambda i, h: enp.tanh(h * a + x), h)


def child_forward(T: int) -> dict:
    rng = np.random.default_rng(0)
    h = np.zeros((32, 256), np.float32)
    a = np.full(256, 0.5, np.float32)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    compiled = egad.optimize(egad.trace(_forward_loop, h, a, x, 1), wrt=None)
    compiled(h, a, x, 2)  # build and warm up outside the measurement
    measured = measure_call(lambda: compiled(h, a, x, T))
    measured["result"] = float(np.sum(measured["result"]))
    return measured


def child_lstm(T: int) -> dict:
    Wx, Wh, b, _, h0, c0 = lstm.arguments(1)
    program = egad.trace(lstm.loop_loss, Wx, Wh, b, lstm.symbolic_length_xs(), h0, c0)
    compiled = egad.optimize(program, wrt=lstm.WRT)
    compiled(*lstm.arguments(2))  # build and warm up outside the measurement
    args = lstm.arguments(T)
    measured = measure_call(lambda: compiled(*args))
    measured["result"] = float(measured["result"][0])
    return measured


CHECKPOINT_T = 1024
CHECKPOINT_FRACTION = 8  # the budget: store-all tape bytes / 8
CHECKPOINT_STEP_TARGET = 2.0
# below what one level of even segments reaches: the plans cut binomial segments (one extra forward
# pass), then nest levels (two)
BELOW_ONE_LEVEL_FRACTIONS = (40, 64)


def child_checkpoint(T: int, budget: int = 0) -> dict:
    """lstm_lm at length T, built with `memory_budget=budget` (0: store-all): the
    peak of one call, the median of three calls, and the gradients (saved to a file)."""
    from benchmarks import lstm_lm

    args = lstm_lm.arguments(T)
    compiled = egad.optimize(lstm_lm.program(T), wrt=lstm_lm.WRT, memory_budget=budget or None, check=False)
    compiled(*args)  # build and warm up outside the measurement
    measured = measure_call(lambda: compiled(*args))
    value, grads = measured.pop("result")
    seconds = []
    for _ in range(3):
        started = time.perf_counter()
        compiled(*args)
        seconds.append(time.perf_counter() - started)
    out = pathlib.Path(os.environ.get("EGAD_BENCH_TMP", "/tmp")) / f"checkpoint-grads-{T}-{budget}.npy"
    np.save(out, np.concatenate([np.ravel(g) for g in grads]))
    plan = compiled.checkpoint_plans[0]
    (optimization,) = compiled.optimizations
    # what was built: the plan's program or the e-graph's own checkpointing (egad/api.py, _egraph_policies)
    built = [f"memory: {optimization.memory}"] if optimization.memory else []
    return {**measured, "step_s": float(np.median(seconds)), "value": float(value), "grads_file": str(out),
            "plan": plan.lines() + built}


ONLINE_PLANNED_T = 64  # the trips the while loop runs on the example inputs (the plan's sample)
ONLINE_FRACTION = 4  # the budget: store-all tape bytes at the planned trips / 4
ONLINE_LENGTHS = (64, 2048, 16384)
ONLINE_STORE_ALL_LIMIT = 2048  # store-all at 16384 trips would tape 1 GiB
ONLINE_MODES = ("store-all", "fixed every-k", "online")


def _while_rnn(W, x, h0, steps):
    def cond(state):
        h, n = state
        return n < steps

    def body(state):
        h, n = state
        return enp.tanh(h @ W + x), n + 1.0

    h, _ = egad.while_loop(cond, body, (h0, 0.0))
    return enp.sum(h * h)


def _while_rnn_arguments(steps: int) -> tuple:
    rng = np.random.default_rng(0)
    H = 256
    return ((rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32),
            (rng.standard_normal((32, H)) * 0.1).astype(np.float32), np.zeros((32, H), np.float32), np.float32(steps))


def online_plan():
    """The while RNN's program and its checkpoint plan on the planned trips."""
    from egad.ad import checkpoint

    args = _while_rnn_arguments(ONLINE_PLANNED_T)
    program = egad.trace(_while_rnn, *args)
    store_all = checkpoint.plan(program, (0, 1), 10**12, example_args=args).store_all_bytes
    return program, checkpoint.plan(program, (0, 1), store_all // ONLINE_FRACTION, example_args=args)


def child_online(T: int, mode: int) -> dict:
    """The while RNN built store-all (mode 0), with the plan's every-k segments kept
    fixed (1), or through `egad.optimize(memory_budget=...)` (2: online segments),
    planned and warmed up on the planned trips, then called once on T trips."""
    from egad.ad import checkpoint

    program, plan = online_plan()
    (policy,) = plan.policies
    if ONLINE_MODES[mode] == "fixed every-k":
        program = checkpoint.segment(program, 0, *policy.chain)
    budget = plan.budget if ONLINE_MODES[mode] == "online" else None
    compiled = egad.optimize(program, wrt=(0, 1), memory_budget=budget, rules=(), check=False)
    compiled(*_while_rnn_arguments(ONLINE_PLANNED_T))  # plan (online), build and warm up on the planned trips
    args = _while_rnn_arguments(T)
    measured = measure_call(lambda: compiled(*args))
    value, grads = measured.pop("result")
    return {**measured, "value": float(value), "grad_norms": [float(np.linalg.norm(g)) for g in grads]}


CHILDREN = {"forward": child_forward, "lstm": child_lstm, "checkpoint": child_checkpoint, "online": child_online}


def run_child(kind: str, T: int, *extra) -> dict:
    """Run one measurement in a fresh interpreter that builds from scratch (the disk
    build cache off); its JSON is the last line it prints."""
    environment = {**os.environ, "EGAD_DISK_CACHE": "0"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--child", kind, str(T), *map(str, extra)],
                          capture_output=True, text=True, check=True, env=environment)
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the parent: what the interpreter stores, and the tables --------------------------------


def interpreter_bytes(T: int) -> dict:
    """Peak tape bytes of the interpreted gradient (RunStats) and the arguments' bytes."""
    program = egad.trace(lstm.loop_loss, *lstm.arguments(T))
    stats = egad.RunStats()
    args = lstm.arguments(T)
    value, _ = egad.interpret(egad.value_and_grad(program, wrt=lstm.WRT), *args, stats=stats)
    return {"tape_mb": stats.peak_tape_bytes / MB, "args_mb": sum(a.nbytes for a in args) / MB,
            "interpreted_value": float(value)}


def forward_table() -> dict:
    rows = [{"T": T, **run_child("forward", T)} for T in FORWARD_LENGTHS]
    difference = rows[-1]["peak_call_mb"] - rows[0]["peak_call_mb"]
    print("(a) forward-only loop, state (32, 256) float32, h = tanh(h * a + x)")
    print(f"{'T':>7} {'call s':>8} {'peak during call MB':>20} {'child maxrss MB':>16}")
    for r in rows:
        print(f"{r['T']:>7} {r['call_s']:>8.2f} {r['peak_call_mb']:>20.1f} {r['child_maxrss_mb']:>16.1f}")
    print(f"difference T={FORWARD_LENGTHS[-1]} - T={FORWARD_LENGTHS[0]}: {difference:.1f} MB "
          f"(target < {FORWARD_TARGET_MB} MB)\n")
    return {"rows": rows, "difference_mb": difference, "target_mb": FORWARD_TARGET_MB}


def lstm_table() -> dict:
    rows = [{"T": T, **run_child("lstm", T), **interpreter_bytes(T)} for T in LSTM_LENGTHS]
    for r in rows:  # the compiled and interpreted gradients ran the same loss
        np.testing.assert_allclose(r["result"], r["interpreted_value"], rtol=1e-3)
    constant_mb = rows[0]["peak_call_mb"]
    last = rows[-1]
    ratio = (last["peak_call_mb"] - constant_mb) / (last["tape_mb"] + last["args_mb"])
    print(f"(b) LSTM loss + gradient wrt (Wx, Wh, b), B={lstm.B} I={lstm.I} H={lstm.H} float32, egad.optimize")
    print(f"{'T':>7} {'call s':>8} {'peak during call MB':>20} {'interp tape MB':>15} {'args MB':>8}")
    for r in rows:
        print(f"{r['T']:>7} {r['call_s']:>8.2f} {r['peak_call_mb']:>20.1f} {r['tape_mb']:>15.1f} "
              f"{r['args_mb']:>8.1f}")
    print(f"(peak(T={last['T']}) - C) / (tape + args) = {ratio:.2f}  (target <= {LSTM_TARGET_RATIO}; "
          f"C = peak of the T=1 call = {constant_mb:.1f} MB)")
    return {"rows": rows, "constant_mb": constant_mb, "ratio": ratio, "target_ratio": LSTM_TARGET_RATIO,
            "sizes": {"B": lstm.B, "I": lstm.I, "H": lstm.H}}


def checkpoint_table() -> dict:
    from benchmarks import lstm_lm
    from egad.ad import checkpoint

    store_all_bytes = checkpoint.plan(lstm_lm.program(CHECKPOINT_T), lstm_lm.WRT, 1).store_all_bytes
    budget = store_all_bytes // CHECKPOINT_FRACTION
    constant = run_child("checkpoint", 1)
    deep_budgets = {f"1/{n}": store_all_bytes // n for n in BELOW_ONE_LEVEL_FRACTIONS}
    rows = {"store-all": run_child("checkpoint", CHECKPOINT_T), "budget": run_child("checkpoint", CHECKPOINT_T, budget),
            **{name: run_child("checkpoint", CHECKPOINT_T, deep) for name, deep in deep_budgets.items()}}
    want = np.load(rows["store-all"]["grads_file"])
    errors = {k: float(np.max(np.abs(np.load(r["grads_file"]) - want)) / np.max(np.abs(want)))
              for k, r in rows.items() if k != "store-all"}
    error = errors["budget"]
    C = constant["peak_call_mb"]
    over = rows["budget"]["peak_call_mb"] - C
    slowdown = rows["budget"]["step_s"] / rows["store-all"]["step_s"]
    print(f"(c) checkpointing: lstm_lm B={lstm_lm.B} I={lstm_lm.I} H={lstm_lm.H} T={CHECKPOINT_T} float32, "
          f"memory_budget = store-all / {CHECKPOINT_FRACTION} = {budget / MB:.1f} MB "
          f"(store-all tapes {store_all_bytes / MB:.1f} MB)")
    print("    " + "\n    ".join(rows["budget"]["plan"]))
    print(f"{'build':>10} {'step ms':>9} {'peak during call MB':>20} {'peak - C MB':>12}")
    for name, r in rows.items():
        print(f"{name:>10} {r['step_s'] * 1e3:>9.1f} {r['peak_call_mb']:>20.1f} {r['peak_call_mb'] - C:>12.1f}")
    print(f"C = peak of the T=1 call = {C:.1f} MB; budget run: peak - C = {over:.1f} MB against a budget of "
          f"{budget / MB:.1f} MB ({'met' if over <= budget / MB else 'NOT met'}); step {slowdown:.2f}x store-all "
          f"(target <= {CHECKPOINT_STEP_TARGET}: {'met' if slowdown <= CHECKPOINT_STEP_TARGET else 'NOT met'}); "
          f"gradients differ by {error:.2g} (relative)")
    for name, deep_budget in deep_budgets.items():
        deep = rows[name]
        print(f"memory_budget = store-all {name[1:]} = {deep_budget / MB:.1f} MB, below the reach of one level of "
              f"even segments:")
        print("    " + "\n    ".join(deep["plan"]))
        print(f"peak - C = {deep['peak_call_mb'] - C:.1f} MB "
              f"({'within' if deep['peak_call_mb'] - C <= deep_budget / MB else 'OVER'} the budget); "
              f"step {deep['step_s'] / rows['store-all']['step_s']:.2f}x store-all; gradients differ by "
              f"{errors[name]:.2g} (relative)")
    print()
    return {"rows": rows, "constant_mb": C, "budget_mb": budget / MB, "store_all_tape_mb": store_all_bytes / MB,
            "deep_budgets_mb": {name: b / MB for name, b in deep_budgets.items()},
            "gradient_relative_errors": errors, "peak_minus_constant_mb": over,
            "step_ratio": slowdown, "step_target": CHECKPOINT_STEP_TARGET, "gradient_relative_error": error}


def online_table() -> dict:
    program, plan = online_plan()
    (policy,) = plan.policies
    constant = run_child("online", 1, 0)["peak_call_mb"]
    rows = []
    for T in ONLINE_LENGTHS:
        row = {"T": T, "fixed_model_mb": dataclasses.replace(policy, trips=T, online=False).bytes / MB,
               "online_model_mb": dataclasses.replace(policy, trips=T).bytes / MB}
        for mode, name in enumerate(ONLINE_MODES):
            if name != "store-all" or T <= ONLINE_STORE_ALL_LIMIT:
                row[name] = run_child("online", T, mode)
        runs = [row[name] for name in ONLINE_MODES if name in row]
        for run in runs[1:]:  # the same loss and gradients, whatever the policy
            np.testing.assert_allclose(run["grad_norms"], runs[0]["grad_norms"], rtol=1e-3)
        rows.append(row)
    print(f"(d) online checkpoints: while-loop RNN B=32 H=256 float32, planned on {ONLINE_PLANNED_T} trips with "
          f"memory_budget = store-all / {ONLINE_FRACTION} = {plan.budget / MB:.2f} MB")
    print("    " + "\n    ".join(plan.lines()))
    print(f"{'trips':>7} {'store-all MB':>13} {'fixed every-k MB':>17} {'(model)':>8} {'online MB':>10} "
          f"{'(model)':>8} {'online / fixed':>15}")
    for r in rows:
        store_all = f"{r['store-all']['peak_call_mb'] - constant:.1f}" if "store-all" in r else "-"
        fixed, online = (r[name]["peak_call_mb"] - constant for name in ONLINE_MODES[1:])
        print(f"{r['T']:>7} {store_all:>13} {fixed:>17.1f} {r['fixed_model_mb']:>8.1f} {online:>10.1f} "
              f"{r['online_model_mb']:>8.1f} {online / fixed:>15.2f}")
    print(f"peak during the call - C MB, C = the store-all call on 1 trip = {constant:.1f} MB; models: tape bytes\n")
    return {"rows": rows, "constant_mb": constant, "budget_mb": plan.budget / MB, "plan": plan.lines()}


def two_loops_loss(W, x, g):
    """Two loops of 64 trips: four matmul steps a trip on x's rows, one elementwise
    step a trip on g's (tests/ad/test_checkpoint.py plans it too)."""
    def heavy(t, h):
        for _ in range(4):
            h = enp.tanh(h @ W)
        return h

    def light(t, v):
        return enp.sin(v) * 0.9

    h = egad.fori_loop(0, 64, heavy, x)
    v = egad.fori_loop(0, 64, light, g)
    return enp.sum(h * h) + enp.sum(v * v)


def loops_table() -> dict:
    from egad.ad import checkpoint

    rng = np.random.default_rng(2)
    args = ((rng.standard_normal((256, 256)) * 0.06).astype(np.float32),
            rng.standard_normal((32, 256)).astype(np.float32), rng.standard_normal((32, 1280)).astype(np.float32))
    program = egad.trace(two_loops_loss, *args)
    heavy, light = checkpoint.plan(program, (0, 1, 2), 10**12).policies
    budget = heavy.bytes + min(dataclasses.replace(light, every=k).bytes for k in range(1, light.trips))
    plan = checkpoint.plan(program, (0, 1, 2), budget)
    heavy_k = max(k for k in range(1, heavy.trips) if dataclasses.replace(heavy, every=k).bytes + light.bytes <= budget)
    variants = {"plan": plan.apply(program), f"heavy loop every-{heavy_k}": checkpoint.segment(program, 0, heavy_k),
                "store-all": program}
    calls = {name: egad.optimize(p, wrt=(0, 1, 2), rules=(), check=False) for name, p in variants.items()}
    for call in calls.values():
        call(*args)  # build and warm up
    seconds = {name: [] for name in calls}
    for _ in range(15):
        for name, call in calls.items():
            started = time.perf_counter()
            call(*args)
            seconds[name].append(time.perf_counter() - started)
    medians = {name: float(np.median(s)) for name, s in seconds.items()}
    print(f"(e) two loops under one budget ({budget / MB:.1f} MB of tapes; store-all {plan.store_all_bytes / MB:.1f} MB)")
    print("    " + "\n    ".join(plan.lines()))
    for name, median in medians.items():
        print(f"{name:>22} {median * 1e3:>9.1f} ms")
    faster = medians["plan"] < medians[f"heavy loop every-{heavy_k}"]
    print(f"the plan's step is {'the faster' if faster else 'NOT the faster'} of the two within the budget\n")
    return {"budget_mb": budget / MB, "plan": plan.lines(), "step_ms": {k: v * 1e3 for k, v in medians.items()},
            "plan_faster": faster}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(CHILDREN[argv[1]](*map(int, argv[2:]))))
        return 0
    sections = {"forward": forward_table, "lstm": lstm_table, "checkpoint": checkpoint_table,
                "online": online_table, "loops": loops_table}
    chosen = argv or list(sections)
    results = {"machine": platform.platform(), **{name: sections[name]() for name in chosen}}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("memory.json" if chosen == list(sections) else f"memory-{'-'.join(chosen)}.json")
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
