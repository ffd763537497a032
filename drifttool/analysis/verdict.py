"""The drift verdict: does a drafter's attention move onto its own drafts with depth, read against the right null.

Every trained drafter favours its newest keys, so attention per own slot falls with depth even when nothing drifts
(its first own slot sits at distance 0, each further one farther away): uniform attention is the wrong null for
the self mass. The null here is **recency**: per round r and depth k >= 2,

    S_r(k) = mass on the k-1 own (drafted) slots = the query's k-1 most recent keys      (self_mass)
    C_r(k) = the same round's depth-1 mass on its k-1 most recent keys (prompt tokens)   (matched_mass)

each **renormalised over its row's non-sink keys, per head** (analysis/nonsink.py: S / (1 - sink at depth k),
C / (1 - sink at depth 1); a sink that fades between depth 1 and k would otherwise raise every other key's share,
own slots included, and read as drift), and the **recency-matched ratio** RM(k) = sum_r S*_r(k) / sum_r C*_r(k).
A drafter whose non-sink attention depends on key distance alone, not on whether a key was drafted, has RM = 1 for
any recency profile and whatever its sink does (up to the k-1 extra keys' share of the normaliser: uniform
attention gives (n - n_sink) / (n - n_sink + k - 1), reported beside RM as its uniform value). RM > 1: its own
drafts draw more than equally recent prompt tokens did — drift. A trace without the per-head table falls back to
the raw shares (`recency_basis` says which). Per group g (a source document) RM_g(k) = its rounds' sums; the CI is
a group bootstrap of the ratio of sums (10,000 draws), the test a sign-flip test over groups of log RM_g(k)
(stats.paired), its MDE a factor.

**The curve, not one depth.** RM(k) is tested at every depth k = 2..K (K - 1 tests, Holm's step-down over them:
`recency_curve`), so drift that is present early and gone by K ("drift at depths 2-3") is reported, and a single
deep depth does not decide alone.

**Sink retention**: sink mass at depth K / at depth 1 over the same rounds, same CI and test; stated wherever the
depth-1 sink lift's CI lies above 1 (a sink the drafter could lose).

One verdict per drafter, `drift_verdict`:
- "uniform": every lift (sink, recent and template at depth 1, self at every depth) inside the flat band
  (|log x| < log FLAT): the drafter attends no key more than another; nothing else is said;
- "drift": RM(k) > 1 detected at one depth or more (Holm-adjusted p < 0.05, the groups' mean log ratio and the
  pooled ratio both above, the pooled ratio outside the flat band); `drift_depths` names them;
- "no drift": at every depth, RM(k) < 1 detected or its CI's upper end at or below EQUIV (an equivalence statement
  per depth; all must hold, so no multiplicity correction is needed for it);
- "not established": otherwise (with the MDE), or where the trace lacks what the verdict needs (its reason).
Lifts, ratios and group changes are computed in float64 from the stored float32 values; a group log ratio below
float32 resolution counts as 0 before the test (an exactly uniform drafter's 1.0000000105 is 1)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..trace import metric_table
from .metrics import MIN_CLUSTERS, bootstrap_ratio
from .multiple import holm_adjusted
from .stats import ALPHA, paired

FLAT = 1.05  # a lift or ratio within x/÷ 1.05 of 1 reads flat / uniform
EQUIV = 1.10  # RM's CI inside [1/1.10, 1.10]: no drift (an equivalence statement)
N_BOOT = 10_000
LOG_TOL = 8 * 2.0 ** -23  # group log ratios below float32 resolution (a few ulps of 1) count as 0
VERDICTS = ("drift", "no drift", "not established", "uniform")
RM_BASES = {"non-sink shares": ("self_ns", "matched_ns"), "raw shares": ("self_mass", "matched_mass")}
LIFT_COLUMNS = metric_table.lifts()  # lift -> (mass, key count), from the metric table


def flat(x: float, band: float = FLAT) -> bool:
    """x within the flat band around 1 (NaN is not flat)."""
    return bool(np.isfinite(x) and x > 0 and abs(math.log(x)) < math.log(band))


def lifts64(d: pd.DataFrame) -> pd.DataFrame:
    """The lifts of a depths table recomputed in float64 from the stored masses and key counts."""
    out = {}
    for lift, (mass, count) in LIFT_COLUMNS.items():
        if mass in d and count in d and "n_keys" in d:
            c = d[count].to_numpy(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[lift] = np.where(c > 0, d[mass].to_numpy(np.float64) * d["n_keys"].to_numpy(np.float64) / c,
                                     np.nan)
    return pd.DataFrame(out, index=d.index)


def paired_sums(d: pd.DataFrame, num: tuple[str, int], den: tuple[str, int]) -> pd.DataFrame:
    """Per group: sum of metric num[0] at depth num[1] and of den[0] at depth den[1] over the rounds that have both
    finite (each round paired with itself), in float64."""
    key = ["prompt_id", "round"] if "round" in d.columns else ["prompt_id"]
    if num[0] not in d or den[0] not in d:
        return pd.DataFrame(columns=["group", "num", "den", "rounds"])
    if num[1] == den[1]:  # one row holds both (RM(k): own slots and their control at depth k)
        a = d.loc[d.depth == num[1], ["group", num[0], den[0]]]
        both = pd.DataFrame({"group": a["group"], "num": a[num[0]].astype(np.float64),
                             "den": a[den[0]].astype(np.float64)})
    else:
        a = d.loc[d.depth == num[1], [*key, "group", num[0]]].set_index(key)
        b = d.loc[d.depth == den[1], [*key, den[0]]].set_index(key)[den[0]]
        both = a.join(b.rename("den_"), how="inner")
        both = pd.DataFrame({"group": both["group"], "num": both[num[0]].astype(np.float64),
                             "den": both["den_"].astype(np.float64)})
    both = both[np.isfinite(both["num"]) & np.isfinite(both["den"])]
    g = both.groupby("group", observed=True).agg(num=("num", "sum"), den=("den", "sum"), rounds=("den", "size"))
    return g.reset_index()


def log_ratios(g: pd.DataFrame) -> np.ndarray:
    """Per group log(num / den), float64; |x| below float32 resolution set to 0; groups with a zero side dropped."""
    num, den = g["num"].to_numpy(np.float64), g["den"].to_numpy(np.float64)
    ok = (num > 0) & (den > 0)
    x = np.log(num[ok] / den[ok])
    x[np.abs(x) < LOG_TOL] = 0.0
    return x


def ratio_test(g: pd.DataFrame) -> dict[str, float]:
    """A ratio of sums over groups: pooled value with a group-bootstrap CI (N_BOOT draws), and the sign-flip test
    over groups of the log ratios (p, the mean log ratio, n groups, the MDE as a factor)."""
    if g.empty:
        return {"value": np.nan, "lo": np.nan, "hi": np.nan, "p": np.nan, "mean_log": np.nan, "n": 0,
                "mde_factor": np.inf}
    value, lo, hi = bootstrap_ratio(g["num"].to_numpy(np.float64), g["den"].to_numpy(np.float64), n_boot=N_BOOT)
    st = paired(log_ratios(g))
    return {"value": value, "lo": lo, "hi": hi, "p": st["p"], "mean_log": st["mean"], "n": st["n"],
            "mde_factor": float(np.exp(st["mde"])) if np.isfinite(st["mde"]) else np.inf}


def rm_basis(d: pd.DataFrame) -> str:
    """Which shares RM reads: non-sink (analysis/nonsink.py columns present and measured), else raw."""
    return "non-sink shares" if "matched_ns" in d and bool(d["matched_ns"].notna().any()) else "raw shares"


def recency_ratio(d: pd.DataFrame, k: int) -> dict[str, float]:
    """RM(k) of one series' depths rows (module doc), with its uniform-attention value over the same rounds."""
    num, den = RM_BASES[rm_basis(d)]
    out = ratio_test(paired_sums(d, (num, k), (den, k)))
    out["uniform"] = uniform_recency_ratio(d, k)
    return out


def uniform_recency_ratio(d: pd.DataFrame, k: int) -> float:
    """What uniform attention gives RM(k) over these rounds: sum (k-1)/n(k) / sum (k-1)/n(1), n the keys the row
    saw (less its sink keys on non-sink shares)."""
    if "n_keys" not in d or "n_self" not in d:
        return np.nan
    ns = rm_basis(d) == "non-sink shares" and "n_sink" in d
    key = ["prompt_id", "round"]
    a = d[d.depth == k].set_index(key)
    b = d[d.depth == 1].set_index(key)
    n1 = b["n_keys"].astype(np.float64) - (b["n_sink"].astype(np.float64) if ns else 0.0)
    both = a.join(n1.rename("n1"), how="inner")
    both = both[np.isfinite(both["matched_mass"].astype(np.float64))] if "matched_mass" in both else both.iloc[:0]
    if both.empty:
        return np.nan
    nk = both["n_keys"].astype(np.float64) - (both["n_sink"].astype(np.float64) if ns else 0.0)
    s = (both["n_self"].astype(np.float64) / nk).sum()
    c = (np.minimum(both["n_self"].astype(np.float64), both["n1"]) / both["n1"]).sum()
    return float(s / c) if c > 0 else np.nan


def sink_retention(d: pd.DataFrame, k: int) -> dict[str, float]:
    """Sink mass at depth k / at depth 1 over the same rounds (module doc)."""
    return ratio_test(paired_sums(d, ("sink_mass", k), ("sink_mass", 1)))


def rms_growth(d: pd.DataFrame, k: int) -> dict[str, float]:
    """RMS of the fed-back layer input at depth k / at depth 1 over the same rounds, tested like RM."""
    return ratio_test(paired_sums(d, ("rms_in", k), ("rms_in", 1)))


def rm_curve(d: pd.DataFrame, k_max: int) -> dict[int, dict[str, float]]:
    """RM(k) for k = 2..K (recency_ratio), each with `p_holm`: its p adjusted by Holm over the K - 1 depths."""
    curve = {k: recency_ratio(d, k) for k in range(2, k_max + 1)}
    for k, p in zip(curve, holm_adjusted([r["p"] for r in curve.values()])):
        curve[k]["p_holm"] = p
    return curve


def recency_curve(d: pd.DataFrame, k_max: int) -> pd.DataFrame:
    """RM(k), k = 2..K, of one series, with CIs, p and the Holm-adjusted p, and whether each depth is read as own-
    draft preference (`drift`: detected above under Holm) or its absence (`no_drift`: detected below, or the CI's
    upper end at or below EQUIV)."""
    rows = []
    basis = rm_basis(d)
    for k, r in rm_curve(d, k_max).items():
        rows.append({"depth": k, "recency_ratio": r["value"], "recency_ratio_lo": r["lo"],
                     "recency_ratio_hi": r["hi"], "recency_ratio_p": r["p"], "recency_ratio_p_holm": r["p_holm"],
                     "recency_ratio_uniform": r["uniform"], "recency_ratio_mde": r["mde_factor"], "n_groups": r["n"],
                     "drift": depth_drift(r), "no_drift": depth_no_drift(r), "recency_basis": basis})
    return pd.DataFrame(rows)


def depth_drift(r: dict) -> bool:
    """Own-draft preference detected at this depth: Holm-adjusted p < alpha, above 1 on both the groups' mean log
    and the pooled ratio, outside the flat band."""
    return detected({**r, "p": r.get("p_holm", r["p"])}, +1) and not flat(r["value"])


def depth_no_drift(r: dict) -> bool:
    """Its absence at this depth: RM < 1 detected (outside the flat band), or the CI's upper end <= EQUIV."""
    if r["n"] < MIN_CLUSTERS:
        return False
    hi = r["hi"]
    return bool((detected(r, -1) and not flat(r["value"])) or (np.isfinite(hi) and hi <= EQUIV))


def span(depths: list[int]) -> str:
    """[2, 3, 5, 6, 7] -> '2-3, 5-7' (en dashes)."""
    out, run = [], []
    for k in sorted(depths):
        if run and k != run[-1] + 1:
            out.append(run)
            run = []
        run.append(k)
    if run:
        out.append(run)
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}\u2013{r[-1]}" for r in out)


def unspan(text: str) -> set[int]:
    """'2-3, 5-7' (en dashes) -> {2, 3, 5, 6, 7}: span's inverse."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        a, _, b = part.partition("\u2013")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def detected(r: dict | pd.Series, side: int) -> bool:
    """The paired test detects the ratio on `side` (+1 above 1, -1 below): p < alpha and the groups' mean log ratio
    and the pooled ratio on that side."""
    p, ml, v = r["p"], r["mean_log"], r["value"]
    if not (np.isfinite(p) and p < ALPHA and np.isfinite(ml) and np.isfinite(v) and v > 0):
        return False
    return bool(np.sign(ml) == side and np.sign(math.log(v)) == side)


def is_uniform(lifts_d: pd.DataFrame, depth: pd.Series) -> bool:
    """Every lift measured (sink / recent / template at depth 1, self at every depth >= 2), head-mean per depth over
    the rounds, inside the flat band."""
    checks = []
    d1 = lifts_d[depth.to_numpy() == 1]
    for c in ("sink_lift", "recent_lift", "template_lift"):
        if c in d1 and d1[c].notna().any():
            checks.append(float(d1[c].mean()))
    if "self_lift" in lifts_d:
        per = lifts_d["self_lift"].groupby(depth.to_numpy()).mean().dropna()
        checks += per.tolist()
    return bool(checks) and all(flat(x) for x in checks)


def classify(curve: dict[int, dict], uniform: bool, recorded: bool, k: int) -> tuple[str, str]:
    """(drift_verdict, why) from the RM curve's statistics (rm_curve: depth -> recency_ratio's dict with p_holm)."""
    if uniform:
        return "uniform", "every lift within x/÷ 1.05 of uniform attention"
    if k < 2:
        return "not established", "depth 1 only: no own slot to attend"
    if not recorded:
        return "not established", "recency-matched ratio not recorded in this trace; recapture"
    rm = curve.get(k)
    if rm is None or not np.isfinite(rm["value"]):
        return "not established", f"no round reached depth {k} with its control"
    if rm["n"] < MIN_CLUSTERS:
        return "not established", f"{rm['n']} groups: no test over fewer than {MIN_CLUSTERS} can reach p < 0.05"
    up = [d for d, r in curve.items() if np.isfinite(r["value"]) and depth_drift(r)]
    if up:
        where = f"depth {up[0]}" if len(up) == 1 else f"depths {span(up)}"
        gone = "" if k in up else f"; not detected at depth {k}"
        return "drift", f"own drafts draw more than equally recent prompt tokens did at {where}{gone}"
    return _absent_or_open(curve, rm, k)


def _absent_or_open(curve: dict[int, dict], rm: dict, k: int) -> tuple[str, str]:
    """No depth detects drift: 'no drift' when every depth excludes it, else 'not established' naming the open
    depths and what their groups detect."""
    measured = {d: r for d, r in curve.items() if np.isfinite(r["value"])}
    open_ = [d for d, r in measured.items() if not depth_no_drift(r)]
    if not open_:
        below = detected(rm, -1) and not flat(rm["value"])
        return "no drift", ("own drafts draw less than equally recent prompt tokens did" if below else
                            f"CI inside the equivalence band [{1 / EQUIV:.2f}, {EQUIV:.2f}]") + \
            f" (every depth 2\u2013{k} excludes own-draft preference above x{EQUIV:.2f})"
    worst = max(open_, key=lambda d: measured[d]["mde_factor"])
    where = f"depth {open_[0]}" if len(open_) == 1 else f"depths {span(open_)}"
    return "not established", (f"at {where} the groups neither detect own-draft preference nor exclude it above "
                               f"x{EQUIV:.2f} (they detect a factor of x{measured[worst]['mde_factor']:.2f} or more "
                               "at 80% power)")


def summary_columns(d: pd.DataFrame, k: int, recorded: bool) -> dict[str, object]:
    """The verdict's columns of one series' summary row (compare --json): RM(K), sink retention and fed-back RMS
    growth with CI, p, mean log, n and MDE; the curve's depths read as drift and its maximum (with its Holm p)."""
    curve = rm_curve(d, k) if k >= 2 else {}
    rm = curve.get(k, {**ratio_test(pd.DataFrame()), "uniform": np.nan})
    ret = sink_retention(d, k) if k >= 2 else ratio_test(pd.DataFrame())
    growth = rms_growth(d, k) if k >= 2 else ratio_test(pd.DataFrame())
    l64 = lifts64(d)
    verdict, why = classify(curve, is_uniform(l64, d["depth"]), recorded, k)
    out: dict[str, object] = {"drift_verdict": verdict, "drift_why": why}
    for name, r in (("recency_ratio", rm), ("sink_retention", ret), ("rms_growth", growth)):
        out.update({name: r["value"], f"{name}_lo": r["lo"], f"{name}_hi": r["hi"], f"{name}_p": r["p"],
                    f"{name}_mean_log": r["mean_log"], f"{name}_n": r["n"], f"{name}_mde": r["mde_factor"]})
    out["recency_ratio_uniform"] = rm.get("uniform", np.nan)
    out["recency_basis"] = rm_basis(d)
    up = [x for x, r in curve.items() if np.isfinite(r["value"]) and depth_drift(r)] if verdict != "uniform" else []
    out["drift_depths"] = span(up)
    finite = {x: r for x, r in curve.items() if np.isfinite(r["value"])}
    top = max(finite, key=lambda x: finite[x]["value"]) if finite else None
    t = finite.get(top, {})
    out.update({"recency_ratio_max": t.get("value", np.nan), "recency_ratio_max_depth": top,
                "recency_ratio_max_lo": t.get("lo", np.nan), "recency_ratio_max_hi": t.get("hi", np.nan),
                "recency_ratio_max_p_holm": t.get("p_holm", np.nan)})
    return out


def contrast(d: pd.DataFrame, base: pd.DataFrame, k: int) -> list[dict[str, float]]:
    """Per quantity (RM(K), sink retention, fed-back RMS growth): the paired per-group contrast of a series against
    its baseline, as a factor exp(mean of log ratio differences) with a t-interval and the sign-flip p."""
    rows = []
    rn, rd = RM_BASES[rm_basis(d) if rm_basis(d) == rm_basis(base) else "raw shares"]
    for q, num, den in (("recency_ratio", (rn, k), (rd, k)),
                        ("sink_retention", ("sink_mass", k), ("sink_mass", 1)),
                        ("rms_growth", ("rms_in", k), ("rms_in", 1))):
        a, b = paired_sums(d, num, den), paired_sums(base, num, den)
        a = a[(a["num"] > 0) & (a["den"] > 0)].set_index("group")
        b = b[(b["num"] > 0) & (b["den"] > 0)].set_index("group")
        common = a.index.intersection(b.index)
        x = (np.log(a.loc[common, "num"] / a.loc[common, "den"])
             - np.log(b.loc[common, "num"] / b.loc[common, "den"])).to_numpy(np.float64, copy=True)
        x[np.abs(x) < LOG_TOL] = 0.0
        st = paired(x)
        rows.append({"quantity": q, "factor": float(np.exp(st["mean"])) if st["n"] else np.nan,
                     "factor_lo": float(np.exp(st["lo"])), "factor_hi": float(np.exp(st["hi"])), "p": st["p"],
                     "n_groups": st["n"], "mde_factor": float(np.exp(st["mde"])) if np.isfinite(st["mde"]) else np.inf})
    return rows
