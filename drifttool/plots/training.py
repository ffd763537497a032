"""Figures of drift across training (analysis.training): a metric at one depth against the checkpoint's step,
one line per variant in its drafter colour."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..styles import series_style
from .base import TEMPLATE, TITLE_FONT, label


def training_curves(curves: pd.DataFrame, metric: str = "acceptance_rate", depth: int = 1) -> go.Figure:
    """`metric` at `depth` (mean acceptance length: the checkpoint's, whatever the depth) vs training step."""
    fig = go.Figure()
    sub = curves[curves.depth == (1 if metric == "mean_acceptance_length" else depth)]
    for v, g in sub.groupby("variant", sort=False):
        g = g.sort_values("step")
        st = series_style(v)
        fig.add_trace(go.Scatter(x=g["step"], y=g[metric], mode="lines+markers", name=v,
                                 line={"color": st["color"]}, customdata=g["n_rounds"],
                                 hovertemplate=f"{v}<br>step %{{x}}<br>{label(metric)}=%{{y:.4g}}<br>n=%{{customdata}}"
                                               "<extra></extra>"))
    where = "" if metric == "mean_acceptance_length" else f" at depth {depth}"
    fig.update_layout(template=TEMPLATE, title={"text": f"{label(metric)}{where} across training", "font": TITLE_FONT},
                      xaxis_title="training step (checkpoint)", yaxis_title=label(metric), height=360,
                      margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig
