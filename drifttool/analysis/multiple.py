"""Multiple testing: Holm's step-down correction over a family of tests (the docs' "under Holm's correction"
sentence counts the depth trends it keeps)."""

from __future__ import annotations

from collections.abc import Sequence

from .stats import ALPHA


def holm_rejected(ps: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down over all m tests: per test (in the order given), whether it stays significant at
    family-wise error rate `alpha`.

    The p values are walked from the smallest up; the i-th smallest (i = 0, 1, ...) is rejected while
    p <= alpha / (m - i), and the walk stops at the first that is not (every larger p is kept). A NaN p (no test
    possible) is never rejected and sorts last, so it blocks no test behind it; it still counts in m (the family is
    every test listed). Ties keep their given order. Example, alpha 0.05, m = 4: [0.01, 0.04, 0.03, 0.005] ->
    0.005 <= 0.0125, 0.01 <= 0.0167, 0.03 > 0.025 stops: [True, False, False, True]."""
    m = len(ps)
    out = [False] * m
    for i, j in enumerate(sorted(range(m), key=lambda j: (ps[j] != ps[j], ps[j] if ps[j] == ps[j] else 0.0))):
        if not ps[j] <= alpha / (m - i):  # NaN p: never
            break
        out[j] = True
    return out


def holm_adjusted(ps: Sequence[float]) -> list[float]:
    """Holm-adjusted p values (in the order given): the i-th smallest becomes max over j <= i of (m - j) p_(j),
    capped at 1, so `adjusted < alpha` is exactly `holm_rejected` at that alpha. NaN stays NaN (and counts in m)."""
    m = len(ps)
    out = [float("nan")] * m
    run = 0.0
    for i, j in enumerate(sorted(range(m), key=lambda j: (ps[j] != ps[j], ps[j] if ps[j] == ps[j] else 0.0))):
        if ps[j] != ps[j]:
            continue
        run = max(run, min(1.0, (m - i) * ps[j]))
        out[j] = run
    return out
