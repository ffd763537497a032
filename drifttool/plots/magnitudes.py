"""Hidden-state magnitudes: aux feature RMS around fc_norm, massive-activation flags."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .base import TEMPLATE, TITLE_FONT, in_series_order, log_range, series_colors, series_order
from .base import empty as _empty


def aux_rms(aux_summary: pd.DataFrame) -> go.Figure:
    """Per aux chunk (target layer) RMS of the captured feature before and after fc_norm, per series."""
    if aux_summary.empty:
        return _empty("Aux feature RMS before / after fc_norm")
    aux_summary = in_series_order(aux_summary)
    colors = series_colors(aux_summary["series"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=["before fc_norm", "after fc_norm"], shared_yaxes=True)
    fig.update_annotations(font=TITLE_FONT)
    for j, col in enumerate(("rms_before", "rms_after"), start=1):
        for s, sub in aux_summary.groupby("series", sort=False):
            fig.add_trace(go.Bar(x=[f"layer {int(v)}" for v in sub["layer_id"]], y=sub[col], name=s,
                                 marker_color=colors[s], legendgroup=s, showlegend=(j == 1),
                                 customdata=sub["massive"],
                                 hovertemplate=f"{s}<br>%{{x}}<br>RMS=%{{y:.4g}}<br>massive=%{{customdata:.1%}}"
                                 "<extra></extra>"), row=1, col=j)
    # one log scale for both panels (so fc_norm's pull towards 1 reads as a drop), labelled on both, with full
    # tick labels (".2~g": 20 reads "20", not plotly's minor-tick "2") and headroom so no bar touches the top
    fig.update_yaxes(type="log", tickformat=".2~g", dtick="D2", showticklabels=True,
                     range=log_range(aux_summary[["rms_before", "rms_after"]].to_numpy()))
    fig.update_yaxes(title_text="RMS (log)", row=1, col=1)
    fig.update_layout(title="Aux-chunk feature RMS (target layers feeding the drafter)", template=TEMPLATE,
                      barmode="group", height=360)
    return fig


NONE_FLAGGED = "none flagged"


def massive_flags(massive_by_depth: pd.DataFrame, aux_summary: pd.DataFrame) -> go.Figure:
    """Fraction of rounds with a massive activation (|x| > 100 and >= 1000x median) per depth and per aux chunk.

    A panel where no round is flagged says so ('none flagged') instead of showing an empty axis."""
    if massive_by_depth.empty and aux_summary.empty:
        return _empty("Massive-activation flags")
    series = series_order([*massive_by_depth.get("series", []), *aux_summary.get("series", [])])
    colors = series_colors(series)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["drafter layer input / pre, by depth", "aux chunks"])
    fig.update_annotations(font=TITLE_FONT)
    for s in series:
        d = massive_by_depth[massive_by_depth["series"] == s]
        a = aux_summary[aux_summary["series"] == s]
        fig.add_trace(go.Bar(x=d["depth"], y=d["massive"], name=s, marker_color=colors[s], legendgroup=s),
                      row=1, col=1)
        fig.add_trace(go.Bar(x=[f"layer {int(v)}" for v in a["layer_id"]], y=a["massive"], name=s,
                             marker_color=colors[s], legendgroup=s, showlegend=False), row=1, col=2)
    for col, df in ((1, massive_by_depth), (2, aux_summary)):
        vals = pd.to_numeric(df["massive"], errors="coerce") if "massive" in df else pd.Series(dtype=float)
        if not (vals.fillna(0) > 0).any():
            fig.add_annotation(text=NONE_FLAGGED, showarrow=False, x=0.5, y=0.5, font={"size": 16, "color": "#555"},
                               xref=f"x{'' if col == 1 else col} domain", yref=f"y{'' if col == 1 else col} domain")
    fig.update_yaxes(range=[0, 1.02], title_text="fraction of rounds flagged", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    fig.update_xaxes(title_text="depth", dtick=1, row=1, col=1)
    fig.update_layout(title="Massive-activation flags", template=TEMPLATE, barmode="group", height=340)
    return fig
