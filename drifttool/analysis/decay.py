"""Long-context decay and the drafter's trained window: the questions drafter users ask before deploying.

**Decay.** Per series, acceptance length (AL = 1 + accepted drafts of a round) and the drift metrics as a
function of context length, in power-of-two context buckets, and a least-squares trend fitted on the rounds:
AL(L) = a + b * log2(L), so b is the change in AL per doubling of the context. Its uncertainty is over groups
(source documents), not rounds: the fit is redone on 10,000 seeded resamples of whole groups (the chain's group
bootstrap weights), giving a 95% percentile CI and SE of b, none below 6 groups (metrics.MIN_CLUSTERS).

**Break-even.** A round costs K drafter forward calls and one target verify forward and yields AL tokens;
plain decoding costs about one target forward per token, and verifying K + 1 tokens costs about one decode
step when decoding is memory-bound. With c = (drafter step cost) / (verify cost), speculation pays while
AL / (1 + K c) > 1, i.e. while AL > **1 + K c** (the break-even AL). c is measured from the trace's
per-round timings (`rounds.draft_s` / K over `rounds.verify_s`, round 0 excluded since it carries the
prompt prefill; totals over rounds) unless the user gives a break-even AL. The context length at which
speculation stops paying is where the fitted trend crosses the break-even AL.

**Trained window.** A drafter's trained context window is its config's `trained_window` (or compare's
`--trained-window`), else `rope_scaling.original_max_position_embeddings` (the length it was trained at before
the RoPE extension), else its `max_position_embeddings` -- an assumption reports flag, since drafters are often
trained far shorter than their position range. A round is *beyond* the window when its deepest draft query sits at position
>= window (the trace's `beyond_window` semantics); every summary metric is split by inside / beyond."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..model.config import trained_window
from ..trace.metric_table import acceptance_length
from ..trace.positions import query_position
from .compare import Comparison
from .metrics import MIN_CLUSTERS, _resample_weights

SIDES = ("inside", "beyond")


# --- fits -----------------------------------------------------------------------------------------------------

def fit_log2(ctx: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> dict[str, float]:
    """Least squares y = intercept + slope * log2(ctx); slope = change per doubling (nan with < 3 points or one
    distinct context). With `groups` (each point's group), slope_se / slope_lo / slope_hi come from
    `group_slope_ci`; without, they are nan: an OLS standard error would treat rounds as independent."""
    x = np.log2(np.maximum(np.asarray(ctx, float), 1.0))
    y = np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    out = {"slope": math.nan, "intercept": math.nan, "slope_se": math.nan, "slope_lo": math.nan,
           "slope_hi": math.nan, "r2": math.nan, "n": int(n), "n_groups": 0}
    if groups is not None:
        out["n_groups"] = int(pd.unique(np.asarray(groups)[ok]).size)
    if n < 3 or np.ptp(x) == 0:
        return out
    xm, ym = x.mean(), y.mean()
    sxx = ((x - xm) ** 2).sum()
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    resid = y - (intercept + slope * x)
    sst = ((y - ym) ** 2).sum()
    out.update(slope=slope, intercept=intercept, r2=float(1 - (resid ** 2).sum() / sst) if sst > 0 else math.nan)
    if groups is not None:
        out.update(zip(("slope_se", "slope_lo", "slope_hi"), group_slope_ci(x, y, np.asarray(groups)[ok])))
    return out


def group_slope_ci(x: np.ndarray, y: np.ndarray, groups: np.ndarray, n_boot: int = 10_000, seed: int = 0,
                   min_clusters: int = MIN_CLUSTERS) -> tuple[float, float, float]:
    """(SE, 2.5%, 97.5%) of the least-squares slope of y on x with whole groups resampled (the same seeded
    multinomial weights as bootstrap_ratio); nan below `min_clusters` groups. Each resample's fit is computed
    from per-group sums, so a resample is a weighted fit of the same rounds."""
    if pd.unique(groups).size < max(2, min_clusters):
        return math.nan, math.nan, math.nan
    g = pd.DataFrame({"g": groups, "n": 1.0, "x": x, "y": y, "xx": x * x, "xy": x * y}).groupby("g", sort=True).sum()
    w = _resample_weights(len(g), n_boot, seed)
    n, sx, sy, sxx, sxy = (w @ g[c].to_numpy() for c in ("n", "x", "y", "xx", "xy"))
    den = sxx - sx * sx / n
    ok = den > 1e-12 * np.maximum(sxx, 1.0)  # a resample of groups at one context length: no slope
    b = np.divide(sxy - sx * sy / n, den, out=np.full(n_boot, np.nan), where=ok)
    if ok.sum() < 2:
        return math.nan, math.nan, math.nan
    lo, hi = np.nanpercentile(b, [2.5, 97.5])
    return float(np.nanstd(b, ddof=1)), float(lo), float(hi)


def predict(fit: dict[str, float], ctx: float) -> float:
    return fit["intercept"] + fit["slope"] * math.log2(max(ctx, 1.0))


def breakeven_al(k: int, c: float) -> float:
    """Acceptance length below which a depth-K chain costs more than plain decoding: 1 + K * c."""
    return 1.0 + k * c


def cost_ratio(rounds: pd.DataFrame, k: int) -> float:
    """c = drafter step cost / verify cost from per-round timings (round 0 excluded); nan when not recorded."""
    if not {"draft_s", "verify_s"} <= set(rounds.columns):
        return math.nan
    r = rounds[rounds["round"] > 0] if (rounds["round"] > 0).any() else rounds
    d, v = r["draft_s"].astype(float).to_numpy(), r["verify_s"].astype(float).to_numpy()
    ok = np.isfinite(d) & np.isfinite(v)
    if not ok.any() or v[ok].sum() <= 0:
        return math.nan
    return float(d[ok].sum() / k / v[ok].sum())


def crossing(fit: dict[str, float], level: float, lo: float, hi: float,
             measured: float | None = None) -> tuple[float | None, str]:
    """Context length where the fitted AL trend falls to `level`, and how to read it.

    `measured` (the mean acceptance length over the measured range) overrides the fit's verdict on which side
    of break-even the measurements lie: a noisy fit never makes "below break-even" out of an AL above it."""
    a, b = fit["intercept"], fit["slope"]
    if not math.isfinite(level):
        return None, "no break-even: timing not recorded (pass --breakeven)"
    above = measured is not None and math.isfinite(measured) and measured >= level
    below = measured is not None and math.isfinite(measured) and measured < level
    if not (math.isfinite(a) and math.isfinite(b)):
        if below:
            return None, "below break-even (measured); no trend: too few distinct context lengths"
        return None, "no trend: too few distinct context lengths"
    at_lo = a + b * math.log2(max(lo, 1.0))
    if b >= 0:
        if below or (not above and at_lo < level):
            return None, "below break-even already; trend not falling"
        return None, "trend not falling: no crossing"
    e = (level - a) / b
    if e > 62:
        return None, "trend too flat to cross break-even at any real context length"
    at = float(2.0 ** e)
    if at <= lo:
        if above:
            return at, "above break-even on average; the fitted trend (a poor fit) dips below it"
        return at, "below break-even over the whole measured range"
    if at > hi and below:
        return at, "below break-even on average already; the fitted trend crosses beyond the measured range"
    return at, "within measured range" if at <= hi else "extrapolated beyond measured range"


# --- per-round frame ------------------------------------------------------------------------------------------

def round_frame(cmp: Comparison) -> pd.DataFrame:
    """One row per series x round: group, context, AL, self lift (mean over depths >= 2: attention on its own drafts
    per uniform share, which context length cannot dilute), sink mass, rms_in."""
    keys = ["series", "prompt_id", "round"]
    r = cmp.rounds[[*keys, "group", "context_len", "accepted"]].copy()
    r["acceptance_length"] = acceptance_length(r["accepted"], pd.Series(1, index=r.index))  # one round each
    d = cmp.depths
    deep = d[d["depth"] >= 2].groupby(keys, observed=True)["self_lift"].mean()
    allk = d.groupby(keys, observed=True)[["sink_mass", "rms_in"]].mean()
    return r.merge(deep.reset_index(), on=keys, how="left").merge(allk.reset_index(), on=keys, how="left")


def _bucket(ctx: pd.Series) -> pd.Series:
    lo = (2 ** np.floor(np.log2(np.maximum(ctx.astype(float), 1.0)))).astype(np.int64)
    return lo


def context_curve(cmp: Comparison) -> pd.DataFrame:
    """Per series x power-of-two context bucket [lo, 2 lo): rounds, mean AL, draft acceptance rate, drift."""
    if cmp.rounds.empty:
        return pd.DataFrame()
    f = round_frame(cmp)
    f["bucket_lo"] = _bucket(f["context_len"])
    k = cmp.depth
    g = f.groupby(["series", "bucket_lo"], observed=True).agg(
        rounds=("accepted", "size"), prompts=("prompt_id", "nunique"), context=("context_len", "mean"),
        acceptance_length=("acceptance_length", "mean"), self_lift=("self_lift", "mean"),
        sink_mass=("sink_mass", "mean"), rms_in=("rms_in", "mean")).reset_index()
    g["draft_acceptance_rate"] = (g["acceptance_length"] - 1) / k
    g["context_bucket"] = [f"{lo}-{2 * lo - 1}" for lo in g["bucket_lo"]]
    return g


def decay_table(cmp: Comparison, breakeven: float | None = None) -> pd.DataFrame:
    """Per series: AL and drift trends vs log2(context), break-even AL and where speculation stops paying."""
    if cmp.rounds.empty:
        return pd.DataFrame()
    f = round_frame(cmp)
    k = cmp.depth
    rows = []
    for s in cmp.series:
        sub = f[f["series"] == s.label]
        if sub.empty:
            continue
        fa = fit_log2(sub["context_len"], sub["acceptance_length"], sub["group"].astype(str).to_numpy())
        fd = fit_log2(sub["context_len"], sub["self_lift"], sub["group"].astype(str).to_numpy())
        c = cost_ratio(cmp.rounds[cmp.rounds["series"] == s.label], k)
        if breakeven is not None:
            be, src = float(breakeven), "user (--breakeven)"
        elif math.isfinite(c):
            be, src = breakeven_al(k, c), f"1 + K*c, measured c = {c:.3g}"
        else:
            be, src = math.nan, "unavailable: no draft_s/verify_s timing in this trace"
        lo, hi = float(sub["context_len"].min()), float(sub["context_len"].max())
        measured = float(sub["acceptance_length"].mean())
        at, status = crossing(fa, be, lo, hi, measured)
        if at is not None and not fa["slope_hi"] < 0:  # a crossing read off a slope the groups do not establish
            status += ("; the AL slope's 95% CI includes 0" if math.isfinite(fa["slope_hi"]) else
                       "; too few groups for an interval on the AL slope") + ": the crossing is not established"
        rows.append({
            "series": s.label, "rounds": int(len(sub)), "context_min": int(lo), "context_max": int(hi),
            "groups": fa["n_groups"], "al_per_doubling": fa["slope"], "al_per_doubling_se": fa["slope_se"],
            "al_per_doubling_lo": fa["slope_lo"], "al_per_doubling_hi": fa["slope_hi"], "al_intercept": fa["intercept"],
            "al_r2": fa["r2"], "al_fit_at_min": predict(fa, lo), "al_fit_at_max": predict(fa, hi),
            "self_lift_per_doubling": fd["slope"], "self_lift_per_doubling_se": fd["slope_se"],
            "self_lift_per_doubling_lo": fd["slope_lo"], "self_lift_per_doubling_hi": fd["slope_hi"],
            "cost_ratio": c, "breakeven_al": be, "breakeven_source": src,
            "breakeven_context": at, "breakeven_status": status, "measured_al": measured,
        })
    return pd.DataFrame(rows)


# --- trained window -------------------------------------------------------------------------------------------

def windows(cmp: Comparison) -> dict[str, dict[str, Any]]:
    """Per series, the trained window (a --trained-window given to compare wins over what the trace recorded)."""
    out = {}
    for s in cmp.series:
        entry = next(d for d in s.trace.manifest["drafters"] if d["name"] == s.drafter)
        if cmp.trained_window:
            entry = {**entry, "trained_window": cmp.trained_window}
        out[s.label] = trained_window(entry)
        if cmp.trained_window:
            out[s.label]["source"] = "--trained-window"
    return out


def beyond_rounds(cmp: Comparison) -> pd.Series:
    """Per row of cmp.rounds: True when the round's deepest draft query is at or past the trained window."""
    if cmp.rounds.empty:
        return pd.Series([], dtype=bool)
    win = windows(cmp)
    w = cmp.rounds["series"].map(lambda lab: win[lab]["window"])
    deepest = query_position(cmp.rounds["context_len"], cmp.rounds["depth"])
    recorded = cmp.rounds["beyond_window"].astype(bool)
    return pd.Series(np.where(w.notna(), deepest >= w.fillna(0), recorded), index=cmp.rounds.index, dtype=bool)


def any_beyond(cmp: Comparison) -> bool:
    return bool(len(cmp.rounds)) and bool(beyond_rounds(cmp).any())


def window_split(cmp: Comparison) -> pd.DataFrame:
    """Every summary metric per series, split by rounds inside / beyond the trained window (depth rows follow
    their round). Only sides with rounds are listed."""
    if cmp.rounds.empty:
        return pd.DataFrame()
    keys = ["series", "prompt_id", "round"]
    flag = cmp.rounds[keys].assign(_beyond=beyond_rounds(cmp).to_numpy())
    depths = cmp.depths.merge(flag, on=keys, how="left")
    win = windows(cmp)
    parts = []
    for side, val in zip(SIDES, (False, True)):
        r = cmp.rounds[flag["_beyond"].to_numpy() == val]
        if r.empty:
            continue
        d = depths[depths["_beyond"] == val].drop(columns="_beyond")
        # the same statistics over one side of the window
        sub = Comparison(cmp.series, d, r, [], cmp.trained_window)
        s = sub.summary()
        s = s[s["drafts"] > 0]
        s.insert(1, "side", side)
        s.insert(2, "window", [win[lab]["window"] for lab in s["series"]])
        parts.append(s)
    if not parts:
        return pd.DataFrame()
    order = {s.label: i for i, s in enumerate(cmp.series)} | {side: i for i, side in enumerate(SIDES)}
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["series", "side"], key=lambda c: c.map(order)).reset_index(drop=True)
