"""Plotly figures of draft trees, shared by the dashboard and the notebook: one round's tree (nodes coloured by
self mass, the accepted path highlighted) and per-depth curves split by branch (analysis/tree_compare)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .base import TEMPLATE, series_colors, series_order

LABEL_CHARS = 8  # a node label longer than this is cut (the full token is in the hover): longer ones overlap
LEAF_PX = 36  # vertical pixels per leaf: room for one label line between neighbouring leaves


def node_label(text: str, limit: int = LABEL_CHARS) -> str:
    """A token as a short node label: whitespace made visible, cut with an ellipsis past `limit` characters."""
    t = text.replace("\n", "↵").replace("\t", "→")
    return t if len(t) <= limit else t[:limit - 1] + "…"


def tree_layout(parents: dict[int, int]) -> dict[int, float]:
    """y per node (root 0 included): leaves in depth-first order 0, 1, 2..., a parent at its children's mean."""
    kids: dict[int, list[int]] = {}
    for u, p in sorted(parents.items()):
        kids.setdefault(p, []).append(u)
    y: dict[int, float] = {}
    nxt = [0.0]

    def place(u: int) -> float:
        cs = kids.get(u, [])
        if not cs:
            y[u] = nxt[0]
            nxt[0] += 1
        else:
            y[u] = float(np.mean([place(c) for c in cs]))
        return y[u]

    place(0)
    return y


def _edge(by: pd.DataFrame, y: dict[int, float], u: int, p: int, on: bool) -> go.Scatter:
    """The line from parent `p` (0: the root, at depth 0) to node `u`; bold where both are on the accepted path."""
    return go.Scatter(
        x=[by.depth[p] if p else 0, by.depth[u]],
        y=[y[p], y[u]],
        mode="lines",
        line={"width": 4 if on else 1, "color": "#222" if on else "#bbb"},
        hoverinfo="skip",
        showlegend=False,
    )


def _node_hover(by: pd.DataFrame, tok) -> list[str]:
    """Per node: its place in the tree, its token and the target's, its numbers and whether it was accepted."""
    return [
        f"node {u} (depth {r.depth}, rank {r.rank})<br>token {tok(r.draft_id)}  target {tok(r.target_id)}<br>"
        f"score {r.score:.3f}  self {r.self_mass:.3f}  sink {r.sink_mass:.3f}  entropy {r.entropy:.3f}"
        f"<br>{'accepted' if r.accepted else 'rejected'}{' · main path' if r.main_path else ''}"
        for u, r in by.iterrows()
    ]


def _root_marker(y: dict[int, float]) -> go.Scatter:
    """The root: the last committed token, which every depth-1 node extends."""
    return go.Scatter(
        x=[0],
        y=[y[0]],
        mode="markers+text",
        text=["root"],
        textposition="middle left",
        marker={"size": 14, "color": "#555", "symbol": "diamond"},
        showlegend=False,
        hoverinfo="text",
        hovertext=["root: the last committed token"],
    )


def _node_markers(by: pd.DataFrame, y: dict[int, float], acc: set, color: str, tok) -> go.Scatter:
    """The drafted nodes, labelled by token and coloured by `color`; accepted ones ringed."""
    return go.Scatter(
        x=by.depth,
        y=[y[u] for u in by.index],
        mode="markers+text",
        text=[node_label(tok(r.draft_id)) for r in by.itertuples()],
        textposition="top center",  # above the node: the edges to its children leave on the right
        textfont={"size": 11},
        hovertext=_node_hover(by, tok),
        hoverinfo="text",
        showlegend=False,
        marker={
            "size": 16,
            "color": by[color],
            "colorscale": "Viridis",
            "showscale": True,
            "colorbar": {"title": color.replace("_", " ")},
            "line": {"width": [3 if u in acc else 0 for u in by.index], "color": "#d62728"},
        },
    )


def tree_round_figure(nodes: pd.DataFrame, color: str = "self_mass", token_text=None) -> go.Figure:
    """One round's tree from its tree_nodes rows: x = depth, nodes coloured by `color`, accepted path in bold.
    token_text: optional id -> text function for the labels."""
    parents = {int(r.node): int(r.parent) for r in nodes.itertuples()}
    y = tree_layout(parents)
    by = nodes.set_index("node")
    acc = set(by.index[by.accepted])
    fig = go.Figure()
    for u, p in parents.items():
        fig.add_trace(_edge(by, y, u, p, u in acc))
    tok = (lambda i: token_text(int(i))) if token_text else (lambda i: str(int(i)))
    fig.add_trace(_root_marker(y))
    fig.add_trace(_node_markers(by, y, acc, color, tok))
    leaves = sum(1 for u in y if u not in set(parents.values()))
    fig.update_layout(  # room left of the root for its label and right of the deepest nodes for theirs
        xaxis={"title": "depth", "dtick": 1, "range": [-0.8, float(by.depth.max()) + 0.9]},
        yaxis={"visible": False, "range": [min(y.values()) - 0.7, max(y.values()) + 0.7]},
        height=max(300, LEAF_PX * leaves + 120),
        template=TEMPLATE,
        title=f"draft tree: {len(by)} nodes, {len(acc)} accepted (bold path)",
    )
    return fig


def tree_depth_curves(tab: pd.DataFrame, metric: str = "self_mass") -> go.Figure:
    """`metric` per depth, one line per trace/drafter x branch (tree_compare.tree_depth_table), 95% group
    bootstrap error bars (none below 6 groups).
    Colour = the drafter's (as on every other chart), dash = the branch; drafters in the one series order."""
    fig = go.Figure()
    dashes = {"main path": "solid", "side branches": "dot", "accepted path": "dash", "all nodes": "dashdot"}
    drafters = series_order([str(d) for d in tab["drafter"].unique()]) if len(tab) else []
    colors = series_colors(drafters)
    rank = {d: i for i, d in enumerate(drafters)}
    groups = sorted(tab.groupby(["trace", "drafter", "branch"], sort=False, observed=True),
                    key=lambda kv: (str(kv[0][0]), rank[str(kv[0][1])]))
    for (trace, drafter, branch), g in groups:
        g = g.sort_values("depth")
        fig.add_trace(
            go.Scatter(
                x=g.depth,
                y=g[metric],
                name=f"{trace}/{drafter} · {branch}",
                mode="lines+markers",
                line={"dash": dashes.get(branch, "solid"), "color": colors[str(drafter)]},
                marker={"color": colors[str(drafter)]},
                error_y={"type": "data", "array": (g[f"{metric}_hi"] - g[metric]).fillna(0),
                         "arrayminus": (g[metric] - g[f"{metric}_lo"]).fillna(0), "visible": True},
            )
        )
    fig.update_layout(
        xaxis={"title": "depth", "dtick": 1},
        yaxis={"title": metric.replace("_", " ")},
        template=TEMPLATE,
        title=f"{metric.replace('_', ' ')} per depth, by branch",
    )
    return fig
