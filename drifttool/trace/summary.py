"""Per-prompt head summary: per (drafter, prompt, depth, head) sums over the prompt's rounds, written with every
shard, so pages that show head means or where heads look never read the per-round heads table.

Where heads look: each head's largest weight sits on a key slot of one kind (`categorise`); the summary counts
them per kind, so analysis.where_attention can pool any selection of prompts exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .schema import HEAD_SUMMARY, MEASURED_MASSES

RECENT = 16  # context slots counted as "recent" (the last 16 before the chain)
EARLY = 4  # positions 1..3 are "early" (StreamingLLM keeps 4 sink tokens)
CATEGORIES = ("pos0", "early", "recent", "self", "other")
_KEYS = ["drafter", "prompt_id", "depth", "head"]


def categorise(top_pos: np.ndarray, context_len: np.ndarray) -> np.ndarray:
    """Category of each argmax slot, given the round's context length n (slots >= n are draft slots)."""
    t, n = np.asarray(top_pos), np.asarray(context_len)
    out = np.full(t.shape, "other", dtype=object)
    out[(t >= n - RECENT) & (t < n)] = "recent"
    out[(t >= 1) & (t < EARLY)] = "early"
    out[t == 0] = "pos0"
    out[t >= n] = "self"
    return out


def head_summary(heads: pd.DataFrame, rounds: pd.DataFrame | None) -> pd.DataFrame:
    """The `head_summary` rows of a heads table (any set of prompts); `rounds` gives each round's context
    length for the slot kinds (without it, or without heads.max_prob/top_pos, no maxima are counted)."""
    f64 = lambda c: heads[c].to_numpy(np.float64, na_value=np.nan)  # noqa: E731
    out = pd.DataFrame({k: heads[k] for k in _KEYS})
    out["n"] = np.ones(len(heads), np.int64)
    for c in MEASURED_MASSES:
        out[f"{c}_sum"] = f64(c)
    ent = f64("entropy")
    fin = np.isfinite(ent)
    out["entropy_sum"], out["entropy_n"] = np.where(fin, ent, 0.0), fin.astype(np.int64)
    kinds = {k: np.zeros(len(heads), np.int64) for k in CATEGORIES}
    mp, has = np.zeros(len(heads)), np.zeros(len(heads), bool)
    if rounds is not None and {"max_prob", "top_pos"} <= set(heads.columns) and len(heads):
        on = ["drafter", "prompt_id", "round"]
        ctx = (
            heads[on]
            .astype(str)
            .merge(rounds[[*on, "context_len"]].astype({c: str for c in on}), on=on, how="left")[
                "context_len"
            ]
            .to_numpy(np.float64, na_value=np.nan)
        )
        mp = f64("max_prob")
        top = heads["top_pos"].to_numpy(np.float64, na_value=np.nan)
        has = np.isfinite(mp) & np.isfinite(top) & (top >= 0)
        cat = categorise(top, ctx)
        for k in CATEGORIES:
            kinds[k] = ((cat == k) & has).astype(np.int64)
    out["max_prob_sum"], out["max_n"] = np.where(has, mp, 0.0), has.astype(np.int64)
    for k in CATEGORIES:
        out[k] = kinds[k]
    g = out.groupby(_KEYS, observed=True, sort=True).sum().reset_index()
    return g[HEAD_SUMMARY]
