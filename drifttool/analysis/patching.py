"""What an intervention changes (a `drifttool patch` trace, run/engines/patch.py): per (clean, intervened) series
pair, paired over groups exactly as `compare` pairs two drafters:

- acceptance length: the per-group difference (intervened - clean) with its t-interval, the sign-flip p and MDE;
- acceptance per depth (vLLM's per-position rate): the per-group difference at each depth, tested per depth with
  Holm over the K depths;
- the verdict's quantities: the paired per-group factor of the recency-matched ratio at K (non-sink shares), sink
  retention and fed-back RMS growth (analysis/verdict.contrast).
Rounds are paired too (round r of both passes starts at the same context), so the groups' differences carry no
round-boundary noise; the unit of every test is still the group."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.reader import TraceData
from .compare import Comparison
from .fmt import fmt_p
from .multiple import holm_adjusted
from .stats import ALPHA, acceptance_differences, paired
from .verdict import contrast


def pairs(trace: TraceData) -> list[tuple[str, str, dict]]:
    """(clean drafter, intervened drafter, its intervention) from a patch trace's manifest."""
    out = []
    for d in trace.manifest["drafters"]:
        p = d.get("patch")
        if p:
            out.append((p["of"], d["name"], p))
    return out


def depth_differences(rounds: pd.DataFrame, clean: str, patched: str, k: int) -> pd.DataFrame:
    """Per depth d: the per-group difference of vLLM's per-position rate (rounds accepting >= d drafts), paired
    over groups, with Holm over the K depths."""
    rows = []
    for d in range(1, k + 1):
        r = rounds.assign(ok=(rounds["accepted"] >= d).astype(float))
        g = r.groupby(["series", "group"], observed=True)["ok"].mean()
        a, b = g.loc[patched], g.loc[clean]
        common = a.index.intersection(b.index)
        st = paired((a.loc[common] - b.loc[common]).to_numpy())
        rows.append({"depth": d, "clean_rate": float(b.loc[common].mean()), "difference": st["mean"],
                     "lo": st["lo"], "hi": st["hi"], "p": st["p"], "mde": st["mde"], "n_groups": st["n"]})
    out = pd.DataFrame(rows)
    out["p_holm"] = holm_adjusted(out["p"].tolist())
    return out


def effects(trace: TraceData) -> list[dict]:
    """Per intervention pair: acceptance length, acceptance per depth and the verdict's quantities, paired."""
    cmp = Comparison.of([trace])
    k = cmp.depth
    label = {s.drafter: s.label for s in cmp.series}
    out = []
    for clean, patched, iv in pairs(trace):
        c, p = label[clean], label[patched]
        r = cmp.rounds[cmp.rounds.series.isin([c, p])]
        al = acceptance_differences(r, c)
        row = al.iloc[0].to_dict() if len(al) else {}
        q = {x["quantity"]: x for x in contrast(cmp.depths[cmp.depths.series == p],
                                                cmp.depths[cmp.depths.series == c], k)}
        out.append({"clean": c, "patched": p, "intervention": iv, "k": k, "acceptance_length": row,
                    "per_depth": depth_differences(r, c, p, k), "quantities": q})
    return out


# what an intervention's acceptance change means, when it removes one thing: (it rises, it falls, neither detected)
MEANING = {("attention", "recency"): ("drift (own-draft preference beyond recency) costs acceptance here",
                                      "drift (own-draft preference beyond recency) helps acceptance here",
                                      "drift (own-draft preference beyond recency) costs no acceptance its groups "
                                      "detect"),
           ("attention", "sink"): ("the sink costs acceptance here", "the sink helps acceptance here",
                                   "the sink changes acceptance by no amount its groups detect")}


def _meaning(e: dict, diff: float, detected: bool) -> str:
    iv = e["intervention"]
    m = MEANING.get((iv.get("site"), iv.get("op")))
    if m is None or iv.get("strength", 1.0) != 1.0:
        return ""
    return "; " + (m[0] if detected and diff > 0 else m[1] if detected else m[2])


def sentence(e: dict, words: str) -> str:
    """One intervention's effect in words: what it does, its acceptance-length change (paired over groups) and
    whether that is a detected cost, gain or neither (and, for an edit that removes one thing, what that says of
    the thing removed), then the verdict's quantities."""
    a = e["acceptance_length"]
    if not a or a.get("n_groups", 0) < 1:
        return f"{words} on {e['clean']}: no paired rounds"
    diff = a["difference"]
    ci = (f" [{a['difference_lo']:+.3f}, {a['difference_hi']:+.3f}]" if np.isfinite(a["difference_lo"]) else "")
    if a.get("sd") == 0 and diff == 0:
        claim = "changes no group's acceptance at all (every paired group identical)"
    elif np.isfinite(a["p"]) and a["p"] < ALPHA:
        what = "raises" if diff > 0 else "lowers"
        claim = f"{what} acceptance here"
    else:
        mde = a["mde"]
        claim = ("changes acceptance by no amount its groups detect"
                 + (f" (they detect {mde:.3f} or more at 80% power)" if np.isfinite(mde) else
                    " (too few groups for any test)"))
    detected = bool(np.isfinite(a["p"]) and a["p"] < ALPHA)
    claim += _meaning(e, diff, detected)
    q = e["quantities"]
    parts = []
    for name, text in (("rms_growth", "fed-back RMS growth"), ("recency_ratio", "recency-matched ratio"),
                       ("sink_retention", "sink retention")):
        x = q.get(name)
        if x and x["n_groups"] and np.isfinite(x["factor"]):
            parts.append(f"{text} x{x['factor']:.2f}, {fmt_p(x['p'], 'words')}")
    tail = f"; against the clean pass: {'; '.join(parts)}" if parts else ""
    return (f"{words} on {e['clean']}: acceptance length {a['base_value']:.3f} -> {a['base_value'] + diff:.3f}, "
            f"{diff:+.3f}{ci} per group ({fmt_p(a['p'], 'words')}, {a['n_groups']} groups): it {claim}{tail}")


def answer(trace: TraceData) -> list[str]:
    """The patch trace's answer in words, one sentence per intervention pair."""
    words = (trace.manifest.get("patch") or {}).get("words", {})
    return [sentence(e, words.get(e["intervention"]["label"], e["intervention"]["label"])) for e in effects(trace)]


def effects_json(trace: TraceData) -> list[dict]:
    """effects() as JSON-able records (the per-depth table as a list)."""
    return [{**e, "per_depth": e["per_depth"].to_dict(orient="records")} for e in effects(trace)]
