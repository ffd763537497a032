"""The 2x2 ablation's contrasts: on per-conversation stats built with known effects, the main effects, the
interaction and the total are recovered, per TTT step, as paired means over conversations."""

from __future__ import annotations

import numpy as np
import pytest

from training.ablation_report import VARIANTS, effects, pooled


def test_contrasts_recover_planted_effects():
    rng = np.random.default_rng(0)
    n, steps = 40, 3
    base = rng.uniform(0.3, 0.6, (n, steps))
    fc, no, inter = 0.02, 0.05, 0.01  # planted: per-conversation rates shift by these
    rate = {"eagle3": base, "fc_norm-only": base + fc, "norm_output-only": base + no, "eagle3.1": base + fc + no + inter}
    count = rng.integers(500, 2000, (n, steps)).astype(float)
    per = {v: np.stack([np.zeros((n, steps)), rate[v] * count, count, np.ones((n, steps)) * count], -1)
           for v in VARIANTS}
    eff = effects(per)
    for k in range(steps):
        np.testing.assert_allclose(eff["fc_norm (main effect)"][k]["mean"], fc + inter / 2, atol=1e-12)
        np.testing.assert_allclose(eff["norm_output (main effect)"][k]["mean"], no + inter / 2, atol=1e-12)
        np.testing.assert_allclose(eff["interaction"][k]["mean"], inter, atol=1e-12)
        np.testing.assert_allclose(eff["both (EAGLE-3.1 - EAGLE-3)"][k]["mean"], fc + no + inter, atol=1e-12)
        assert eff["interaction"][k]["n"] == n
    assert pooled(per)["eagle3"]["feedback_rms_per_step"] == [1.0] * steps


def test_replicate_runs_average_per_conversation():
    """Two runs with different planted effects: the over-runs contrast is their mean, still paired over the same
    conversations (n = conversations, not conversations x runs)."""
    from training.ablation_report import over_runs

    rng = np.random.default_rng(1)
    n, steps = 30, 3
    count = rng.integers(500, 2000, (n, steps)).astype(float)

    def run(fc: float, no: float) -> dict[str, np.ndarray]:
        base = rng.uniform(0.3, 0.6, (n, steps))
        rate = {"eagle3": base, "fc_norm-only": base + fc, "norm_output-only": base + no,
                "eagle3.1": base + fc + no}
        return {v: np.stack([np.zeros((n, steps)), rate[v] * count, count, count], -1) for v in VARIANTS}

    both = over_runs([run(0.02, 0.04), run(0.00, 0.02)])
    for k in range(steps):
        np.testing.assert_allclose(both["fc_norm (main effect)"][k]["mean"], 0.01, atol=1e-12)
        np.testing.assert_allclose(both["norm_output (main effect)"][k]["mean"], 0.03, atol=1e-12)
        np.testing.assert_allclose(both["interaction"][k]["mean"], 0.0, atol=1e-12)
        assert both["both (EAGLE-3.1 - EAGLE-3)"][k]["n"] == n


def test_a_step_budget_sets_the_schedule_whatever_the_speed():
    """--steps: the run stops at that step and its learning rate depends on the step alone (a replicate on a
    slower or shared machine follows the same schedule); without it, the wall-clock budget as before."""
    from training.train_real import RealArgs, lr_at, running

    a = RealArgs(max_steps=100, lr=1e-3, warmup_steps=10, min_lr_frac=0.1, minutes=1.0)
    assert lr_at(a, 50, elapsed=5.0) == lr_at(a, 50, elapsed=5000.0)
    assert lr_at(a, 100, 0.0) == pytest.approx(1e-4) and lr_at(a, 9, 0.0) == pytest.approx(1e-3)
    assert running(a, {"step": 99, "elapsed": 1e9}) and not running(a, {"step": 100, "elapsed": 0.0})
    t = RealArgs(lr=1e-3, warmup_steps=10, min_lr_frac=0.1, minutes=1.0)
    assert lr_at(t, 50, 5.0) != lr_at(t, 50, 50.0) and not running(t, {"step": 0, "elapsed": 60.0})
