"""The while_loops, moe_loop and nested workloads of the suite (issue 6): for every
case, egad's interpreter against the numpy reference, egad's gradient against
central differences (float64, through the while loops, the routing and the
branches), the compiled build against the interpreter (slow), and each peer's
loss (JAX, PyTorch; skipped when the `peers` extra is missing) against the same
numbers — the suite compares gradients across systems, so the peers' gradients
are checked here against egad's too.

Small configs (`SMALL`) keep the entry-by-entry gradient checks and the builds
cheap; the full-size cases are checked by value and by directional derivatives.
"""
from __future__ import annotations

import numpy as np
import pytest

import egad
from benchmarks import moe_loop, nested, while_loops
from tests.ad.gradcheck import EPS, ROUNDING_ULPS, assert_gradients_match, same_control_path, to_float64

MODULES = {module.NAME: module for module in (while_loops, moe_loop, nested)}
FULL = [(name, case) for name, module in MODULES.items() for case in module.CASES]

_MOE_SMALL = {"steps": 5, "batch": 6, "inputs": 3, "hidden": 4, "experts": 4, "outputs": 2, "balance": 0.01}
SMALL = {
    ("while_loops", "newton"): {"kind": "newton", "batch": 3, "unknowns": 2, "inputs": 3, "tol": 1e-5,
                                "max_iters": 10},
    ("while_loops", "euler"): {"kind": "euler", "batch": 3, "hidden": 4, "inputs": 3, "outputs": 2, "dt": 0.1,
                               "radius": 1.0, "max_steps": 24},
    ("while_loops", "rnn_lengths"): {"kind": "rnn_lengths", "vocab": 7, "embed": 3, "hidden": 4, "batch": 3,
                                     "max_len": 5},
    ("moe_loop", "dense"): {"kind": "dense", **_MOE_SMALL},
    ("moe_loop", "gather"): {"kind": "gather", **_MOE_SMALL},
    ("nested", "deep_transition"): {"kind": "deep_transition", "steps": 4, "layers": 3, "batch": 3, "inputs": 3,
                                    "hidden": 4, "outputs": 2, "clip": 1.5},
}


def _ids(keys):
    return [f"{name}-{case}" for name, case in keys]


def _reference_float64(module, case, args):
    return float(module.reference_loss(case)(*to_float64(args)))


# --- the module convention -----------------------------------------------------------------------


@pytest.mark.parametrize("name, case", FULL, ids=_ids(FULL))
def test_arguments_follow_the_convention(name, case):
    module = MODULES[name]
    args = module.arguments(case)
    again = module.arguments(case, seed=0)
    other = module.arguments(case, seed=1)
    positions = module.wrt(case)
    assert positions == module.WRT[case] and len(set(positions)) == len(positions)
    for k, arg in enumerate(args):
        assert isinstance(arg, np.ndarray) and arg.dtype in (np.float32, np.int64), (k, arg.dtype)
        assert np.array_equal(arg, again[k])  # the seed decides everything
        if k in positions:
            assert arg.dtype == np.float32
    assert any(not np.array_equal(a, b) for a, b in zip(args, other))


@pytest.mark.parametrize("name, case", sorted(SMALL), ids=_ids(sorted(SMALL)))
def test_small_configs_exercise_the_control_flow(name, case):
    """The small configs the gradient checks use still iterate, route and branch."""
    module, config = MODULES[name], SMALL[(name, case)]
    args = module.arguments(config)
    if name == "nested":
        clipped, plain = nested.branch_counts(config, *args)
        assert clipped > 0 and plain > 0
    elif name == "moe_loop":
        Wx, Wh, Wr, *_, xs, _ys = args
        h, used = np.zeros((xs.shape[1], Wh.shape[0]), np.float32), set()
        for x in xs:
            h = np.tanh(x @ Wx + h @ Wh)
            used |= set(np.argmax(h @ Wr, axis=-1).tolist())
        assert len(used) >= 3, f"tokens reach only experts {sorted(used)}"
    elif case == "rnn_lengths":
        lengths = args[-1]
        assert lengths.min() < lengths.max(), "every sequence has the same length: nothing is masked"


def test_unknown_cases_are_refused_by_name():
    for module in MODULES.values():
        with pytest.raises(ValueError, match="unknown"):
            module.loss("no-such-case")
        with pytest.raises(ValueError, match="kind"):
            module.arguments({"batch": 3})


# --- the value ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, case", FULL, ids=_ids(FULL))
def test_interpreted_loss_matches_the_numpy_reference(name, case):
    module = MODULES[name]
    args = module.arguments(case)
    program = egad.trace(module.loss(case), *args)
    value = egad.interpret(program, *args)
    want = module.reference_loss(case)(*args)
    assert np.asarray(value).dtype == np.float32 and np.asarray(want).dtype == np.float32
    np.testing.assert_allclose(value, want, rtol=1e-5)
    # float64 arguments: the reference the suite checks every system's gradient against
    wide = to_float64(args)
    np.testing.assert_allclose(egad.interpret(egad.trace(module.loss(case), *wide), *wide),
                               _reference_float64(module, case, args), rtol=1e-10)
    # the same function on numpy values runs eagerly
    np.testing.assert_allclose(module.loss(case)(*args), want, rtol=1e-5)


# --- the gradient --------------------------------------------------------------------------------


@pytest.mark.parametrize("name, case", sorted(SMALL), ids=_ids(sorted(SMALL)))
def test_gradient_matches_central_differences_entry_by_entry(name, case):
    module, config = MODULES[name], SMALL[(name, case)]
    args = to_float64(module.arguments(config))
    check = assert_gradients_match(module.loss(config), args, wrt=module.wrt(config), context=f"{name} {case}")
    assert check.compared >= 0.9 * sum(args[k].size for k in module.wrt(config))


@pytest.mark.parametrize("name, case", FULL, ids=_ids(FULL))
def test_full_size_gradient_matches_central_differences_in_random_directions(name, case):
    module = MODULES[name]
    args = to_float64(module.arguments(case))
    positions = module.wrt(case)
    primal = egad.trace(module.loss(case), *args)
    value, grads = egad.interpret(egad.value_and_grad(primal, wrt=positions), *args)
    rng = np.random.default_rng(3)
    for _ in range(2):
        direction = {k: rng.standard_normal(args[k].shape) for k in positions}

        def along(t, direction=direction):
            return tuple(a + t * direction[k] if k in direction else a for k, a in enumerate(args))

        assert same_control_path(primal, along(EPS), along(-EPS)), "the step changes a trip count or a branch"
        numerical = (egad.interpret(primal, *along(EPS)) - egad.interpret(primal, *along(-EPS))) / (2 * EPS)
        ad = sum(float(np.sum(g * direction[k])) for g, k in zip(grads, positions))
        noise = ROUNDING_ULPS * np.finfo(np.float64).eps * max(1.0, abs(float(value))) / EPS
        assert abs(ad - numerical) <= 1e-6 * abs(numerical) + noise, f"AD {ad!r}, central differences {numerical!r}"


# --- compiled --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name, case", sorted(SMALL), ids=_ids(sorted(SMALL)))
def test_compiled_value_and_gradient_match_the_interpreter(name, case):
    """egad.optimize with the default rules (e-graph, then TVM llvm): 6-25 s a case
    once TVM is loaded, ~25 s for the first build of a process."""
    module, config = MODULES[name], SMALL[(name, case)]
    args = module.arguments(config)
    positions = module.wrt(config)
    program = egad.trace(module.loss(config), *args)
    value, grads = egad.optimize(program, wrt=positions, target="llvm")(*args)
    want_value, want_grads = egad.interpret(egad.value_and_grad(program, wrt=positions), *args)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for k, g, w in zip(positions, grads, want_grads):
        assert g.shape == w.shape and g.dtype == w.dtype == np.float32, k
        assert np.linalg.norm(g - w) <= 1e-4 * np.linalg.norm(w) + 1e-7, f"argument {k}"


# --- the peers -------------------------------------------------------------------------------------


def _egad_gradients(module, config, args):
    program = egad.trace(module.loss(config), *args)
    return egad.interpret(egad.value_and_grad(program, wrt=module.wrt(config)), *args)


def _assert_same_gradients(got, want, context):
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g, np.float64)
        assert g.shape == w.shape, f"{context}: gradient {k} has shape {g.shape}, want {w.shape}"
        assert np.linalg.norm(g - w) <= 1e-4 * np.linalg.norm(w) + 1e-7, f"{context}: gradient {k}"


@pytest.mark.parametrize("name, case", sorted(SMALL), ids=_ids(sorted(SMALL)))
def test_jax_losses_compute_the_same_value_and_gradient(name, case):
    jax = pytest.importorskip("jax")
    module, config = MODULES[name], SMALL[(name, case)]
    args = module.arguments(config)
    positions = module.wrt(config)
    want_value, want_grads = _egad_gradients(module, config, args)
    unrolled = jax.jit(jax.value_and_grad(module.jax_unrolled_loss(config), argnums=positions))
    value, grads = unrolled(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    _assert_same_gradients(grads, want_grads, f"jax unrolled {name} {case}")
    structured = jax.jit(jax.value_and_grad(module.jax_loss(config), argnums=positions))
    if name == "while_loops":
        np.testing.assert_allclose(jax.jit(module.jax_loss(config))(*args), want_value, rtol=1e-5)
        # JAX's reverse mode refuses lax.while_loop: the suite records this error
        with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for lax.while_loop"):
            structured(*args)
    else:
        value, grads = structured(*args)
        np.testing.assert_allclose(value, want_value, rtol=1e-5)
        _assert_same_gradients(grads, want_grads, f"jax {name} {case}")


@pytest.mark.parametrize("name, case", sorted(SMALL), ids=_ids(sorted(SMALL)))
def test_torch_loss_computes_the_same_value_and_gradient(name, case):
    torch = pytest.importorskip("torch")
    module, config = MODULES[name], SMALL[(name, case)]
    args = module.arguments(config)
    positions = module.wrt(config)
    want_value, want_grads = _egad_gradients(module, config, args)
    tensors = [torch.from_numpy(np.array(a)) for a in args]
    for k in positions:
        tensors[k].requires_grad_(True)
    value = module.torch_loss(config)(*tensors)
    value.backward()
    assert value.dtype == torch.float32
    np.testing.assert_allclose(value.item(), want_value, rtol=1e-5)
    _assert_same_gradients([tensors[k].grad.numpy() for k in positions], want_grads, f"torch {name} {case}")
