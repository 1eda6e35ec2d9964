"""The main job (`make demo`, `egad demo`): optimize GNMT-lite `tiny` with egad and
train it on sequence reversal until it gets >= 95% of the tokens right.

1. Trace the model's loss (benchmarks/gnmt_lite.py: a bidirectional LSTM encoder,
   an LSTM decoder with normalized Bahdanau attention, every recurrence an
   `egad.scan` that stays a loop), differentiate it, optimize it in the e-graph
   with the default rule families and build it with TVM for the CPU.
2. Train with Adam (global-norm clipped at 5, as GNMT does), written in numpy, on a fresh random batch each step. The
   program returns the batch's predicted tokens beside the loss (`has_aux`), so
   the accuracy on a batch the model has never seen comes with every step. Once
   its mean over the last `WINDOW` steps reaches the target, the numpy reference
   model (same math, no egad) checks 64 validation sequences every few steps; the
   run stops when they reach it too.
3. Report the accuracy on 64 further test sequences (numpy reference, never used
   to stop), print the optimizer's report summary and write a loss/accuracy plot
   and the extraction visualiser's HTML.

    egad demo                          # defaults: up to 4000 steps, stop at 95%
    egad demo --steps 300 --out /tmp/demo
    egad demo --while-loop             # the smaller demo: an RNN in a data-dependent while_loop

A run takes 2–4 minutes on 2 cores, most of it training (~40 ms per step).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import sys
import time

import numpy as np

import egad
import egad.nn as enn
import egad.numpy as enp
from egad.cli import positive_int
from egad.errors import EgadError, message
from egad.workloads import load_benchmark

CONFIG = "tiny"
LEARNING_RATE = 3e-3
CLIP_NORM = 5.0  # GNMT's global gradient-norm clip: keeps the loss spikes of a fresh-batch run small
WINDOW = 25  # steps averaged for the stopping accuracy: 25 x 96 tokens
HELD_OUT = 64  # sequences in the validation set (stopping) and in the test set (reported)
VALIDATE_EVERY = 10  # steps between validations once the windowed accuracy is at the target
SEED = 0


def loss_and_predictions(params, src, tgt):
    """GNMT-lite's teacher-forced cross-entropy, and its argmax tokens (B, T) as aux."""
    gnmt = load_benchmark("gnmt_lite")
    logits = gnmt.logits(params, src, tgt)
    logp = enn.log_softmax(logits, axis=-1)
    picked = enp.sum(enn.one_hot(enp.transpose(tgt), logp.shape[-1], dtype=logp.dtype) * logp, axis=-1)
    return -enp.mean(picked), enp.transpose(enp.argmax(logits, axis=-1))


class Adam:
    """Adam (Kingma & Ba) on a dict of float32 arrays, in numpy."""

    def __init__(self, params: dict, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.lr, self.betas, self.eps, self.steps = lr, betas, eps, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def update(self, params: dict, grads: dict) -> None:
        self.steps += 1
        b1, b2 = self.betas
        scale = self.lr * np.sqrt(1 - b2 ** self.steps) / (1 - b1 ** self.steps)
        for name, grad in grads.items():
            m, v = self.m[name], self.v[name]
            m *= b1
            m += (1 - b1) * grad
            v *= b2
            v += (1 - b2) * grad * grad
            params[name] = (params[name] - scale * m / (np.sqrt(v) + self.eps)).astype(np.float32)


def clip_by_global_norm(grads: dict, limit: float) -> dict:
    """`grads` scaled down, all by one factor, so that their joint L2 norm is at most `limit`."""
    norm = float(np.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values())))
    if norm <= limit:
        return grads
    return {name: (g * (limit / norm)).astype(g.dtype) for name, g in grads.items()}


class Progress:
    """One line, redrawn in place on a terminal; a line every `every` steps otherwise."""

    def __init__(self, total: int, every: int = 100):
        self.total, self.every, self.tty = total, every, sys.stdout.isatty()

    def show(self, step: int, loss: float, accuracy: float, elapsed: float) -> None:
        done = int(30 * step / self.total)
        line = (f"[{'#' * done}{'.' * (30 - done)}] step {step:5d}/{self.total}  loss {loss:6.3f}  "
                f"accuracy {accuracy:6.1%}  {elapsed:5.0f} s")
        if self.tty:
            print("\r" + line, end="", flush=True)
        elif step % self.every == 0 or step == 1:
            print(line, flush=True)

    def close(self) -> None:
        if self.tty:
            print()


def train(steps: int, target_accuracy: float, lr: float = LEARNING_RATE, seed: int = SEED) -> dict:
    """Optimize the model, then train until the windowed accuracy reaches
    `target_accuracy` or `steps` run out. Returns the history and the model."""
    gnmt = load_benchmark("gnmt_lite")
    config = gnmt.CONFIGS[CONFIG]
    params = gnmt.init_params(config, seed=seed)
    src, tgt = gnmt.make_batch(config, seed=seed)

    started = time.perf_counter()
    program = egad.trace(loss_and_predictions, params, src, tgt)
    step_fn = egad.optimize(program, wrt=(0,), has_aux=True, example_args=(params, src, tgt))
    step_fn(params, src, tgt)  # optimizes, checks and builds for this shape
    compile_seconds = time.perf_counter() - started
    print(f"traced, differentiated, optimized and built in {compile_seconds:.1f} s\n")

    optimizer = Adam(params, lr)
    history = {"step": [], "loss": [], "accuracy": []}
    progress = Progress(steps)
    started = time.perf_counter()
    validated, last_validation = None, -VALIDATE_EVERY
    for step in range(1, steps + 1):
        src, tgt = gnmt.make_batch(config, seed=seed + 1_000_000 + step)  # a batch never seen before
        (loss, predicted), (grads,) = step_fn(params, src, tgt)
        optimizer.update(params, clip_by_global_norm(grads, CLIP_NORM))
        history["step"].append(step)
        history["loss"].append(float(loss))
        history["accuracy"].append(gnmt.token_accuracy(predicted, tgt))
        windowed = float(np.mean(history["accuracy"][-WINDOW:]))
        progress.show(step, float(loss), windowed, time.perf_counter() - started)
        if step >= WINDOW and windowed >= target_accuracy and step - last_validation >= VALIDATE_EVERY:
            last_validation = step
            validated = held_out_accuracy(params, config, "validation", seed)
            if validated >= target_accuracy:
                break
    progress.close()
    return {"params": params, "history": history, "step_fn": step_fn, "config": config, "validated": validated,
            "compile_seconds": compile_seconds, "train_seconds": time.perf_counter() - started}


def held_out_accuracy(params, config, which: str, seed: int = SEED) -> float:
    """Token accuracy of the numpy reference model (no egad) on `HELD_OUT` sequences
    of the "validation" or the "test" set (fixed seeds, apart from every training batch)."""
    gnmt = load_benchmark("gnmt_lite")
    held_out = dataclasses.replace(config, batch=HELD_OUT)
    src, tgt = gnmt.make_batch(held_out, seed=seed + {"validation": 7, "test": 8}[which])
    return gnmt.token_accuracy(gnmt.reference_predict_tokens(params, src, tgt), tgt)


def write_plot(history: dict, path: pathlib.Path) -> pathlib.Path:
    """Loss and windowed accuracy against step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.asarray(history["step"])
    accuracy = np.asarray(history["accuracy"])
    windowed = np.convolve(accuracy, np.ones(WINDOW) / WINDOW, mode="full")[: len(accuracy)]
    windowed /= np.minimum(np.arange(1, len(accuracy) + 1), WINDOW) / WINDOW
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(steps, history["loss"], lw=0.8)
    left.set(xlabel="step", ylabel="cross-entropy", title="GNMT-lite tiny: training loss")
    right.plot(steps, accuracy, lw=0.5, alpha=0.4, label="this step's batch")
    right.plot(steps, windowed, lw=1.5, label=f"mean of the last {WINDOW} steps")
    right.set(xlabel="step", ylabel="token accuracy", ylim=(0, 1), title="accuracy on unseen batches")
    right.legend(loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def report_summary(step_fn) -> list[str]:
    """The optimizer's report without the per-rule table and per-loop paths."""
    keep = ("e-graph:", "predicted cost", "measured on", "fallback:", "checkpointing:")
    lines = step_fn.report().splitlines()
    return [line for line in lines if line.strip().startswith(keep)] + \
        [line for line in lines if line.strip().startswith(("lower and build:", "saturate:"))]


def write_visualisation(step_fn, path: pathlib.Path) -> pathlib.Path | None:
    """The extraction visualiser's HTML, when this egad has one (egad.viz)."""
    try:
        from egad import viz
    except ImportError:
        return None
    return viz.render(step_fn, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egad demo")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _steps(text: str) -> int:
    return positive_int(text, unit="steps")


def _learning_rate(text: str) -> float:
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive learning rate")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


# Each option's default; the parser's defaults are None, so that --while-loop can tell
# an option given (even at its default value) from one left out.
_DEFAULTS = {"steps": 4000, "target-accuracy": 0.95, "lr": LEARNING_RATE, "out": pathlib.Path("demo_out")}


def add_arguments(parser) -> None:
    parser.add_argument("--steps", type=_steps, help="most training steps (default 4000)")
    parser.add_argument("--target-accuracy", type=_finite,
                        help="stop at this token accuracy (default 0.95; above 1, train every step)")
    parser.add_argument("--lr", type=_learning_rate, help=f"Adam's learning rate (default {LEARNING_RATE})")
    parser.add_argument("--out", type=pathlib.Path,
                        help="where the plot and the visualiser's HTML go (default ./demo_out)")
    parser.add_argument("--while-loop", action="store_true",
                        help="run the smaller demo instead: an RNN in a data-dependent while_loop, checked")


def run(args) -> int:
    if args.while_loop:
        from . import demo_while

        given = [f"--{name}" for name in _DEFAULTS if getattr(args, name.replace("-", "_")) is not None]
        if given:  # the smaller demo trains nothing and writes nothing
            raise EgadError(message(f"egad demo --while-loop takes none of {', '.join(given)}",
                                    instead="run egad demo --while-loop alone"))
        return demo_while.main()
    for name, default in _DEFAULTS.items():
        if getattr(args, name.replace("-", "_")) is None:
            setattr(args, name.replace("-", "_"), default)
    if args.out.exists() and not args.out.is_dir():  # before training, not after
        raise EgadError(message(f"egad demo: --out {args.out} is a file, not a folder",
                                instead="give --out a folder (made if missing), e.g. --out demo_out"))
    try:  # made now: a path under a file, or one not writable, fails before training, not after
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise EgadError(message(f"egad demo: cannot make the folder --out {args.out}: {error.strerror or error}",
                                instead="give --out a folder that can be made, e.g. --out demo_out")) from None
    print(f"egad demo: GNMT-lite {CONFIG} learns to reverse sequences\n")
    result = train(args.steps, args.target_accuracy, args.lr)
    history, config = result["history"], result["config"]
    steps = history["step"][-1]
    windowed = float(np.mean(history["accuracy"][-WINDOW:]))
    validated = result["validated"]
    if validated is None:  # the run ended before the windowed accuracy reached the target
        validated = held_out_accuracy(result["params"], config, "validation")
    tested = held_out_accuracy(result["params"], config, "test")
    print(f"\n{steps} steps in {result['train_seconds']:.0f} s "
          f"({result['train_seconds'] / steps * 1e3:.1f} ms per step, after {result['compile_seconds']:.0f} s "
          f"to optimize and build)")
    print(f"token accuracy: {windowed:.1%} on the last {WINDOW} training batches (each unseen before its step), "
          f"{validated:.1%} on {HELD_OUT} validation sequences and {tested:.1%} on {HELD_OUT} test sequences "
          f"(the numpy reference model; test never used to stop)")
    print("\noptimizer report (summary; the full one is step_fn.report()):")
    print("\n".join(report_summary(result["step_fn"])))
    plot = write_plot(history, args.out / "training.png")
    print(f"\nwrote {plot}")
    page = write_visualisation(result["step_fn"], args.out / "viz.html")
    if page is not None:
        print(f"wrote {page} (the extraction visualiser)")
    reached = windowed >= args.target_accuracy and validated >= args.target_accuracy
    print(f"\n{'reached' if reached else 'did NOT reach'} {args.target_accuracy:.0%} token accuracy")
    return 0 if reached else 1


def register(commands) -> None:
    demo = commands.add_parser("demo", help="the main job: optimize GNMT-lite and train it to reverse sequences")
    add_arguments(demo)
    demo.set_defaults(run=run)


if __name__ == "__main__":
    raise SystemExit(main())
