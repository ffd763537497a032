"""Seeds as the unit of an architecture claim. One trained checkpoint per variant supports statements about those
checkpoints only: a second seed of the same recipe moves acceptance by about as much as the variants differ. Given
a panel of traces, one per seed, each holding that seed's EAGLE-3 and EAGLE-3.1 drafters (named `<variant>-s<seed>`
or one variant per trace), this module states each quantity per seed and over seeds:

- per seed s and group g: d_sg = (quantity of EAGLE-3.1) - (quantity of EAGLE-3); ratio quantities are compared as
  log ratios (a factor), acceptance length as a difference;
- per seed: m_s = the mean of d_sg over the groups;
- over seeds: the mean of the S per-seed means with a **t-interval over seed means** (S - 1 degrees of freedom: the
  seed is the replicate, so the interval is as wide as seed-to-seed variation says; a percentile bootstrap over 3
  seeds is 2.5x narrower than that), and a **sign test over seeds** (two-sided binomial p of the per-seed signs).
  A sign test over S seeds cannot reach p < 0.05 below 6 seeds (its smallest two-sided p is 2 / 2^S), so an
  architecture verdict needs >= 6 seeds, the sign test's p < 0.05 and the t-interval excluding 0; below that the
  sentence says so and gives the seeds the observed effect would need at 80% power. With enough seeds, the
  **minimum detectable effect** (`mde`) is the difference this rule finds in 80% of panels of S seeds with the
  panel's seed-to-seed spread (normal seed means; the sign test dominates it: with 8 seeds every seed must agree).
Quantities: acceptance length per group (1 + accepted / rounds), fed-back RMS growth (rms_in at depth K / at depth 1
over the same rounds), the recency-matched ratio at depth K (analysis/verdict.py) and sink retention (sink mass at
depth K / at depth 1), each per group as a ratio of sums."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..styles import drafter_kind, split_label
from ..trace.metric_table import acceptance_length
from .compare import Comparison
from .stats import ALPHA, _t, groups_needed
from .verdict import paired_sums

SEED = re.compile(r"-s(\d+)$")
MIN_SEEDS = 6  # the sign test's floor: 2 / 2^6 = 0.031
QUANTITIES = {"acceptance_length": "acceptance length (tokens per round)",
              "rms_growth": "fed-back RMS growth, depth K / depth 1 (factor)",
              "recency_ratio": "recency-matched ratio at depth K (factor)",
              "sink_retention": "sink retention, depth K / depth 1 (factor)"}
RATIO_SUMS = {"rms_growth": (("rms_in", "K"), ("rms_in", 1)), "recency_ratio": (("self_mass", "K"), ("matched_mass", "K")),
              "sink_retention": (("sink_mass", "K"), ("sink_mass", 1))}


def _seed_of(label: str) -> int | None:
    m = SEED.search(split_label(label)[1])
    return int(m.group(1)) if m else None


def per_group(cmp: Comparison) -> pd.DataFrame:
    """One row per seed x variant x group: acceptance length and, for the ratio quantities, the log of the group's
    ratio of sums (variant: eagle3 / eagle3.1)."""
    k = cmp.depth
    r = cmp.rounds
    g = r.groupby(["series", "group"], observed=True)["accepted"]
    parts = [acceptance_length(g.sum(), g.count()).rename("acceptance_length")]
    for q, (num, den) in RATIO_SUMS.items():
        rows = []
        for s in cmp.series:
            d = cmp.depths[cmp.depths.series == s.label]
            ps = paired_sums(d, (num[0], k if num[1] == "K" else num[1]), (den[0], k if den[1] == "K" else den[1]))
            ok = (ps["num"] > 0) & (ps["den"] > 0)
            rows.append(pd.Series(np.log(ps.loc[ok, "num"] / ps.loc[ok, "den"]).to_numpy(),
                                  index=pd.MultiIndex.from_arrays([[s.label] * int(ok.sum()), ps.loc[ok, "group"]],
                                                                  names=["series", "group"]), name=q))
        parts.append(pd.concat(rows) if rows else pd.Series(name=q, dtype=float))
    out = pd.concat(parts, axis=1).reset_index()
    out["seed"] = out["series"].map(_seed_of)
    out["variant"] = out["series"].map(drafter_kind)
    return out[out["variant"].isin(["eagle3", "eagle3.1"]) & out["seed"].notna()]


def differences(rows: pd.DataFrame) -> pd.DataFrame:
    """Per seed x group: EAGLE-3.1 minus EAGLE-3 of every quantity (log ratios for the ratio quantities; groups both
    variants of the seed have)."""
    w = rows.pivot_table(index=["seed", "group"], columns="variant", values=list(QUANTITIES), observed=True)
    out = pd.DataFrame({q: w[(q, "eagle3.1")] - w[(q, "eagle3")] for q in QUANTITIES
                        if (q, "eagle3.1") in w and (q, "eagle3") in w}).dropna(how="all")
    return out.reset_index()


def sign_test(x: np.ndarray) -> float:
    """Two-sided exact binomial p of the signs of x (zeros dropped); 1.0 with nothing to test."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x) & (x != 0)]
    n = len(x)
    if n == 0:
        return 1.0
    k = int(max((x > 0).sum(), (x < 0).sum()))
    return float(min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n))


def over_seeds(diff: pd.DataFrame) -> pd.DataFrame:
    """Per quantity: per-seed means, their mean with a t-interval over seeds, the sign test over seeds, how many
    seeds agree in sign, the smallest p the sign test could give, the seeds the observed effect needs, and the
    verdict rule's minimum detectable effect at 80% power (`verdict_mde`, in the quantity's units: a log factor for
    the ratio quantities)."""
    seeds = sorted(diff["seed"].unique())
    rows = []
    for q in QUANTITIES:
        if q not in diff:
            continue
        per_seed = diff.groupby("seed")[q].mean().reindex(seeds)
        x = per_seed.dropna().to_numpy(float)
        s = len(x)
        est = float(x.mean()) if s else np.nan
        sd = float(x.std(ddof=1)) if s > 1 else np.nan
        half = _t(1 - ALPHA / 2, s - 1) * sd / math.sqrt(s) if s > 1 else np.nan
        agree = int((np.sign(x) == np.sign(est)).sum()) if s else 0
        need = groups_needed(sd, abs(est)) if s > 1 and np.isfinite(sd) and est else None
        rows.append({"quantity": q, "ratio": q in RATIO_SUMS, "seeds": s, "groups": int(diff.loc[diff[q].notna(),
                                                                                                  "group"].nunique()),
                     "estimate": est, "lo": est - half, "hi": est + half, "sd_seeds": sd,
                     "per_seed": [round(float(v), 4) for v in per_seed], "seeds_agreeing": agree,
                     "sign_p": sign_test(x), "min_sign_p": 2.0 / 2 ** s if s else 1.0,
                     "seeds_needed": max(MIN_SEEDS, need) if need else None, "mde": verdict_mde(s, sd)})
    return pd.DataFrame(rows)


def verdict_mde(s: int, sd: float, power: float = 0.8, draws: int = 20_000) -> float:
    """The smallest |difference| the verdict rule (sign test p < ALPHA and the t-interval excluding 0) finds in
    `power` of panels of s seed means drawn normal around it with SD sd: simulated with a fixed generator and the
    same draws at every candidate (so the power is monotone in the difference), bisected on the difference in SDs.
    inf below MIN_SEEDS (the sign test cannot reach ALPHA) or without a spread."""
    if s < MIN_SEEDS or not np.isfinite(sd) or sd <= 0:
        return float("inf")
    z = np.random.default_rng(0).standard_normal((draws, s))
    t = _t(1 - ALPHA / 2, s - 1)
    need = next(k for k in range(s // 2 + 1, s + 1) if sign_test(np.r_[np.ones(k), -np.ones(s - k)]) < ALPHA)

    def power_at(delta: float) -> float:
        x = z + delta
        half = t * x.std(1, ddof=1) / math.sqrt(s)
        m = x.mean(1)
        agree = np.maximum((x > 0).sum(1), (x < 0).sum(1))
        return float(((agree >= need) & ((m - half > 0) | (m + half < 0))).mean())

    lo, hi = 0.0, 1.0
    while power_at(hi) < power:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power_at(mid) >= power else (mid, hi)
    return hi * sd


def established(r) -> bool:
    """An architecture difference in this quantity: >= 6 seeds, sign test p < 0.05, t-interval excluding 0."""
    return bool(r.seeds >= MIN_SEEDS and r.sign_p < ALPHA and (r.lo > 0 or r.hi < 0))


def fmt(r, v: float) -> str:
    """A difference as printed: a factor for ratio quantities (exp of the log difference), else signed."""
    return f"x{math.exp(v):.3f}" if r.ratio else f"{v:+.3f}"


def sentence(table: pd.DataFrame, what: str = "EAGLE-3.1 - EAGLE-3") -> str:
    """The architecture claim in words, with what the panel can and cannot support."""
    r = table.set_index("quantity").loc["acceptance_length"]
    s = int(r.seeds)
    head = (f"Over {s} seeds x {int(r.groups)} groups, {what} acceptance length {r.estimate:+.3f} "
            f"[{r.lo:+.3f}, {r.hi:+.3f}] (t-interval over seed means), per seed "
            f"{', '.join(f'{x:+.3f}' for x in r.per_seed)} ({r.seeds_agreeing}/{s} agree in sign, sign test p "
            f"{r.sign_p:.3g})")
    if s < MIN_SEEDS:
        need = f"; the observed effect would need about {int(r.seeds_needed)} seeds" if r.seeds_needed else ""
        return (f"{head}: no architecture verdict — a sign test over {s} seeds cannot reach p < 0.05 (smallest p "
                f"{r.min_sign_p:.3g}; at least {MIN_SEEDS} seeds){need}.")
    claim = ("the architectures differ in acceptance here" if established(r) else
             "the panel does not establish an architecture difference in acceptance")
    power = (f" (with this spread between seeds, the rule finds a difference of {r.mde:.3f} or more in 80% of "
             f"{s}-seed panels)" if np.isfinite(r.mde) else "")
    return f"{head}: {claim}{power}."
