"""How a statistic is written: one function per quantity (p value, value with its CI, ratio with its CI, MDE), each
with the few styles its readers need, so that the terminal report, the answer in words and the generated docs
(scripts/real_results.py) print one quantity one way.

Styles: "table" (markdown tables and the docs' sentences), "terminal" (rich tables: ASCII, compact) and, for p,
"words" (the answer's sentences: 'p 0.03'). A missing number (None or NaN) is '-' in every style."""

from __future__ import annotations

import math

NO_CI = " (no CI: < 6 groups)"  # a CI needs >= 6 groups (analysis.metrics.MIN_CLUSTERS); fewer give none
P_FLOOR = 0.001  # p below this is written as an inequality


def _missing(v) -> bool:
    return v is None or v != v


def fmt_p(p: float | None, style: str = "table") -> str:
    """A p value. table: '0.034', '< 0.001'; terminal: '0.034', '<0.001'; words: 'p 0.03' (two decimals from 0.01,
    three below), 'p 0.003', 'p < 0.001'. NaN or None: '-' ('p -' in words)."""
    if style not in ("table", "terminal", "words"):
        raise ValueError(f"unknown p style {style!r} (table, terminal, words)")
    if _missing(p):
        return "p -" if style == "words" else "-"
    if style == "words":
        return "p < 0.001" if p < P_FLOOR else f"p {p:.3f}" if p < 0.01 else f"p {p:.2f}"
    if p < P_FLOOR:
        return "<0.001" if style == "terminal" else "< 0.001"
    return f"{p:.3f}"


def fmt_ci(v: float | None, lo: float | None = None, hi: float | None = None, d: int = 2, style: str = "table") -> str:
    """A value with its 95% CI. table: '1.23 [1.10, 1.40]', without a CI '1.23 (no CI: < 6 groups)'; terminal: the
    interval on a second line ('1.230\\n[1.100, 1.400]'), without a CI the value alone. A missing value: '-'."""
    if style not in ("table", "terminal"):
        raise ValueError(f"unknown CI style {style!r} (table, terminal)")
    if _missing(v):
        return "-"
    has_ci = not (_missing(lo) or _missing(hi))
    if style == "terminal":
        return f"{v:.{d}f}" + (f"\n[{lo:.{d}f}, {hi:.{d}f}]" if has_ci else "")
    return f"{v:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]" if has_ci else f"{v:.{d}f}{NO_CI}"


def fmt_ratio(v: float | None, lo: float | None = None, hi: float | None = None, d: int = 2) -> str:
    """A ratio (a factor) with its 95% CI: 'x1.23 [1.10, 1.40]', without a CI 'x1.23 (no CI: < 6 groups)';
    a missing ratio: '-'."""
    return "-" if _missing(v) else "x" + fmt_ci(v, lo, hi, d)


def fmt_mde(v: float | None, d: int = 3, style: str = "table") -> str:
    """A minimum detectable effect: '0.123'; infinite (too few groups for any test to detect anything) '∞' in
    tables, 'inf' in the terminal; missing: '-'."""
    if style not in ("table", "terminal"):
        raise ValueError(f"unknown MDE style {style!r} (table, terminal)")
    if _missing(v):
        return "-"
    if v == math.inf:
        return "∞" if style == "table" else "inf"
    return f"{v:.{d}f}"
