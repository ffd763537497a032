"""Seeds as the unit of an architecture claim. One trained checkpoint per variant supports statements about those
checkpoints only: a second seed of the same recipe moves acceptance by about as much as the variants differ. Given
a panel of traces, one per seed, each holding that seed's EAGLE-3 and EAGLE-3.1 drafters (named `<variant>-s<seed>`
or one variant per trace), this module states each quantity per seed and over seeds:

- per seed s and group g: d_sg = (quantity of EAGLE-3.1) - (quantity of EAGLE-3); ratio quantities are compared as
  log ratios (a factor), acceptance length as a difference;
- per seed: m_s = the mean of d_sg over the groups;
- over seeds: **the same test as over groups** (analysis/stats.paired): the mean of the S per-seed means with a
  t-interval over seed means (S - 1 degrees of freedom: the seed is the replicate, so the interval is as wide as
  seed-to-seed variation says; a percentile bootstrap over 3 seeds is 2.5x narrower than that), the exact
  **sign-flip test** over the S seed means (p), and its **minimum detectable effect** at 80% power from the same
  test (stats.mde: c(S) x the seeds' SD). A seed-level claim and a group-level claim are read the same way: the
  effect is established when p < 0.05 (the mean's sign). The sign-flip test's smallest p is 2 / 2^S, so an
  architecture verdict needs >= 6 seeds; below that the sentence says so and gives the seeds the observed effect
  would need at 80% power. The plain sign test (binomial p of the per-seed signs) is kept beside it for reference:
  it ignores the sizes and needs every one of 8 seeds to agree (7/8: p 0.070, where the sign-flip test can give
  0.023).
Quantities: acceptance length per group (1 + accepted / rounds), fed-back RMS growth (rms_in at depth K / at depth 1
over the same rounds), the recency-matched ratio at depth K on non-sink shares (analysis/verdict.py) and sink
retention (sink mass at depth K / at depth 1), each per group as a ratio of sums."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..styles import drafter_kind, split_label
from ..trace.metric_table import acceptance_length
from .compare import Comparison
from .stats import ALPHA, groups_needed, min_p, paired
from .verdict import RM_BASES, paired_sums, rm_basis

SEED = re.compile(r"-s(\d+)$")
MIN_SEEDS = 6  # the sign-flip test's floor: 2 / 2^6 = 0.031
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
            if q == "recency_ratio":  # on the shares the verdict reads (non-sink where the trace has its heads)
                num, den = ((c, "K") for c in RM_BASES[rm_basis(d)])
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
    """Per quantity: per-seed means, their mean with a t-interval over seeds, the sign-flip test over seeds (p) and
    its MDE at 80% power (in the quantity's units: a log factor for the ratio quantities), how many seeds agree in
    sign, the smallest p the test could give, the seeds the observed effect needs, and the plain sign test's p for
    reference."""
    seeds = sorted(diff["seed"].unique())
    rows = []
    for q in QUANTITIES:
        if q not in diff:
            continue
        per_seed = diff.groupby("seed")[q].mean().reindex(seeds)
        x = per_seed.dropna().to_numpy(float)
        st = paired(x)
        s, est, sd = st["n"], st["mean"], st["sd"]
        agree = int((np.sign(x) == np.sign(est)).sum()) if s else 0
        need = groups_needed(sd, abs(est)) if s > 1 and np.isfinite(sd) and est else None
        rows.append({"quantity": q, "ratio": q in RATIO_SUMS, "seeds": s, "groups": int(diff.loc[diff[q].notna(),
                                                                                                  "group"].nunique()),
                     "estimate": est, "lo": st["lo"], "hi": st["hi"], "sd_seeds": sd,
                     "per_seed": [round(float(v), 4) for v in per_seed], "seeds_agreeing": agree,
                     "p": st["p"], "min_p": min_p(s) if s else 1.0, "mde": st["mde"], "sign_p": sign_test(x),
                     "seeds_needed": max(MIN_SEEDS, need) if need else None})
    return pd.DataFrame(rows)


def established(r) -> bool:
    """An architecture difference in this quantity: >= 6 seeds and the sign-flip test over seeds p < 0.05 (read
    as the groups' test is)."""
    return bool(r.seeds >= MIN_SEEDS and np.isfinite(r.p) and r.p < ALPHA and r.estimate != 0)


def fmt(r, v: float) -> str:
    """A difference as printed: a factor for ratio quantities (exp of the log difference), else signed."""
    return f"x{math.exp(v):.3f}" if r.ratio else f"{v:+.3f}"


def sentence(table: pd.DataFrame, what: str = "EAGLE-3.1 - EAGLE-3") -> str:
    """The architecture claim in words, with what the panel can and cannot support."""
    r = table.set_index("quantity").loc["acceptance_length"]
    s = int(r.seeds)
    head = (f"Over {s} seeds x {int(r.groups)} groups, {what} acceptance length {r.estimate:+.3f} "
            f"[{r.lo:+.3f}, {r.hi:+.3f}] (t-interval over seed means), per seed "
            f"{', '.join(f'{x:+.3f}' for x in r.per_seed)} ({r.seeds_agreeing}/{s} agree in sign; sign-flip test "
            f"over seeds p {r.p:.3g})")
    if s < MIN_SEEDS:
        need = f"; the observed effect would need about {int(r.seeds_needed)} seeds" if r.seeds_needed else ""
        return (f"{head}: no architecture verdict — a sign-flip test over {s} seeds cannot reach p < 0.05 (smallest "
                f"p {r.min_p:.3g}; at least {MIN_SEEDS} seeds){need}.")
    claim = ("the architectures differ in acceptance here" if established(r) else
             "the panel does not establish an architecture difference in acceptance")
    power = (f" (with this spread between seeds, the test detects a difference of {r.mde:.3f} or more at 80% "
             "power)" if np.isfinite(r.mde) else "")
    return f"{head}: {claim}{power}."
