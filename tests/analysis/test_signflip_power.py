"""The printed MDE belongs to the test that is run: at the MDE, the sign-flip test itself (stats.sign_flip_p's
patterns: exact up to 16 groups, 20,000 random ones above) rejects about 80 % of Normal samples. The t-test's MDE
gave 0.61 power at 6 groups (the sign-flip test rejects there only when all 6 signs agree)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drifttool.analysis import stats


def power_at(n: int, effect: float, draws: int, seed: int) -> float:
    """Share of Normal(effect, 1) samples of n groups whose sign-flip p (the tool's own patterns) is < 0.05."""
    x = np.random.default_rng(seed).standard_normal((draws, n)) + effect
    s = stats._signs(n)
    hits = 0
    for i in range(0, draws, 500):
        xb = x[i:i + 500]
        obs = np.abs(xb.sum(1))
        p = (np.abs(s @ xb.T) >= obs[None, :] - 1e-12 * np.maximum(1.0, obs[None, :])).mean(0)
        hits += int((p < stats.ALPHA).sum())
    return hits / draws


@pytest.mark.parametrize("n,draws", [(6, 20000), (8, 20000), (12, 20000), (24, 4000), (40, 4000)])
def test_power_at_the_printed_mde_is_80_percent(n, draws):
    effect = stats.mde(1.0, n)
    pw = power_at(n, effect, draws, seed=2026 + n)  # other samples than the table's
    assert 0.78 <= pw <= 0.82, (n, effect, pw)


def test_the_t_test_mde_was_underpowered_at_6_groups():
    t_mde = (stats._t(0.975, 5) + stats._t(0.8, 5)) / math.sqrt(6)
    assert power_at(6, t_mde, 20000, seed=1) < 0.7  # 0.61: why the table exists
    assert stats.mde(1.0, 6) == pytest.approx(1.79, abs=0.01)


def test_one_sample_agrees_with_sign_flip_p():
    x = np.random.default_rng(3).standard_normal(8) + 1.0
    s = stats._signs(8)
    p = float((np.abs(s @ x) >= abs(x.sum()) - 1e-12 * max(1.0, abs(x.sum()))).mean())
    assert p == stats.sign_flip_p(x)
