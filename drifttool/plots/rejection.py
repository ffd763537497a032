"""Rejection predictors: acceptance by metric bin, rank correlations with acceptance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis.compare import MIN_N
from .base import SMALL_N_COLOR, TEMPLATE, in_series_order, label, series_styles
from .base import empty as _empty
from .base import rc as _rc
from .base import subplots as _subplots


def predictor_curves(predictors: pd.DataFrame, metric: str = "self_mass", max_cols: int = 4,
                     min_n: int = MIN_N) -> go.Figure:
    """Acceptance (given the depth was reached) vs quantile bin of one metric: one panel per depth, line per series.

    Depths reached by fewer than min_n chains (of a series) are drawn as hollow grey points, without a line."""
    p = predictors[predictors["metric"] == metric] if not predictors.empty else predictors
    if p.empty:
        return _empty(f"Acceptance vs {label(metric)}")
    depths = sorted(p["depth"].unique())
    fig, rows, cols = _subplots([f"depth {d}" for d in depths], max_cols=max_cols, shared_yaxes=True)
    p = in_series_order(p)
    styles = series_styles(p["series"])
    small_any = False
    for i, d in enumerate(depths):
        r, c = _rc(i, cols)
        for s, sub in p[p["depth"] == d].groupby("series", sort=False):
            sub = sub.sort_values("bin")
            mid = (sub["lo"] + sub["hi"]) / 2
            st = styles[s]
            n_depth = int(sub["n"].sum())
            small = n_depth < min_n
            small_any |= small
            fig.add_trace(go.Scatter(
                x=mid, y=sub["acceptance"], mode="markers" if small else "lines+markers",
                name=s if not small else f"{s} (n < {min_n})", legendgroup=s, showlegend=(i == 0 and not small),
                line={"color": st["color"], "dash": st["dash"]},
                marker={"color": "rgba(0,0,0,0)", "line": {"color": SMALL_N_COLOR, "width": 1.5}, "symbol": st["symbol"]}
                if small else {"color": st["color"], "symbol": st["symbol"]},
                customdata=np.stack([sub["lo"], sub["hi"], sub["n"], sub["spearman"]], -1),
                hovertemplate=f"{s}<br>{metric} in [%{{customdata[0]:.3g}}, %{{customdata[1]:.3g}}]"
                "<br>acceptance=%{y:.3f}<br>n=%{customdata[2]}<br>rho=%{customdata[3]:.2f}<extra></extra>"),
                row=r, col=c)
        fig.update_xaxes(title_text=label(metric) if i + cols >= len(depths) else None, row=r, col=c)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="acceptance", col=1)
    fig.update_layout(title=f"Acceptance (given reached) by quantile bin of {label(metric)}", template=TEMPLATE,
                      height=280 * rows + 80)
    if small_any:
        fig.add_annotation(text=f"hollow grey: depth reached by fewer than {min_n} chains", showarrow=False,
                           xref="paper", yref="paper", x=1, y=1, yshift=40, xanchor="right",
                           font={"size": 11, "color": "#777"})
    return fig


def correlation_table(predictors: pd.DataFrame, min_n: int = MIN_N) -> pd.DataFrame:
    """series x metric x depth: Spearman rho and n (chains reaching the depth); rho is NaN where n < min_n."""
    if predictors.empty:
        return pd.DataFrame(columns=["series", "metric", "depth", "spearman", "n"])
    g = predictors.groupby(["series", "metric", "depth"], sort=False).agg(spearman=("spearman", "first"),
                                                                          n=("n", "sum")).reset_index()
    g["spearman"] = g["spearman"].where(g["n"] >= min_n)
    return g


def predictor_correlations(predictors: pd.DataFrame, min_n: int = MIN_N) -> go.Figure:
    """Spearman rank correlation of each metric with acceptance, vs depth (negative: higher value, more rejections).

    Depths reached by fewer than min_n chains are left out (a rank correlation over 5 chains is noise)."""
    if predictors.empty:
        return _empty("Rank correlation with acceptance")
    rho = correlation_table(predictors, min_n)
    metrics = list(dict.fromkeys(rho["metric"]))
    rho = in_series_order(rho)
    styles = series_styles(rho["series"])
    fig, rows, cols = _subplots([label(m) for m in metrics], max_cols=3, shared_yaxes=True)
    one_depth = rho["depth"].nunique() == 1  # one depth (e.g. the depth filter at 1): bars, not lone points
    for j, m in enumerate(metrics):
        r, c = _rc(j, cols)
        for s, sub in rho[rho["metric"] == m].groupby("series", sort=False):
            st = styles[s]
            if one_depth:
                fig.add_trace(go.Bar(x=[s.rpartition(":")[2]], y=sub["spearman"], name=s, legendgroup=s,
                                     showlegend=(j == 0), marker={"color": st["color"]}, customdata=sub["n"],
                                     text=[f"{v:.2f}" for v in sub["spearman"]], textposition="outside",
                                     hovertemplate=f"{s}<br>depth {int(sub['depth'].iloc[0])}<br>rho=%{{y:.2f}}"
                                     "<br>n=%{customdata}<extra></extra>"), row=r, col=c)
                continue
            fig.add_trace(go.Scatter(x=sub["depth"], y=sub["spearman"], mode="lines+markers", name=s, legendgroup=s,
                                     showlegend=(j == 0), line={"color": st["color"], "dash": st["dash"]},
                                     marker={"color": st["color"], "symbol": st["symbol"]}, customdata=sub["n"],
                                     hovertemplate=f"{s}<br>depth %{{x}}<br>rho=%{{y:.2f}}<br>n=%{{customdata}}"
                                     "<extra></extra>"), row=r, col=c)
        fig.add_hline(y=0, line_dash="dot", line_color="grey", row=r, col=c)
        if one_depth:
            fig.update_xaxes(title_text=f"depth {int(rho['depth'].iloc[0])}", row=r, col=c)
        else:
            fig.update_xaxes(title_text="depth", dtick=1, row=r, col=c)
    fig.update_yaxes(range=[-1, 1], title_text="Spearman rho", row=1, col=1)
    fig.update_layout(title="What tracks rejection: rank correlation with acceptance", template=TEMPLATE,
                      height=300 * rows + 60)
    hidden = int(rho["spearman"].isna().sum())
    if hidden:
        fig.add_annotation(text=f"depths reached by fewer than {min_n} chains left out", showarrow=False,
                           xref="paper", yref="paper", x=1, y=1, yshift=40, xanchor="right",
                           font={"size": 11, "color": "#777"})
    return fig
