"""What an intervention changes (a `drifttool patch` trace, run/engines/patch.py): per (clean, intervened) series
pair, paired over groups exactly as `compare` pairs two drafters:

- acceptance length: the per-group difference (intervened - clean) with its t-interval, the sign-flip p and MDE;
- acceptance per depth (vLLM's per-position rate): the per-group difference at each depth, tested per depth with
  Holm over the K depths;
- the verdict's quantities: the paired per-group factor of the recency-matched ratio at K (non-sink shares), sink
  retention and fed-back RMS growth (analysis/verdict.contrast).
Rounds are paired too (round r of both passes starts at the same context), so the groups' differences carry no
round-boundary noise; the unit of every test is still the group.

A prompt span (`prompt.delete`) is tested on the groups whose prompts hold it (where the intervened pass's first
round saw a shorter context than the clean one); a prompt without it would add an exact zero. `scan` ranks every
span of one clean drafter by its acceptance-length change, with Holm across the spans."""

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


DEPTH_COLUMNS = ["depth", "clean_rate", "difference", "lo", "hi", "p", "mde", "n_groups", "p_holm"]


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
        present = None
        if iv.get("site") == "prompt" and iv.get("strength", 1.0):
            r, present = _holding(r, c, p)
        if not len(r):  # a span no prompt holds: nothing to pair
            out.append({"clean": c, "patched": p, "intervention": iv, "k": k, "acceptance_length": {},
                        "per_depth": pd.DataFrame(columns=DEPTH_COLUMNS), "quantities": {}, "present": present})
            continue
        al = acceptance_differences(r, c)
        row = al.iloc[0].to_dict() if len(al) else {}
        q = {x["quantity"]: x for x in contrast(cmp.depths[cmp.depths.series == p],
                                                cmp.depths[cmp.depths.series == c], k)}
        out.append({"clean": c, "patched": p, "intervention": iv, "k": k, "acceptance_length": row,
                    "per_depth": depth_differences(r, c, p, k), "quantities": q, "present": present})
    return out


def _holding(r: pd.DataFrame, c: str, p: str) -> tuple[pd.DataFrame, dict]:
    """The rounds of the prompts a span was deleted from (the intervened first round saw fewer slots), and how many
    prompts and groups hold it, with the mean number of tokens deleted."""
    first = r[r["round"] == 0].pivot_table(index="prompt_id", columns="series", values="context_len",
                                           observed=True, aggfunc="first")
    cut = (first[c] - first[p]) if {c, p} <= set(first.columns) else pd.Series(dtype=float)
    held = cut[cut > 0]
    kept = r[r["prompt_id"].isin(held.index)]
    return kept, {"prompts": int(len(held)), "of_prompts": int(len(first)),
                  "groups": int(kept["group"].nunique()), "of_groups": int(r["group"].nunique()),
                  "tokens": float(held.mean()) if len(held) else 0.0}


def scan(trace: TraceData, es: list[dict] | None = None) -> pd.DataFrame:
    """Every prompt span of a patch trace, per clean drafter, ranked by the size of its acceptance-length change
    (intervened - clean, per group), with Holm across that drafter's spans; empty without spans. `es`: the
    trace's effects() when already computed."""
    rows = []
    words = (trace.manifest.get("patch") or {}).get("words", {})
    for e in (effects(trace) if es is None else es):
        iv, a = e["intervention"], e["acceptance_length"]
        if not _is_span(e):
            continue
        rows.append({"clean": e["clean"], "span": iv["span"], "label": iv["label"],
                     "words": words.get(iv["label"], iv["span"]), "difference": a.get("difference", np.nan),
                     "lo": a.get("difference_lo", np.nan), "hi": a.get("difference_hi", np.nan),
                     "p": a.get("p", np.nan), "mde": a.get("mde", np.nan), "n_groups": a.get("n_groups", 0),
                     "prompts": e["present"]["prompts"], "of_prompts": e["present"]["of_prompts"],
                     "tokens": e["present"]["tokens"]})
    out = pd.DataFrame(rows, columns=["clean", "span", "label", "words", "difference", "lo", "hi", "p", "mde",
                                      "n_groups", "prompts", "of_prompts", "tokens"])
    parts = []
    for _, g in out.groupby("clean", sort=False):
        tested = g["n_groups"].fillna(0).to_numpy() > 0  # the family: spans some prompt holds
        ph = np.full(len(g), np.nan)
        ph[tested] = holm_adjusted(g["p"][tested].fillna(1.0).tolist())
        g = g.assign(p_holm=ph, size=g["difference"].abs().fillna(-1.0))
        g = g.sort_values(["size", "p"], ascending=[False, True], kind="stable").drop(columns="size")
        parts.append(g.assign(rank=np.arange(1, len(g) + 1)))
    return pd.concat(parts, ignore_index=True) if parts else out.assign(p_holm=[], rank=[])


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


SCAN_LINES = 3  # more spans than this on one drafter: one ranked line instead of a sentence per span


def answer(trace: TraceData, es: list[dict] | None = None) -> list[str]:
    """The patch trace's answer in words, one sentence per intervention pair; a drafter's prompt spans, when there
    are more than SCAN_LINES of them (a scan), as one ranked line. `es`: the trace's effects() when computed."""
    words = (trace.manifest.get("patch") or {}).get("words", {})
    es = effects(trace) if es is None else es
    spans = {}
    for e in es:
        if _is_span(e):
            spans.setdefault(e["clean"], []).append(e)
    ranked = {c for c, v in spans.items() if len(v) > SCAN_LINES}
    out = [sentence(e, _span_words(e, words.get(e["intervention"]["label"], e["intervention"]["label"])))
           for e in es if not (_is_span(e) and e["clean"] in ranked)]
    table = scan(trace, es) if ranked else None
    return out + [scan_line(table[table["clean"] == c]) for c in ranked]


def _is_span(e: dict) -> bool:
    """A prompt span actually deleted (strength 0 is the identity check, not a candidate span)."""
    return e["intervention"].get("site") == "prompt" and e.get("present") is not None


def _span_words(e: dict, words: str) -> str:
    pr = e.get("present")
    if not pr:
        return words
    if pr["prompts"] == 0:
        return f"{words} (in no prompt)"
    return (f"{words} ({pr['tokens']:.1f} tokens on average; in {pr['prompts']} of {pr['of_prompts']} prompts, "
            f"{pr['groups']} of {pr['of_groups']} groups, tested on those)")


def mde_clause(t: pd.DataFrame) -> str:
    """What the spans' groups could detect: the range of their minimum detectable changes (80% power, one span's
    own test, before Holm) over the spans some prompt holds."""
    m = t["mde"].to_numpy(dtype=float)
    m = m[np.isfinite(m) & (m > 0)]  # a span that changes no round at all has no spread to size an effect by
    if not len(m):
        return " (no span changed any round, or too few groups for a test)"
    return (f" (each span's groups detect a change of {m.min():.3f}-{m.max():.3f} tokens per round or more at 80% "
            "power, before Holm)")


def scan_line(t: pd.DataFrame) -> str:
    """One drafter's span scan in words: how many spans, how many detected after Holm, the largest moves."""
    c = t["clean"].iloc[0]
    absent = int((t["n_groups"].fillna(0) == 0).sum())
    t = t[t["n_groups"].fillna(0) > 0]
    hit = t[t["p_holm"] < ALPHA]
    top = []
    for _, r in t.head(SCAN_LINES).iterrows():
        ci = f" [{r['lo']:+.3f}, {r['hi']:+.3f}]" if np.isfinite(r["lo"]) else ""
        top.append(f"{int(r['rank'])}. {r['words'].split(' deleted from')[0]}: {r['difference']:+.3f}{ci} "
                   f"({fmt_p(r['p_holm'], 'words')} after Holm, {int(r['n_groups'])} groups)")
    found = (f"{len(hit)} of {len(t)} move{'s' if len(hit) == 1 else ''} acceptance after Holm ("
             + ", ".join(hit["span"]) + ")" if len(hit) else
             f"none of the {len(t)} moves acceptance by an amount its groups detect after Holm"
             + mde_clause(t))
    none = f"; {absent} span{'s' if absent != 1 else ''} in no prompt" if absent else ""
    return (f"prompt-span scan on {c} (each span deleted from the drafter's context, the target reading the whole "
            f"prompt; acceptance length per group, Holm across the {len(t)} spans some prompt holds{none}): "
            f"{found}" + ("; the largest changes: " + "; ".join(top) if top else ""))


def effects_json(trace: TraceData) -> list[dict]:
    """effects() as JSON-able records (the per-depth table as a list; a prompt span with its scan rank and Holm p
    across its drafter's spans)."""
    es = effects(trace)
    ranks = scan(trace, es).set_index(["clean", "label"])
    out = []
    for e in es:
        key = (e["clean"], e["intervention"]["label"])
        extra = ({"scan": {"rank": int(ranks.loc[key, "rank"]), "p_holm": float(ranks.loc[key, "p_holm"]),
                           "of_spans": int((ranks.index.get_level_values(0) == e["clean"]).sum())}}
                 if key in ranks.index else {})
        out.append({**e, "per_depth": e["per_depth"].to_dict(orient="records"), **extra})
    return out
