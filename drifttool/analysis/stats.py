"""Paired, per-group statistics behind every verdict: depth trends, drafter differences, power and sample plans.

The unit is the *group* (a prompt's source document; the cuts of one file are one group), never the round and
never the prompt: rounds of one prompt and cuts of one file are not independent. For a per-depth metric m the
per-group change from the metric's first depth d0 to depth d is

    delta_g(d) = mean of m over group g's rounds at depth d  -  the same at d0,

and everything below is a statistic of those n group values:
- the mean change with a 95% t-interval (n - 1 degrees of freedom);
- a two-sided **sign-flip permutation test** of "no change" (exact over all 2^n sign patterns up to n = 16
  groups, else 20,000 random patterns). Chosen over Wilcoxon's signed-rank test because it tests the *mean*
  change we report (Wilcoxon tests a pseudo-median) and, like it, assumes only that the group changes are
  symmetric about 0 under no effect, not that they are normal. Its smallest possible p-value is 2 / 2^n, so
  with n <= 5 groups no change is detectable at alpha 0.05 whatever its size;
- the **minimum detectable effect** of that sign-flip test at 80% power and two-sided alpha 0.05: the mean change
  it detects 80% of the time when the group changes are Normal(change, sd^2), MDE = c(n) * sd, with c(n)
  tabulated by simulation of the test itself (SIGNFLIP_MDE, scripts/signflip_mde_table.py; c(6) = 1.79: at 6
  groups only 6 signs that all agree reject) for n <= 40, and the paired t-test's (t_{1-alpha/2, n-1} +
  t_{power, n-1}) / sqrt(n) above, where the two tests agree within 1 %; infinite when n <= 5 groups;
- the verdict: a *rise* / *fall* when p < alpha; else *underpowered* when the MDE exceeds the metric's own scale
  (|its mean at d0|; a sample that could not have seen the whole quantity vanish says nothing about it), else
  *no change detected* (|change| < MDE at 80% power).
Between two drafters the same statistics apply to the difference of their group changes (groups present in
both), and to the difference of their per-group acceptance lengths (scale: the baseline's accepted drafts per
round, AL - 1). `groups_needed` inverts the MDE: how many groups would detect an effect of a given size.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
import pandas as pd

from ..trace import metric_table

ALPHA = 0.05
POWER = 0.8
EXACT_MAX = 16  # exact sign-flip enumeration up to this many groups (2^16 patterns)
N_PERM = 20_000
# the first depth a metric is defined at: self/draft mass need an earlier drafted slot (depth >= 2)
BASE_DEPTH = metric_table.base_depth()
TREND_METRICS = ("sink_lift", "self_lift", "sink_mass", "self_mass", "prompt_mass", "rms_in")
POPULATIONS = ("all", "prefix_correct")
POPULATION_TEXT = {
    "all": "all drafted rounds",
    "prefix_correct": "rounds whose chain was still correct up to the depth (every earlier draft accepted)",
}


def base_depth(metric: str) -> int:
    return BASE_DEPTH.get(metric, 1)


# --- the tests --------------------------------------------------------------------------------------------------

@lru_cache(maxsize=8)
def _packed_signs(n: int, seed: int = 0) -> np.ndarray:
    """Sign patterns [P, n] as bits (1 = +1), packed along n: all 2^n when n <= EXACT_MAX, else N_PERM random ones
    (the identity first). Packed, so a cached entry is P * n / 8 bytes (n = 3,000 groups: 7.5 MB; as float64 it
    was 480 MB, and 32 distinct n were cached)."""
    if n <= EXACT_MAX:
        bits = np.array(list(itertools.product((1, 0), repeat=n)), dtype=np.uint8) if n else np.ones((1, 0), np.uint8)
    else:
        bits = np.random.default_rng(seed).integers(0, 2, size=(N_PERM, n), dtype=np.uint8)
        bits[0] = 1
    p = np.packbits(bits, axis=1)
    p.flags.writeable = False
    return p


def _signs(n: int, seed: int = 0, rows: slice = slice(None)) -> np.ndarray:
    """Sign patterns [P, n] (float64, +1 / -1) of `rows` (default all; callers with many groups take chunks)."""
    bits = np.unpackbits(_packed_signs(n, seed)[rows], axis=1, count=n)
    return bits.astype(np.float64) * 2.0 - 1.0


def sign_sums(x: np.ndarray, seed: int = 0, chunk: int = 2048) -> np.ndarray:
    """|s . x| for every sign pattern s of len(x) groups (x [n] or [n, M] for M samples), unpacked chunk by chunk so
    memory stays at chunk x n whatever the number of groups."""
    n = x.shape[0]
    total = len(_packed_signs(n, seed))
    return np.concatenate([np.abs(_signs(n, seed, slice(i, i + chunk)) @ x) for i in range(0, total, chunk)])


def sign_flip_p(x: np.ndarray) -> float:
    """Two-sided sign-flip permutation p-value of mean(x) = 0: the share of sign patterns whose |mean| is at
    least the observed |mean| (exact up to EXACT_MAX values; the observed pattern counts, so p >= 2 / 2^n)."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return float("nan")
    if not np.any(x):
        return 1.0
    stats = sign_sums(x)
    obs = abs(x.sum())
    return float(np.mean(stats >= obs - 1e-12 * max(1.0, obs)))


def min_p(n: int) -> float:
    """The smallest two-sided p-value a sign-flip test over n groups can give."""
    return math.ldexp(1.0, 1 - n) if n >= 1 else 1.0  # 2 / 2^n, underflowing to 0 for huge n


def _t(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


# c(n): the sign-flip test (exact up to 16 groups; its normal limit above) rejects at alpha 0.05 with power 0.80
# when the mean group change is c(n) * SD (Normal group changes; 20,000 simulated samples per n, common random
# numbers over a bisection in c). Generated by scripts/signflip_mde_table.py --draws 20000; checked by
# tests/analysis/test_signflip_power.py with the tool's own sign_flip_p on other samples.
SIGNFLIP_MDE = {
    6: 1.786, 7: 1.337, 8: 1.199, 9: 1.092, 10: 1.007, 11: 0.942, 12: 0.889, 13: 0.854, 14: 0.813, 15: 0.779,
    16: 0.748, 17: 0.735, 18: 0.71, 19: 0.688, 20: 0.669, 21: 0.65, 22: 0.633, 23: 0.617, 24: 0.599, 25: 0.593,
    26: 0.577, 27: 0.56, 28: 0.556, 29: 0.542, 30: 0.532, 31: 0.522, 32: 0.514, 33: 0.503, 34: 0.502, 35: 0.489,
    36: 0.482, 37: 0.472, 38: 0.47, 39: 0.463, 40: 0.457,
}


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable mean change of the sign-flip test at `power` and two-sided `alpha` for n paired groups with
    SD sd of the group changes; inf when n is too small for the test to reach alpha at all (n <= 5)."""
    if n < 2 or not np.isfinite(sd) or min_p(n) > alpha:
        return float("inf")
    if alpha == ALPHA and power == POWER and n in SIGNFLIP_MDE:
        return SIGNFLIP_MDE[n] * sd
    return (_t(1 - alpha / 2, n - 1) + _t(power, n - 1)) * sd / math.sqrt(n)


def groups_needed(sd: float, effect: float, alpha: float = ALPHA, power: float = POWER, n_max: int = 100_000) -> int | None:
    """Smallest number of groups whose MDE (same SD of group changes) is at most |effect|; None if beyond n_max
    or the SD is unknown."""
    effect = abs(effect)
    if not np.isfinite(sd) or not np.isfinite(effect) or effect <= 0:
        return None
    if sd == 0:
        return next(n for n in range(2, 64) if min_p(n) <= alpha)
    lo = next(n for n in range(2, 64) if min_p(n) <= alpha)
    if mde(sd, lo, alpha, power) <= effect:
        return lo
    # the z-approximation gives a starting point; walk up from a little below it
    z = (_t(1 - alpha / 2, 10**6) + _t(power, 10**6)) * sd / effect
    if not np.isfinite(z * z) or z * z > 10 * n_max:  # an effect so small no feasible number of groups detects it
        return None
    n = max(lo, int(z * z * 0.9))
    while mde(sd, n, alpha, power) > effect:
        n += 1
        if n > n_max:
            return None
    while n > lo and mde(sd, n - 1, alpha, power) <= effect:
        n -= 1
    return n


def paired(x: np.ndarray) -> dict[str, float]:
    """Mean of paired group values with a 95% t-interval, sign-flip p, SD, n and MDE."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return {"mean": np.nan, "lo": np.nan, "hi": np.nan, "p": np.nan, "sd": np.nan, "n": 0, "mde": np.inf}
    m = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else np.nan
    half = _t(1 - ALPHA / 2, n - 1) * sd / math.sqrt(n) if n > 1 else np.nan
    return {"mean": m, "lo": m - half, "hi": m + half, "p": sign_flip_p(x), "sd": sd, "n": n, "mde": mde(sd, n)}


def verdict(mean: float, p: float, mde_: float, scale: float) -> str:
    """'rise' / 'fall' (p < alpha), 'underpowered' (MDE above the quantity's scale), else 'no change detected'."""
    if not np.isfinite(mean):
        return "no data"
    if np.isfinite(p) and p < ALPHA:
        return "rise" if mean > 0 else "fall"
    if not np.isfinite(mde_) or (np.isfinite(scale) and mde_ > abs(scale)):
        return "underpowered"
    return "no change detected"


# --- tables -----------------------------------------------------------------------------------------------------

def population_mask(depths: pd.DataFrame, population: str, mode: str) -> pd.Series:
    """Rows of a depths table in `population`. Teacher-forced rounds are all on the true prefix (the drafter is
    fed the target's tokens), so there 'prefix_correct' is every round."""
    if population == "all" or mode == "teacher-forced":
        return pd.Series(True, index=depths.index)
    if population != "prefix_correct":
        raise ValueError(f"population {population!r}: expected one of {POPULATIONS}")
    return depths["reached"].astype(bool)


def group_depth_means(depths: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per series x group x depth: the metric's mean over rounds, and rounds / prompts counted."""
    g = depths.groupby(["series", "group", "depth"], observed=True)
    out = g[metric].mean().rename("value").to_frame()
    out["rounds"] = g.size()
    out["prompts"] = g["prompt_id"].nunique()
    return out.reset_index()


def round_changes(rows: pd.DataFrame, metric: str, d_from: int, d_to: int,
                  by: tuple[str, ...] = ("series", "group")) -> pd.DataFrame:
    """Per `by` cell: the metric at d_to minus at d_from within the same rounds (those with rows at both depths
    in `rows`), with both means. Pairing rounds matters where a population keeps fewer rounds deeper (prefix-
    correct chains): a change of all rounds' first depth to the survivors' deeper one mixes depth with which
    chains survive, and the metrics track rejection."""
    keys = [*by, "prompt_id", "round"]
    a = rows.loc[rows["depth"] == d_from, [*keys, metric]].set_index(keys)[metric]
    b = rows.loc[rows["depth"] == d_to, [*keys, metric]].set_index(keys)[metric]
    both = pd.concat([a.rename("base"), b.rename("at")], axis=1, join="inner").dropna()
    g = both.groupby(level=list(by), observed=True).mean()
    g["change"] = g["at"] - g["base"]
    return g.reset_index()


def change_between(depths: pd.DataFrame, metric: str, d_from: int, d_to: int) -> dict[str, float]:
    """Paired statistics of each group's change of `metric` from depth d_from to d_to, within the same rounds
    (one series' rows)."""
    if depths.empty:
        return paired(np.array([]))
    return paired(round_changes(depths, metric, d_from, d_to, by=("group",))["change"].to_numpy())


def _walk(depths: pd.DataFrame, mode: str, metrics, populations, every_depth: bool):
    """(population, metric, d0, depth, group means, group changes) for each population x metric x depth beyond
    the metric's first one: every depth of the trace (`every_depth`: rows for depths a population lacks) or only
    the depths the population has."""
    for pop in populations:
        sub = depths[population_mask(depths, pop, mode).to_numpy()]
        for metric in metrics:
            if metric not in sub.columns:
                continue
            means = group_depth_means(sub, metric)
            d0 = base_depth(metric)
            have = (depths if every_depth else means)["depth"].unique()
            for k in sorted(int(x) for x in have if x > d0):
                yield pop, metric, d0, k, means, round_changes(sub, metric, d0, k)


def depth_trends(depths: pd.DataFrame, mode: str, metrics=TREND_METRICS, populations=POPULATIONS) -> pd.DataFrame:
    """Per population x series x metric x depth (> the metric's base depth): the paired change statistics."""
    rows = []
    if depths.empty:
        return pd.DataFrame()
    labels = list(dict.fromkeys(depths["series"]))
    for pop, metric, d0, k, means, ch in _walk(depths, mode, metrics, populations, every_depth=True):
        for label in labels:
            c = ch[ch["series"] == label]
            st = paired(c["change"].to_numpy())
            base = float(c["base"].mean()) if len(c) else np.nan
            at_k = means[(means.series == label) & (means.depth == k) & means.group.isin(c.group)]
            rows.append({"population": pop, "series": label, "metric": metric, "from_depth": d0, "depth": k,
                         "base_value": base, "change": st["mean"], "change_lo": st["lo"], "change_hi": st["hi"],
                         "p": st["p"], "sd": st["sd"], "mde": st["mde"], "n_groups": st["n"],
                         "n_prompts": int(at_k["prompts"].sum()), "n_rounds": int(at_k["rounds"].sum()),
                         "verdict": verdict(st["mean"], st["p"], st["mde"], base)})
    return pd.DataFrame(rows)


def trend_differences(depths: pd.DataFrame, mode: str, baseline: str, metrics=TREND_METRICS,
                      populations=POPULATIONS) -> pd.DataFrame:
    """Per population x other series x metric x depth: (change of series) - (change of baseline) over the groups
    both have, with the paired statistics; the scale of the verdict is the baseline's base-depth value."""
    rows = []
    if depths.empty:
        return pd.DataFrame()
    for pop, metric, d0, k, _, ch in _walk(depths, mode, metrics, populations, every_depth=False):
        ch = ch.set_index(["series", "group"])
        if baseline not in ch.index.get_level_values(0):
            continue
        b = ch.loc[baseline]
        for label in ch.index.get_level_values(0).unique():
            if label == baseline:
                continue
            o = ch.loc[label]
            common = o.index.intersection(b.index)
            st = paired((o.loc[common, "change"] - b.loc[common, "change"]).to_numpy())
            base = float(b.loc[common, "base"].mean()) if len(common) else np.nan
            rows.append({"population": pop, "series": label, "baseline": baseline, "metric": metric,
                         "from_depth": d0, "depth": k, "base_value": base, "difference": st["mean"],
                         "difference_lo": st["lo"], "difference_hi": st["hi"], "p": st["p"], "sd": st["sd"],
                         "mde": st["mde"], "n_groups": st["n"],
                         "verdict": verdict(st["mean"], st["p"], st["mde"], base)})
    return pd.DataFrame(rows)


def group_acceptance(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per series x group: mean acceptance length over the group's rounds (1 + accepted drafts per round)."""
    g = rounds.groupby(["series", "group"], observed=True)["accepted"].agg(["sum", "count"]).reset_index()
    g["al"] = metric_table.acceptance_length(g["sum"], g["count"])
    return g


def acceptance_differences(rounds: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per other series: group-paired difference of acceptance length against `baseline`, with the paired
    statistics; the verdict's scale is the baseline's accepted drafts per round (AL - 1)."""
    if rounds.empty:
        return pd.DataFrame()
    g = group_acceptance(rounds).set_index(["series", "group"])["al"]
    if baseline not in g.index.get_level_values(0):
        return pd.DataFrame()
    b = g.loc[baseline]
    rows = []
    for label in g.index.get_level_values(0).unique():
        if label == baseline:
            continue
        o = g.loc[label]
        common = o.index.intersection(b.index)
        st = paired((o.loc[common] - b.loc[common]).to_numpy())
        base_al = float(b.loc[common].mean()) if len(common) else np.nan
        rows.append({"series": label, "baseline": baseline, "metric": "acceptance_length", "base_value": base_al,
                     "difference": st["mean"], "difference_lo": st["lo"], "difference_hi": st["hi"], "p": st["p"],
                     "sd": st["sd"], "mde": st["mde"], "mde_rel": st["mde"] / base_al if base_al else np.nan,
                     "n_groups": st["n"],
                     "verdict": verdict(st["mean"], st["p"], st["mde"], base_al - 1.0)})
    return pd.DataFrame(rows)


def plan(sd: float, effect: float, n_now: int) -> dict[str, float | int | None]:
    """What a pilot's SD of group changes implies: groups needed to detect `effect`, and today's MDE."""
    return {"effect": effect, "sd": sd, "n_groups_now": n_now, "mde_now": mde(sd, n_now),
            "groups_needed": groups_needed(sd, effect)}
