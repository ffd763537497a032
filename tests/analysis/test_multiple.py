"""Holm's step-down correction (analysis.multiple), which the docs' multiplicity sentence counts with: by hand, NaN
p values (no test possible: never rejected, and they block no test behind them), and statsmodels' implementation
where it happens to be installed (it is no dependency)."""

from __future__ import annotations

import numpy as np
import pytest

from drifttool.analysis.multiple import holm_rejected


def test_holm_step_down_by_hand():
    """Holm over all m tests, stopping at the first p above alpha / (m - i)."""
    # m = 4: 0.005 <= 0.0125, 0.01 <= 0.0167, then 0.03 > 0.025 stops (0.04 is not reached)
    assert holm_rejected([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm_rejected([0.03, 0.03]) == [False, False]  # 0.03 > 0.05 / 2
    assert holm_rejected([0.02, 0.02]) == [True, True]  # 0.02 <= 0.05 / 2, then <= 0.05 / 1
    # m = 5 at alpha 0.10: 0.001 <= 0.02, 0.02 <= 0.025, 0.03 <= 0.0333, then 0.06 > 0.05 stops; 0.07 would pass
    # its own bound (0.10 / 1) but comes after the stop, so it is not rejected either
    assert holm_rejected([0.06, 0.001, 0.03, 0.02, 0.07], alpha=0.10) == [False, True, True, True, False]
    assert holm_rejected([0.05]) == [True]  # m = 1: the plain test, p <= alpha
    assert holm_rejected([]) == []


def test_nan_p_values_do_not_block_holm():
    """A NaN p sorted first once and stopped the walk: [nan, 0.001] rejected neither."""
    nan = float("nan")
    assert holm_rejected([nan, 0.001]) == [False, True]
    assert holm_rejected([0.2, nan, 0.0001, 0.0002]) == [False, False, True, True]
    assert holm_rejected([0.001, 0.2, nan]) == [True, False, False]
    assert holm_rejected([0.01, 0.04]) == [True, True]
    assert holm_rejected([0.03, 0.04]) == [False, False]
    # NaN still counts in m: 0.03 > 0.05 / 2 here, though it would pass alone
    assert holm_rejected([0.03, nan]) == [False, False] and holm_rejected([0.03]) == [True]


def test_holm_matches_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(0)
    for m in (1, 2, 5, 20, 60):
        for _ in range(50):
            ps = rng.uniform(0, 0.1, m) ** rng.uniform(0.5, 3)
            for alpha in (0.05, 0.1):
                want = multitest.multipletests(ps, alpha=alpha, method="holm")[0].tolist()
                assert holm_rejected(ps.tolist(), alpha) == want
