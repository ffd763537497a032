"""The one formatter per quantity (analysis.fmt) that the answer, the terminal report and the generated docs
(scripts/real_results.py) share: each style's form, and the edge cases (NaN, None, inf, p below 0.001, no CI)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drifttool.analysis.fmt import fmt_ci, fmt_mde, fmt_p, fmt_ratio

NAN, INF = float("nan"), math.inf


def test_p_value_in_each_style():
    assert [fmt_p(p) for p in (0.5, 0.034, 0.001, 0.000999, 0.0)] == ["0.500", "0.034", "0.001", "< 0.001", "< 0.001"]
    assert [fmt_p(p, "terminal") for p in (0.5, 0.001, 0.0004)] == ["0.500", "0.001", "<0.001"]
    # words: two decimals from 0.01 up, three below, an inequality below 0.001
    assert [fmt_p(p, "words") for p in (0.5, 0.034, 0.01, 0.0099, 0.001, 0.0002)] == [
        "p 0.50", "p 0.03", "p 0.01", "p 0.010", "p 0.001", "p < 0.001"]
    assert fmt_p(np.float64(0.0123)) == "0.012"


def test_p_value_missing():
    for p in (NAN, None, np.float64("nan")):
        assert fmt_p(p) == fmt_p(p, "terminal") == "-"
        assert fmt_p(p, "words") == "p -"
    with pytest.raises(ValueError, match="style"):
        fmt_p(0.1, "latex")


def test_ci_table_and_terminal():
    assert fmt_ci(1.234, 1.1, 1.4) == "1.23 [1.10, 1.40]"
    assert fmt_ci(1.234, 1.1, 1.4, 1) == "1.2 [1.1, 1.4]"
    assert fmt_ci(0.5, 0.4, 0.6, 3, style="terminal") == "0.500\n[0.400, 0.600]"
    assert fmt_ci(-0.25, -0.5, 0.0) == "-0.25 [-0.50, 0.00]"


def test_ci_missing_interval_or_value():
    # no CI (fewer than 6 groups give none): NaN or None bounds, either one missing
    for lo, hi in ((NAN, NAN), (None, None), (1.0, NAN), (NAN, 2.0), (None, 2.0)):
        assert fmt_ci(1.5, lo, hi) == "1.50 (no CI: < 6 groups)"
        assert fmt_ci(1.5, lo, hi, style="terminal") == "1.50"
    assert fmt_ci(1.5) == "1.50 (no CI: < 6 groups)"
    for v in (NAN, None):
        assert fmt_ci(v, 1.0, 2.0) == fmt_ci(v, 1.0, 2.0, style="terminal") == "-"
    with pytest.raises(ValueError, match="style"):
        fmt_ci(1.0, 0.0, 2.0, style="words")


def test_ci_infinite_values_are_printed_not_hidden():
    assert fmt_ci(INF, 1.0, INF) == "inf [1.00, inf]"
    assert fmt_ci(1.0, -INF, INF, style="terminal") == "1.00\n[-inf, inf]"


def test_ratio():
    assert fmt_ratio(1.234, 1.1, 1.4) == "x1.23 [1.10, 1.40]"
    assert fmt_ratio(0.5, NAN, NAN) == "x0.50 (no CI: < 6 groups)"
    assert fmt_ratio(0.5, 0.25, 0.75, 3) == "x0.500 [0.250, 0.750]"
    assert fmt_ratio(NAN, 1.0, 2.0) == fmt_ratio(None) == "-"
    assert fmt_ratio(INF, 1.0, INF) == "xinf [1.00, inf]"


def test_mde():
    assert fmt_mde(0.12345) == "0.123"
    assert fmt_mde(0.12345, 2) == "0.12"
    assert fmt_mde(INF) == "∞" and fmt_mde(INF, 2, style="terminal") == "inf"  # too few groups to detect anything
    assert fmt_mde(NAN) == fmt_mde(None, style="terminal") == "-"
    assert fmt_mde(np.float64(INF)) == "∞"
    with pytest.raises(ValueError, match="style"):
        fmt_mde(0.1, style="words")
