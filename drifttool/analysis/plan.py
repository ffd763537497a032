"""`drifttool plan`: from a pilot trace, how many groups (source documents) a study needs to detect an effect.

A depth trend (`sink_mass@depth8-depth1`) uses the SD over groups of each group's change between the two depths;
`acceptance_length` uses the SD over groups of the paired acceptance-length difference of each drafter against
the EAGLE-3 one. The answer is the smallest n whose MDE at 80% power, two-sided alpha 0.05 (paired t
approximation, and at least the 6 groups a sign-flip test needs to reach p < 0.05) is at most the effect."""

from __future__ import annotations

import re
from typing import Any

from ..errors import DriftError
from ..trace.reader import TraceData
from .compare import DEPTH_METRICS, Comparison
from .stats import change_between, groups_needed, mde, paired

_TREND = re.compile(r"^\s*([a-z_]+)\s*@\s*depth\s*(\d+)\s*-\s*depth\s*(\d+)\s*$")
TREND_OK = DEPTH_METRICS


def plan_study(traces: list[TraceData], metric: str, effect: float, population: str = "all") -> list[dict[str, Any]]:
    """Per series (trend) or per series against the baseline (acceptance_length): the pilot's SD, n groups, MDE
    now, and the groups needed to detect `effect` (in the metric's units)."""
    if not effect or effect != effect or effect in (float("inf"), float("-inf")):
        raise DriftError(f"--effect {effect!r}: expected a non-zero finite size in the metric's units")
    cmp = Comparison.of(traces)
    rows = []
    if metric in ("acceptance_length", "mean_acceptance_length", "al"):
        ad = cmp.acceptance_differences()
        if ad.empty:
            raise DriftError("plan acceptance_length: needs two or more drafters (the differences are paired "
                             f"against {cmp.baseline})")
        for r in ad.itertuples():
            rows.append({"series": r.series, "against": r.baseline, "metric": "acceptance_length", "sd": r.sd,
                         "n_groups": int(r.n_groups), "mde_now": r.mde, "effect": abs(effect),
                         "groups_needed": groups_needed(r.sd, effect)})
        return rows
    m = _TREND.match(metric)
    if not m or m.group(1) not in TREND_OK:
        raise DriftError(f"--metric {metric!r}: expected acceptance_length or a depth trend METRIC@depthN-depthM "
                         f"with METRIC one of {', '.join(TREND_OK)} (e.g. sink_mass@depth8-depth1)")
    name, d_to, d_from = m.group(1), int(m.group(2)), int(m.group(3))
    if max(d_to, d_from) > cmp.depth or min(d_to, d_from) < 1 or d_to == d_from:
        raise DriftError(f"--metric {metric!r}: depths must differ and lie in 1..{cmp.depth}")
    pop = cmp.population(population)
    for s in cmp.series:
        st = change_between(pop[pop.series == s.label], name, d_from, d_to)
        rows.append({"series": s.label, "metric": metric, "population": population, "sd": st["sd"],
                     "n_groups": int(st["n"]), "change_now": st["mean"], "mde_now": mde(st["sd"], int(st["n"])),
                     "effect": abs(effect), "groups_needed": groups_needed(st["sd"], effect)})
    return rows


__all__ = ["plan_study", "paired"]
