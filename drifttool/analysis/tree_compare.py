"""Per-depth statistics of tree traces, split by branch: the main path (rank 0 at every step: what a top-1 chain
drafter would have drafted), the side branches (some rank > 0 on the path), the accepted path, and all nodes. Means
over nodes, with the chain's per-depth interval: a 95% percentile bootstrap of the same node mean over groups
(metrics.bootstrap_ratio: whole groups resampled, a group being a prompt's source document), none below
metrics.MIN_CLUSTERS groups. Tree traces follow the chain's identity and compatibility rules: a folder given twice is
refused, labels are unique per trace (a/x.drift and b/x.drift: 'a/x', 'b/x'), and traces must share mode and sink
definition."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DriftError
from ..trace.reader import TraceData, group_of_id

METRICS = ("self_mass", "sink_mass", "prompt_mass", "entropy", "accepted")


def branch_of(nodes: pd.DataFrame) -> dict[str, pd.Series]:
    """Boolean row selections of tree_nodes per branch."""
    return {
        "main path": nodes.main_path,
        "side branches": ~nodes.main_path,
        "accepted path": nodes.accepted,
        "all nodes": pd.Series(True, index=nodes.index),
    }


def tree_depth_table(traces: list[TraceData]) -> pd.DataFrame:
    """One row per trace x drafter x branch x depth: node count, groups, per-metric node mean and its 95% group
    bootstrap CI (`{m}_lo`, `{m}_hi`: NaN below MIN_CLUSTERS groups; `accepted` = the fraction of the branch's
    nodes that the target accepted)."""
    from .compare import check_distinct, trace_labels
    from .metrics import bootstrap_ratio

    chains = [t.path.name for t in traces if not t.is_tree]
    if chains:
        raise DriftError(
            f"compare: {chains[0]} is a chain trace; tree traces (--tree) are compared among themselves"
        )
    check_distinct(traces)
    base = traces[0].manifest["capture"]
    for t in traces[1:]:
        c = t.manifest["capture"]
        for key in ("mode", "sink"):
            if c.get(key) != base.get(key):
                raise DriftError(
                    f"{t.path}: capture {key} {c.get(key)!r} differs from {traces[0].path}'s {base.get(key)!r}; "
                    "traces must share mode and sink definition to be compared")
    out = []
    for t, label in zip(traces, trace_labels(traces)):
        raw = t.tree_nodes
        nodes = raw.assign(accepted=raw.accepted.astype(float))
        for name, sel in branch_of(raw).items():
            sub = nodes[sel]
            for (drafter, depth), g in sub.groupby(["drafter", "depth"], observed=True):
                row = {
                    "trace": label,
                    "drafter": drafter,
                    "branch": name,
                    "depth": int(depth),
                    "nodes": len(g),
                    "prompts": g.prompt_id.nunique(),
                }
                ids = g.prompt_id.astype(str)
                got = ids.map(t.groups)
                grp = got.where(got.notna(), group_of_id(ids))
                row["groups"] = grp.nunique()
                # per group: sum and count of each metric's non-NaN nodes; centre and interval are both the
                # pooled node mean (resampling whole groups), as for the chain's per-depth means
                per_group = g.assign(_group=grp.to_numpy()).groupby("_group")[list(METRICS)].agg(["sum", "count"])
                for m in METRICS:
                    est, lo, hi = bootstrap_ratio(per_group[(m, "sum")].to_numpy(), per_group[(m, "count")].to_numpy())
                    row.update({m: float(est), f"{m}_lo": float(lo), f"{m}_hi": float(hi)})
                out.append(row)
    cols = [
        "trace",
        "drafter",
        "branch",
        "depth",
        "nodes",
        "prompts",
        "groups",
        *(c for m in METRICS for c in (m, f"{m}_lo", f"{m}_hi")),
    ]
    return pd.DataFrame(out, columns=cols)


def tree_round(nodes: pd.DataFrame, drafter: str, prompt_id: str, round_: int) -> pd.DataFrame:
    """One round's nodes (for drawing the tree), root excluded; DriftError when the round is not in the trace."""
    g = nodes[(nodes.drafter == drafter) & (nodes.prompt_id == prompt_id) & (nodes["round"] == round_)]
    if g.empty:
        raise DriftError(
            f"tree round: no nodes for drafter {drafter!r}, prompt {prompt_id!r}, round {round_}"
        )
    return g.sort_values("node").reset_index(drop=True)


def render_tree_table(console, tab: pd.DataFrame) -> None:
    """The terminal table of `tree_depth_table`: one block per trace/drafter (drafters in the one series order),
    branches per depth; each interval under its value (folding to fit 80 columns), none below MIN_CLUSTERS groups:
    the groups are shown beside the nodes, so a bare value says why."""
    from rich.table import Table

    from ..styles import series_order
    from .metrics import MIN_CLUSTERS
    from .report_table import fmt

    rank = {d: i for i, d in enumerate(series_order([str(d) for d in tab["drafter"].unique()]))} if len(tab) else {}
    blocks = sorted(tab.groupby(["trace", "drafter"], sort=False, observed=True),
                    key=lambda kv: (str(kv[0][0]), rank[str(kv[0][1])]))
    for (trace, drafter), g in blocks:
        t = Table(title=f"{trace} / {drafter}: per depth, by branch (node mean, [95% CI over groups])")
        for c in ("depth", "branch", "nodes /\ngroups", "self\nmass", "sink\nmass", "entropy", "accepted"):
            t.add_column(c, justify="right" if c != "branch" else "left", no_wrap=c in ("depth", "branch"),
                         overflow="fold")
        for _, r in g.sort_values(["depth", "branch"]).iterrows():
            t.add_row(
                str(r.depth),
                r.branch,
                f"{r.nodes} / {r.groups}",
                *(fmt(r[m], r[f"{m}_lo"], r[f"{m}_hi"]) for m in ("self_mass", "sink_mass", "entropy", "accepted")),
            )
        console.print(t)
        few = sorted({int(k) for k in g["groups"] if k < MIN_CLUSTERS})
        if few:
            n = f"{few[0]}" if len(few) == 1 else f"{few[0]}-{few[-1]}"
            console.print(f"Rows over n = {n} groups: too few for an interval (the group bootstrap needs "
                          f"{MIN_CLUSTERS} or more; docs/statistics.md).", markup=False)


def tree_verdicts(traces: list[TraceData]) -> pd.DataFrame:
    """The drift verdict of tree traces, per trace x drafter, over all drafted nodes: the recency-matched ratio of a
    node at depth k is its producer query's mass on the k - 1 own slots of its path against the root query's mass
    on its k - 1 most recent keys, each over its row's non-sink keys per head (analysis/nonsink.py), pooled over
    the nodes at k; the curve k = 2..K with Holm over depths, and the chain's verdict rules (analysis/verdict.py)."""
    from .compare import trace_labels
    from .nonsink import TREE_HEAD_COLUMNS, tree_node_shares
    from .verdict import classify, depth_drift, rm_curve, span

    rows = []
    for t, label in zip(traces, trace_labels(traces)):
        k_trace = int(t.manifest["capture"].get("depth") or 0)
        shares = tree_node_shares(t.table("tree_heads", TREE_HEAD_COLUMNS))
        for drafter in [d["name"] for d in t.manifest["drafters"]]:
            k = k_trace
            d = shares[shares["drafter"].astype(str) == drafter].copy()
            ids = d["prompt_id"].astype(str)
            got = ids.map(t.groups)
            d["group"] = got.where(got.notna(), group_of_id(ids)).astype(str)
            recorded = bool(d["matched_ns"].notna().any()) if len(d) else False
            curve = rm_curve(d, k) if recorded and k >= 2 else {}
            # a tree's deepest nodes are few: its verdict reads the curve up to the deepest depth that has any
            reached = [x for x, r in curve.items() if np.isfinite(r["value"])]
            if reached and max(reached) < k:
                k = max(reached)
                curve = rm_curve(d, k)
            verdict, why = classify(curve, False, recorded, k)
            if not recorded:
                why = (f"recency-matched control not recorded in this tree trace (captured by drifttool "
                       f"{t.manifest.get('drifttool_version', 'an earlier version')} before trees had one); recapture")
            rk = curve.get(k, {})
            up = [x for x, r in curve.items() if np.isfinite(r["value"]) and depth_drift(r)]
            rows.append({"trace": label, "drafter": drafter, "drift_verdict": verdict, "drift_why": why,
                         "drift_depths": span(up), "recency_ratio": rk.get("value", np.nan),
                         "recency_ratio_lo": rk.get("lo", np.nan), "recency_ratio_hi": rk.get("hi", np.nan),
                         "recency_ratio_p": rk.get("p", np.nan), "depth_read": k,
                         "groups": int(d["group"].nunique()) if len(d) else 0})
    return pd.DataFrame(rows)
