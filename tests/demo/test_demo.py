"""`egad demo`, the main job: its numpy pieces against closed forms, and a short run
end to end (optimize, build, a few training steps, the plot). The full run to 95%
accuracy is `make demo` (2–4 minutes), not a unit test."""
from __future__ import annotations

import numpy as np

from egad import cli, demo


def test_adam_first_step_moves_each_entry_by_the_learning_rate_against_its_gradient():
    params = {"w": np.array([1.0, -2.0, 3.0], np.float32)}
    grads = {"w": np.array([0.5, -4.0, 1e-3], np.float32)}
    demo.Adam(params, lr=0.1).update(params, grads)
    # m_hat = g, v_hat = g^2 on the first step: the update is lr * g / (|g| + eps)
    np.testing.assert_allclose(params["w"], [0.9, -1.9, 2.9], rtol=1e-4)


def test_adam_follows_its_recurrence_over_several_steps():
    rng = np.random.default_rng(0)
    w = rng.standard_normal(5).astype(np.float32)
    params, adam = {"w": w.copy()}, demo.Adam({"w": w}, lr=0.01)
    m = v = np.zeros(5)
    expected = w.astype(np.float64)
    for t in range(1, 6):
        g = rng.standard_normal(5).astype(np.float32)
        adam.update(params, {"w": g})
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g.astype(np.float64) ** 2
        expected = expected - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(params["w"], expected, rtol=1e-4, atol=1e-6)


def test_clipping_scales_every_gradient_by_one_factor_only_above_the_limit():
    grads = {"a": np.array([3.0, 0.0], np.float32), "b": np.array([4.0], np.float32)}  # norm 5
    assert demo.clip_by_global_norm(grads, 10.0) is grads
    clipped = demo.clip_by_global_norm(grads, 1.0)
    np.testing.assert_allclose(clipped["a"], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["b"], [0.8], rtol=1e-6)


def test_a_short_demo_run_optimizes_trains_and_writes_its_plot(tmp_path, capsys):
    code = cli.main(["demo", "--steps", "3", "--target-accuracy", "0", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "optimized and built" in out and "3 steps" in out and "e-graph:" in out
    assert "fallback:" in out and "reached 0% token accuracy" in out
    plot = tmp_path / "training.png"
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_demo_that_misses_its_target_exits_non_zero(tmp_path, capsys):
    assert cli.main(["demo", "--steps", "2", "--target-accuracy", "1.01", "--out", str(tmp_path)]) == 1
    assert "did NOT reach" in capsys.readouterr().out


def test_demo_options_that_cannot_work_stop_it_before_training(tmp_path, capsys):
    from egad import cli

    try:
        cli.main(["demo", "--steps", "0"])
    except SystemExit as stop:
        assert stop.code == 2
    assert "0 is not a positive number of steps" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    assert cli.main(["demo", "--steps", "1", "--out", str(tmp_path / "a-file")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    # a folder under a file: refused before training (it raised NotADirectoryError after). Found by fuzzing.
    assert cli.main(["demo", "--steps", "1", "--out", str(tmp_path / "a-file" / "sub")]) == 2
    assert "cannot make the folder --out" in capsys.readouterr().err
    assert cli.main(["demo", "--while-loop", "--steps", "5"]) == 2  # the smaller demo trains nothing
    assert "takes none of --steps" in capsys.readouterr().err
    # given at their defaults they were ignored; a NaN or negative learning rate trained. Found by fuzzing.
    assert cli.main(["demo", "--while-loop", "--steps", "4000", "--out", "demo_out"]) == 2
    assert "takes none of --steps, --out" in capsys.readouterr().err
    for option, value, says in [("--lr", "-1", "-1 is not a positive learning rate"),
                                ("--lr", "nan", "nan is not a finite number"),
                                ("--target-accuracy", "nan", "nan is not a finite number")]:
        try:
            cli.main(["demo", option, value])
        except SystemExit as stop:
            assert stop.code == 2
        assert says in capsys.readouterr().err
