"""Seeds as the unit of an architecture claim. One trained checkpoint per variant supports statements about those
checkpoints only: a second seed of the same recipe moves acceptance by about as much as the variants differ. Given
a panel of traces, one per seed, each holding that seed's EAGLE-3 and EAGLE-3.1 drafters (named `<variant>-s<seed>`
or one variant per trace), this module states each quantity per seed and over seeds:

- per seed s and group g: d_sg = (quantity of EAGLE-3.1) - (quantity of EAGLE-3), the groups (source documents)
  crossed with the seeds;
- over seeds: the mean over seeds of the per-seed mean over groups, with a 95% interval from a two-level bootstrap
  (resample seeds, then groups — one group resample shared by every seed, as the groups are crossed), 2,000
  resamples; and how many seeds agree in sign. A sign test over S seeds cannot reach p < 0.05 below 5 seeds
  (its smallest two-sided p is 2 / 2^S), and the table says so rather than print a p no design could give.
Quantities: acceptance length per group (1 + accepted / rounds), fed-back RMS growth (mean rms_in at depth K / at
depth 1 per group) and the self-lift trend (mean self lift at depth K / at depth 2 per group)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..styles import drafter_kind, split_label
from ..trace.metric_table import acceptance_length
from .compare import Comparison

SEED = re.compile(r"-s(\d+)$")
QUANTITIES = {"acceptance_length": "acceptance length (tokens per round)",
              "rms_growth": "fed-back RMS, depth K / depth 1",
              "self_lift_trend": "self lift, depth K / depth 2"}


def _seed_of(label: str) -> int | None:
    m = SEED.search(split_label(label)[1])
    return int(m.group(1)) if m else None


def per_group(cmp: Comparison) -> pd.DataFrame:
    """One row per seed x variant x group: the quantities of QUANTITIES (variant: eagle3 / eagle3.1)."""
    k = cmp.depth
    r = cmp.rounds
    g = r.groupby(["series", "group"], observed=True)["accepted"]
    al = acceptance_length(g.sum(), g.count()).rename("acceptance_length")
    d = cmp.depths
    rms = d[d.depth.isin([1, k])].groupby(["series", "group", "depth"], observed=True)["rms_in"].mean().unstack()
    lift = d[d.depth.isin([2, k])].groupby(["series", "group", "depth"], observed=True)["self_lift"].mean().unstack()
    out = pd.concat([al, (rms[k] / rms[1]).rename("rms_growth"), (lift[k] / lift[2]).rename("self_lift_trend")],
                    axis=1).reset_index()
    out["seed"] = out["series"].map(_seed_of)
    out["variant"] = out["series"].map(drafter_kind)
    return out[out["variant"].isin(["eagle3", "eagle3.1"]) & out["seed"].notna()]


def differences(rows: pd.DataFrame) -> pd.DataFrame:
    """Per seed x group: EAGLE-3.1 minus EAGLE-3 of every quantity (groups both variants of the seed have)."""
    w = rows.pivot_table(index=["seed", "group"], columns="variant", values=list(QUANTITIES), observed=True)
    out = pd.DataFrame({q: w[(q, "eagle3.1")] - w[(q, "eagle3")] for q in QUANTITIES}).dropna(how="all")
    return out.reset_index()


def over_seeds(diff: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per quantity: per-seed means, the mean over seeds with a two-level bootstrap 95% interval, the seeds whose
    sign agrees with it, and the smallest p a sign test over these seeds could give."""
    seeds = sorted(diff["seed"].unique())
    groups = sorted(diff["group"].unique())
    rng = np.random.default_rng(seed)
    rows = []
    for q in QUANTITIES:
        m = diff.pivot_table(index="seed", columns="group", values=q, observed=True).reindex(index=seeds,
                                                                                               columns=groups)
        per_seed = m.mean(axis=1, skipna=True)
        est = float(per_seed.mean())
        boots = np.empty(n_boot)
        a = m.to_numpy(float)
        for b in range(n_boot):
            si = rng.integers(0, len(seeds), len(seeds))
            gi = rng.integers(0, len(groups), len(groups))
            boots[b] = np.nanmean(np.nanmean(a[np.ix_(si, gi)], axis=1))
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        agree = int((np.sign(per_seed) == np.sign(est)).sum())
        rows.append({"quantity": q, "seeds": len(seeds), "groups": len(groups), "estimate": est, "lo": float(lo),
                     "hi": float(hi), "per_seed": [round(float(x), 4) for x in per_seed],
                     "seeds_agreeing": agree, "min_sign_p": 2.0 / 2 ** len(seeds)})
    return pd.DataFrame(rows)


def sentence(table: pd.DataFrame, what: str = "EAGLE-3.1 - EAGLE-3") -> str:
    """The architecture claim in words, with what the panel can and cannot support."""
    r = table.set_index("quantity").loc["acceptance_length"]
    s = int(r.seeds)
    ci_excludes = r.lo > 0 or r.hi < 0
    test = (f"a sign test over {s} seeds cannot reach p < 0.05 (smallest p {r.min_sign_p:.3g})" if r.min_sign_p > 0.05
            else "")
    claim = ("the architectures differ in acceptance here" if ci_excludes and r.seeds_agreeing == s else
             "the panel does not establish an architecture difference in acceptance")
    return (f"Over {s} seeds x {int(r.groups)} groups, {what} acceptance length {r.estimate:+.3f} "
            f"[{r.lo:+.3f}, {r.hi:+.3f}] (two-level bootstrap over seeds and groups), per seed "
            f"{', '.join(f'{x:+.3f}' for x in r.per_seed)} ({r.seeds_agreeing}/{s} agree in sign): {claim}"
            + (f"; {test}" if test else "") + ".")
