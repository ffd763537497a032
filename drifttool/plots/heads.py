"""Per-head figures: head x depth heatmaps, their differences, and where each head looks hardest."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .base import TEMPLATE, label, series_order
from .base import empty as _empty
from .base import rc as _rc
from .base import subplots as _subplots


def head_matrix(head_means: pd.DataFrame, series: str, metric: str) -> pd.DataFrame:
    """depth x head pivot of one series' mean metric."""
    sub = head_means[head_means["series"] == series]
    return sub.pivot_table(index="depth", columns="head", values=metric, aggfunc="mean").sort_index()


def head_heatmaps(head_means: pd.DataFrame, metric: str = "sink_mass", series: Sequence[str] | None = None,
                  max_cols: int = 3) -> go.Figure:
    """One depth x head heatmap per series, all on one shared colour scale, wrapped at max_cols per row."""
    series = list(series or series_order(head_means["series"]))
    if head_means.empty or not series:
        return _empty(f"{label(metric)} by depth and head")
    mats = [head_matrix(head_means, s, metric) for s in series]
    vals = np.concatenate([m.to_numpy().ravel() for m in mats])
    vals = vals[np.isfinite(vals)]
    zmin, zmax = (float(vals.min()), float(vals.max())) if len(vals) else (0.0, 1.0)
    fig, rows, cols = _subplots(series, max_cols=max_cols, shared_yaxes=True)
    for j, (s, m) in enumerate(zip(series, mats)):
        r, c = _rc(j, cols)
        fig.add_trace(go.Heatmap(z=m.to_numpy(), x=[str(h) for h in m.columns], y=m.index, coloraxis="coloraxis",
                                 name=s, hovertemplate=f"{s}<br>head %{{x}}<br>depth %{{y}}<br>"
                                 f"{metric}=%{{z:.4g}}<extra></extra>"), row=r, col=c)
        last_in_col = j + cols >= len(series)
        fig.update_xaxes(title_text="head" if last_in_col else None, row=r, col=c)
        fig.update_yaxes(dtick=1, autorange="reversed", title_text="depth" if c == 1 else None, row=r, col=c)
    fig.update_layout(title=f"{label(metric)} by depth and head (shared scale)", template=TEMPLATE,
                      height=300 * rows + 80,
                      coloraxis={"colorscale": "Viridis", "cmin": zmin, "cmax": zmax, "colorbar_title": metric})
    return fig


def head_diff_heatmap(head_means: pd.DataFrame, a: str, b: str, metric: str = "sink_mass") -> go.Figure:
    """Difference heatmap A - B (depth x head) on a symmetric diverging scale."""
    ma, mb = head_matrix(head_means, a, metric), head_matrix(head_means, b, metric)
    if ma.empty or mb.empty:
        return _empty(f"{label(metric)}: {a} - {b}")
    d = ma.sub(mb)
    lim = float(np.nanmax(np.abs(d.to_numpy()))) if np.isfinite(d.to_numpy()).any() else 1.0
    fig = go.Figure(go.Heatmap(z=d.to_numpy(), x=[str(h) for h in d.columns], y=d.index, colorscale="RdBu_r",
                               zmin=-lim or -1, zmax=lim or 1, zmid=0, colorbar_title=f"{a} - {b}",
                               hovertemplate="head %{x}<br>depth %{y}<br>diff=%{z:.4g}<extra></extra>"))
    fig.update_layout(title=f"{label(metric)}: {a} \u2212 {b}", template=TEMPLATE, height=380,
                      xaxis_title="head", yaxis={"title": "depth", "dtick": 1, "autorange": "reversed"})
    return fig


# slot kinds' colours: none close to a drafter's (styles.KIND_STYLES / PALETTE; tests/plots check the distance) —
# the self slots were an orange next to EAGLE-3.1's vermillion
SLOT_COLORS = {"pos0": "#d62728", "early": "#ff9896", "recent": "#9467bd", "self": "#00CED1", "other": "#c7c7c7"}


def where_attention(where: pd.DataFrame, max_cols: int = 3) -> go.Figure:
    """Where heads look hardest, by depth: one panel per series, stacked shares of head maxima on position 0,
    early, recent, own draft slots and other prompt slots; the mean max weight as a black line."""
    from ..analysis.where_attention import CATEGORIES, DEFINITIONS

    if where is None or where.empty:
        return _empty("Where heads look hardest", "not recorded in these traces (drifttool before head maxima)")
    series = series_order(where["series"])
    fig, rows, cols = _subplots(series, max_cols=max_cols, shared_yaxes=True)
    colors = SLOT_COLORS
    for i, s in enumerate(series):
        r, c = _rc(i, cols)
        d = where[where["series"] == s].sort_values("depth")
        for k in CATEGORIES:
            fig.add_trace(go.Bar(x=d["depth"], y=d[k], name=k, marker_color=colors[k], legendgroup=k,
                                 showlegend=i == 0, hovertext=DEFINITIONS[k]), row=r, col=c)
        fig.add_trace(go.Scatter(x=d["depth"], y=d["max_prob"], name="mean max weight", mode="lines+markers",
                                 line={"color": "black"}, legendgroup="max", showlegend=i == 0), row=r, col=c)
    fig.update_layout(barmode="stack", title="Where heads look hardest (share of head maxima; line: mean max weight)",
                      height=320 * rows)
    fig.update_yaxes(range=[0, 1])
    fig.update_xaxes(title_text="depth", dtick=1)
    return fig
