"""Context-length figures: metrics by depth per context bucket, and their summary."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from ..analysis.compare import MIN_N
from .base import N_COLUMN, TEMPLATE, in_series_order, label, series_order, series_styles
from .base import empty as _empty
from .base import line_with_band as _line_with_band
from .base import rc as _rc
from .base import subplots as _subplots


def bucket_order(buckets: pd.Series) -> list[str]:
    """Context-bucket labels ('0-127', ..., '>=131072') present in `buckets`, shortest context first."""
    def lower(b: str) -> int:
        digits = str(b).lstrip(">=").split("-")[0]
        return int(digits) if digits.isdigit() else 0

    return sorted({str(b) for b in buckets.dropna()}, key=lower)


def context_curves(by_context: pd.DataFrame, metric: str = "self_mass", max_cols: int = 3,
                   min_n: int = MIN_N) -> go.Figure:
    """One panel per series (wrapped at max_cols): metric vs depth, one line per context-length bucket
    (darker = longer); points over fewer than min_n rounds hollow and grey."""
    if by_context.empty:
        return _empty(f"{label(metric)} by context length")
    series = series_order(by_context["series"])
    buckets = bucket_order(by_context["context_bucket"])
    shades = sample_colorscale("Viridis", [0.85 * (1 - i / max(1, len(buckets) - 1)) for i in range(len(buckets))])
    fig, rows, cols = _subplots(series, max_cols=max_cols, shared_yaxes=True)
    for j, s in enumerate(series):
        r, c = _rc(j, cols)
        for i, b in enumerate(buckets):
            sub = by_context[(by_context["series"] == s) & (by_context["context_bucket"].astype(str) == b)]
            if not sub.empty:
                _line_with_band(fig, sub, "depth", metric, f"ctx {b}", {"color": shades[i], "dash": "solid"}, (r, c),
                                showlegend=(j == 0), n_col=N_COLUMN.get(metric, "n_rounds"), min_n=min_n)
        last_in_col = j + cols >= len(series)
        fig.update_xaxes(title_text="depth" if last_in_col else None, dtick=1, row=r, col=c)
        if c == 1:
            fig.update_yaxes(title_text=label(metric), row=r, col=c)
    fig.update_layout(title=f"{label(metric)} by depth, per context-length bucket", template=TEMPLATE,
                      height=300 * rows + 80, legend_title_text="context tokens")
    return fig


def context_summary(by_context: pd.DataFrame, metric: str = "self_mass") -> go.Figure:
    """Metric averaged over depths vs context bucket, one line per series."""
    if by_context.empty:
        return _empty(f"{label(metric)} vs context length")
    agg = by_context.assign(context_bucket=by_context["context_bucket"].astype(str)) \
        .groupby(["series", "context_bucket"], observed=True)[metric].mean().reset_index()
    order = {b: i for i, b in enumerate(bucket_order(agg["context_bucket"]))}
    agg = in_series_order(agg.sort_values("context_bucket", key=lambda c: c.map(order)))
    styles = series_styles(agg["series"])
    fig = go.Figure()
    for s, sub in agg.groupby("series", sort=False):
        st = styles[s]
        fig.add_trace(go.Scatter(x=sub["context_bucket"], y=sub[metric], mode="lines+markers", name=s,
                                 line={"color": st["color"], "dash": st["dash"]},
                                 marker={"color": st["color"], "symbol": st["symbol"]}))
    fig.update_layout(title=f"{label(metric)} (mean over depths) vs context length", template=TEMPLATE, height=340,
                      xaxis={"title": "context tokens", "categoryorder": "array", "categoryarray": list(order)},
                      yaxis_title=label(metric))
    return fig
