"""Per-depth statistics of tree traces, split by branch: the main path (rank 0 at every step: what a top-1 chain
drafter would have drafted), the side branches (some rank > 0 on the path), the accepted path, and all nodes. Means
over nodes, and a 95% normal-approximation interval over prompts (each prompt's mean is one sample)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DriftError
from ..trace.reader import TraceData

BRANCHES = ("main path", "side branches", "accepted path", "all nodes")
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
    """One row per trace x drafter x branch x depth: node count, per-metric mean and 95% half-width over prompts
    (`accepted` = the fraction of the branch's nodes that the target accepted)."""
    chains = [t.path.name for t in traces if not t.is_tree]
    if chains:
        raise DriftError(
            f"compare: {chains[0]} is a chain trace; tree traces (--tree) are compared among themselves"
        )
    out = []
    for t in traces:
        raw = t.tree_nodes
        nodes = raw.assign(accepted=raw.accepted.astype(float))
        for name, sel in branch_of(raw).items():
            sub = nodes[sel]
            for (drafter, depth), g in sub.groupby(["drafter", "depth"], observed=True):
                row = {
                    "trace": t.name,
                    "drafter": drafter,
                    "branch": name,
                    "depth": int(depth),
                    "nodes": len(g),
                    "prompts": g.prompt_id.nunique(),
                }
                per_prompt = g.groupby("prompt_id", observed=True)[list(METRICS)].mean()
                for m in METRICS:
                    row[m] = float(g[m].mean())
                    k = len(per_prompt)
                    row[f"{m}_ci"] = (
                        float(1.96 * per_prompt[m].std(ddof=1) / np.sqrt(k)) if k > 1 else float("nan")
                    )
                out.append(row)
    cols = [
        "trace",
        "drafter",
        "branch",
        "depth",
        "nodes",
        "prompts",
        *(c for m in METRICS for c in (m, f"{m}_ci")),
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
    """The terminal table of `tree_depth_table`: one block per trace/drafter, branches side by side per depth."""
    from rich.console import Console
    from rich.table import Table

    if console.width < 120:  # the branch names and intervals stay whole in narrow terminals and pipes
        console = Console(width=120, file=console.file, no_color=console.no_color)
    for (trace, drafter), g in tab.groupby(["trace", "drafter"], sort=False, observed=True):
        t = Table(title=f"{trace} / {drafter}: per depth, by branch (mean ± 95% over prompts)")
        for c in ("depth", "branch", "nodes", "self mass", "sink mass", "entropy", "accepted"):
            t.add_column(c, justify="right" if c != "branch" else "left", no_wrap=True)
        for _, r in g.sort_values(["depth", "branch"]).iterrows():
            t.add_row(
                str(r.depth),
                r.branch,
                str(r.nodes),
                *(_cell(r, m) for m in ("self_mass", "sink_mass", "entropy", "accepted")),
            )
        console.print(t)


def _cell(r: pd.Series, m: str) -> str:
    return f"{r[m]:.3f} ± {r[m + '_ci']:.3f}" if np.isfinite(r[m + "_ci"]) else f"{r[m]:.3f}"
