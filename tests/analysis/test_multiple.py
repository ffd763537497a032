"""Holm's step-down in the README generator: a NaN p (no test possible) is never rejected and does not block the
tests behind it (it sorted first and stopped the walk: [nan, 0.001] rejected neither)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from real_results import holm_rejected  # noqa: E402


def test_nan_p_values_do_not_block_holm():
    nan = float("nan")
    assert holm_rejected([nan, 0.001]) == [False, True]
    assert holm_rejected([0.2, nan, 0.0001, 0.0002]) == [False, False, True, True]
    assert holm_rejected([0.01, 0.04]) == [True, True]
    assert holm_rejected([0.03, 0.04]) == [False, False]
