"""Own-draft preference on non-sink shares: the recency-matched ratio that a lost sink cannot fool.

RM(k) compares two softmax rows of one round: S = the depth-k query's mass on its k-1 own drafted slots, C = the
depth-1 query's mass on its k-1 most recent (prompt) keys. Each is a share of its own row, so when the sink's
share of a head falls from s1 at depth 1 to sk at depth k, every other key's share rises by (1 - sk) / (1 - s1),
the own slots' included: a drafter whose non-sink attention depends on key distance alone, and whose sink logit
merely drops after depth 1, reads S / C = (1 - sk) / (1 - s1) > 1, i.e. "drift" without any preference for its
own drafts (the sink-initialised EAGLE-3.1 at initialisation: 1.85 raw, 1.01 on non-sink shares).

Renormalising each row over its non-sink keys cancels any change of the sink's share between the two rows:

    S*_h = S_h / (1 - sink_h(k)),   C*_h = C_h / (1 - sink_h(1))      (per head h: a head is one softmax row)

and the round's values are the head means of S*_h and C*_h over the heads with a non-sink remainder above float32
resolution in both rows (a head with every key on the sink has no non-sink share to compare). Under "non-sink
attention depends on distance, not on whether a key was drafted", S*_h = C*_h up to the k-1 extra keys' share of
the normaliser, whatever the sink does; the sink's own change is read by sink retention (sink mass at K / at 1).
Per head, not on head means: the heads' sinks move differently, and a ratio of head-mean shares would reweight the
heads between the rows.

Everything comes from the per-head table every chain trace stores (heads: sink, draft, own and matched masses), so
traces captured before this statistic existed get it on read. Caveat: the control's k-1 keys are taken as non-sink
(true for position sinks once the prompt is longer than the sink positions plus the depth; a token-id sink rule
whose tokens fall among the k-1 most recent prompt keys would count them in C)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DriftError
from ..trace.metric_table import derived

NS_COLUMNS = ("self_ns", "matched_ns")  # the depths columns this module adds
SELF_PARTS = derived()["self_mass"]  # the own-slot masses the self mass sums (the metric table's row)
HEAD_COLUMNS = ["drafter", "prompt_id", "round", "depth", "head", "sink_mass", *SELF_PARTS, "matched_mass"]
TREE_HEAD_COLUMNS = ["drafter", "prompt_id", "round", "node", "depth", "head", "sink_mass", *SELF_PARTS,
                     "matched_mass"]  # what tree_node_shares reads of tree_heads
MIN_REST = 8 * 2.0 ** -23  # a non-sink remainder below float32 resolution of 1: no non-sink share to compare


def _row_shares(deep: pd.DataFrame) -> pd.DataFrame:
    """Per head row (its depth-k sink as `sink_mass`, its depth-1 sink as `sink1`): self_ns, matched_ns and
    n_ns_heads (1 where both rows have a non-sink remainder above float32 resolution, else NaN shares), float64."""
    f = np.float64
    rest_k, rest_1 = 1.0 - deep["sink_mass"].to_numpy(f), 1.0 - deep["sink1"].to_numpy(f)
    s = sum(deep[c].to_numpy(f) for c in SELF_PARTS)
    c = deep["matched_mass"].to_numpy(f)
    ok = (rest_k > MIN_REST) & (rest_1 > MIN_REST) & np.isfinite(s) & np.isfinite(c) & np.isfinite(rest_k) \
        & np.isfinite(rest_1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return pd.DataFrame({"self_ns": np.where(ok, s / rest_k, np.nan), "matched_ns": np.where(ok, c / rest_1, np.nan),
                             "n_ns_heads": ok.astype(np.int64)})


def nonsink_shares(heads: pd.DataFrame) -> pd.DataFrame:
    """Per (drafter, prompt_id, round, depth >= 2): self_ns and matched_ns, the head means of the own-slot and
    control masses renormalised over each row's non-sink keys (module doc), in float64; n_ns_heads the heads kept."""
    keys = ["drafter", "prompt_id", "round"]
    cols = ["drafter", "prompt_id", "round", "depth", "self_ns", "matched_ns", "n_ns_heads"]
    if heads.empty or not set(HEAD_COLUMNS) <= set(heads.columns):
        return pd.DataFrame(columns=cols)
    h = heads[HEAD_COLUMNS]
    one = h.loc[h["depth"] == 1, [*keys, "head", "sink_mass"]].rename(columns={"sink_mass": "sink1"})
    deep = h[h["depth"] >= 2].merge(one, on=[*keys, "head"], how="inner")
    x = pd.concat([deep[[*keys, "depth"]].reset_index(drop=True), _row_shares(deep)], axis=1)
    g = x.groupby([*keys, "depth"], observed=True, sort=False)
    out = g[["self_ns", "matched_ns"]].mean()
    out["n_ns_heads"] = g["n_ns_heads"].sum()
    return out.reset_index()[cols]


def with_nonsink(depths: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """`depths` with self_ns / matched_ns merged in (NaN at depth 1 and where the heads table lacks the round)."""
    ns = nonsink_shares(heads)
    base = depths.drop(columns=[c for c in (*NS_COLUMNS, "n_ns_heads") if c in depths.columns])
    if ns.empty:
        return base.assign(self_ns=np.nan, matched_ns=np.nan)
    ns = ns.drop(columns="n_ns_heads")
    for c in ("drafter", "prompt_id"):  # categorical keys of two tables merge on their values
        ns[c] = ns[c].astype(str)
    left = base.assign(_d=base["drafter"].astype(str), _p=base["prompt_id"].astype(str))
    out = left.merge(ns.rename(columns={"drafter": "_d", "prompt_id": "_p"}), on=["_d", "_p", "round", "depth"],
                     how="left", validate="many_to_one")
    out.index = base.index
    return out.drop(columns=["_d", "_p"])


def read_heads(trace, drafter: str | None = None) -> pd.DataFrame:
    """The per-head columns this module needs, or an empty frame when the trace has no per-head table."""
    try:
        h = trace.table("heads", HEAD_COLUMNS)
    except (DriftError, KeyError, FileNotFoundError):
        return pd.DataFrame(columns=HEAD_COLUMNS)
    return h if drafter is None else h[h["drafter"] == drafter]


def tree_node_shares(heads: pd.DataFrame) -> pd.DataFrame:
    """A tree trace's per-node non-sink shares (tree_heads): per (drafter, prompt_id, round, node, depth >= 2) the
    head means of own-path mass / (1 - the node's producer's sink) and matched / (1 - the root's sink), the root's
    sink read off any depth-1 node of the round (the root produced them all)."""
    keys = ["drafter", "prompt_id", "round"]
    cols = [*keys, "node", "depth", "self_ns", "matched_ns"]
    need = {*keys, "node", "depth", "head", "sink_mass", "matched_mass", *SELF_PARTS}
    if heads.empty or not need <= set(heads.columns):
        return pd.DataFrame(columns=cols)
    one = (heads.loc[heads["depth"] == 1, [*keys, "head", "sink_mass"]].drop_duplicates([*keys, "head"])
           .rename(columns={"sink_mass": "sink1"}))
    deep = heads[heads["depth"] >= 2].merge(one, on=[*keys, "head"], how="inner")
    x = pd.concat([deep[[*keys, "node", "depth"]].reset_index(drop=True), _row_shares(deep)], axis=1)
    return x.groupby([*keys, "node", "depth"], observed=True, sort=False)[["self_ns", "matched_ns"]].mean() \
        .reset_index()[cols]
