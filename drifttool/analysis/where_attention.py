"""Where the drafter's attention actually goes, whatever its sinks are.

A fixed "first N positions" sink region can be empty for a drafter that has found other sinks. From two cheap
per-head statistics the full rounds record (`heads.max_prob`, the head's largest weight, and `heads.top_pos`,
the key slot holding it; other rounds, `rounds.full_stats` false, store -1 and are skipped) this module
reports per series x depth: how concentrated heads are, and which kind of
position they look at hardest — position 0 (the target's natural sink when the text starts there), the next
few positions, the most recent context, the chain's own draft slots, or elsewhere in the prompt — plus the
positions that most often hold the maximum. Traces written before these columns existed give an empty frame.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.summary import CATEGORIES, EARLY, RECENT, categorise

DEFINITIONS = {
    "pos0": "key slot 0 (the first token of the text: the target's natural sink)",
    "early": f"key slots 1..{EARLY - 1}",
    "recent": f"the last {RECENT} context slots before the chain (not early)",
    "self": "this chain's own draft slots (inputs of depths 2..K)",
    "other": "any other prompt slot",
    "max_prob": "the head's largest attention weight (1 = one-hot)",
}
__all__ = ["CATEGORIES", "DEFINITIONS", "EARLY", "RECENT", "categorise"]


def _with_context(heads: pd.DataFrame, rounds: pd.DataFrame) -> pd.DataFrame | None:
    if heads.empty or "top_pos" not in heads or "max_prob" not in heads:
        return None
    keys = [c for c in ("series", "drafter", "prompt_id", "round") if c in heads and c in rounds]
    h = heads[heads["top_pos"] >= 0]  # -1: a round without full rows (rounds.full_stats false): no maximum
    if h.empty:
        return None
    h = h.merge(rounds[[*keys, "context_len"]], on=keys, how="left")
    return h.assign(where=categorise(h["top_pos"].to_numpy(), h["context_len"].to_numpy()))


def attention_targets(heads: pd.DataFrame, rounds: pd.DataFrame, by: tuple[str, ...] = ("series",)) -> pd.DataFrame:
    """Per group x depth: share of (round, head) maxima in each category, mean max_prob, n (head-rounds)."""
    h = _with_context(heads, rounds)
    if h is None:
        return pd.DataFrame()
    keys = [*by, "depth"]
    share = pd.crosstab([h[k] for k in keys], h["where"], normalize="index")
    share = share.reindex(columns=list(CATEGORIES), fill_value=0.0)
    stats = h.groupby(keys, observed=True).agg(max_prob=("max_prob", "mean"), n=("max_prob", "size"))
    return share.join(stats).reset_index()


def top_positions(heads: pd.DataFrame, rounds: pd.DataFrame, depth: int, k: int = 5,
                  by: tuple[str, ...] = ("series",)) -> pd.DataFrame:
    """The k key slots (relative to the chain: 'pos 3', 'ctx-1' = last context slot, 'draft+0' = first draft
    slot) that most often hold a head's maximum at one depth, with their share."""
    h = _with_context(heads, rounds)
    if h is None:
        return pd.DataFrame()
    h = h[h["depth"] == depth]
    t, n = h["top_pos"].to_numpy(), h["context_len"].to_numpy()
    label = np.where(t >= n, "draft+" + (t - n).astype(str),
                     np.where(t >= n - RECENT, "ctx-" + (n - t).astype(str), "pos " + t.astype(str)))
    h = h.assign(slot=label)
    out = (h.groupby([*by, "slot"]).size() / h.groupby(list(by)).size()).rename("share").reset_index()
    return out.sort_values([*by, "share"], ascending=[True] * len(by) + [False]).groupby(list(by)).head(k)


def prompt_counts(heads: pd.DataFrame, rounds: pd.DataFrame) -> pd.DataFrame:
    """Per drafter x prompt x depth: head-maxima counts per category and the max_prob sum — small enough to
    keep for a dashboard that filters prompts, and summed exactly by `from_counts`."""
    h = _with_context(heads, rounds)
    if h is None:
        return pd.DataFrame()
    keys = ["drafter", "prompt_id", "depth"]
    c = pd.crosstab([h[k] for k in keys], h["where"]).reindex(columns=list(CATEGORIES), fill_value=0)
    g = h.groupby(keys, observed=True)["max_prob"].agg(max_prob_sum="sum", n="size")
    return c.join(g).reset_index()


def from_counts(counts: pd.DataFrame, by: tuple[str, ...] = ("series",)) -> pd.DataFrame:
    """`attention_targets` from `prompt_counts` rows (after filtering prompts)."""
    if counts.empty:
        return pd.DataFrame()
    g = counts.groupby([*by, "depth"], observed=True)[[*CATEGORIES, "max_prob_sum", "n"]].sum()
    out = g[list(CATEGORIES)].div(g["n"], axis=0)
    out["max_prob"] = g["max_prob_sum"] / g["n"]
    out["n"] = g["n"]
    return out.reset_index()
