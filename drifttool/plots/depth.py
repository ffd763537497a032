"""Depth curves: metrics by speculation depth, per trace, and mean acceptance length."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from ..analysis.compare import MIN_N
from ..styles import split_label
from ..trace import metric_table
from .base import N_COLUMN, TEMPLATE, in_series_order, label, log_range, series_styles
from .base import empty as _empty
from .base import has_small_n as _has_small_n
from .base import line_with_band as _line_with_band
from .base import rc as _rc
from .base import subplots as _subplots


def metric_by_depth(per_depth: pd.DataFrame, metrics: Sequence[str], title: str, log_y: bool | Sequence[str] = False,
                    y_range: tuple[float, float] | None = None, min_n: int = MIN_N) -> go.Figure:
    """One panel per metric: value vs depth, one line per series with its group-bootstrap CI band (groups: source documents).

    log_y: True (every panel) or the metrics whose panel gets a log axis fitted to the data (CI bands
    included); y_range: a fixed range for the other panels (default: plotly's autorange)."""
    if per_depth.empty:
        return _empty(title)
    per_depth = in_series_order(per_depth)
    styles = series_styles(per_depth["series"])
    logs = set(metrics) if log_y is True else set(log_y or ())
    fig, rows, cols = _subplots([label(m) for m in metrics], max_cols=3)
    for j, m in enumerate(metrics):
        r, c = _rc(j, cols)
        for s, sub in per_depth.groupby("series", sort=False):
            _line_with_band(fig, sub, "depth", m, s, styles[s], (r, c), showlegend=(j == 0),
                            n_col=N_COLUMN.get(m, "n_rounds"), min_n=min_n)
        fig.update_xaxes(title_text="depth", dtick=1, row=r, col=c)
        if m in logs:
            cols_m = [x for x in (m, f"{m}_lo", f"{m}_hi") if x in per_depth]
            fig.update_yaxes(type="log", tickformat=".2~g", dtick="D2", range=log_range(per_depth[cols_m].to_numpy()),
                             title_text="log scale" if c == 1 else None, row=r, col=c)
        elif y_range:
            fig.update_yaxes(range=list(y_range), row=r, col=c)
    fig.update_layout(title=title, template=TEMPLATE, height=330 * rows + 60, legend_title_text="series")
    if _has_small_n(per_depth, metrics, min_n):
        fig.add_annotation(text=f"hollow grey points: fewer than {min_n} rounds", showarrow=False, xref="paper",
                           yref="paper", x=1, y=1.0, yshift=40, xanchor="right", font={"size": 11, "color": "#777"})
    return fig


def depth_curves(per_depth: pd.DataFrame, metrics: Sequence[str] | None = None, scale: str = "auto") -> go.Figure:
    """Attention mass on sink / own draft / prompt positions vs depth (95% CI over groups); by default the metric
    table's shown masses (Metric.show).

    scale 'auto': the sink-mass panel on a log axis fitted to the data (a 0.004 -> 0.010 change is visible),
    the other panels auto-ranged; scale 'unit': every panel on the full 0-1 range."""
    if scale not in ("auto", "unit"):
        raise ValueError(f"scale {scale!r}: expected 'auto' or 'unit'")
    metrics = metric_table.shown("mass") if metrics is None else metrics
    if scale == "unit":
        return metric_by_depth(per_depth, metrics, "Where the draft queries attend, by depth", y_range=(0, 1))
    return metric_by_depth(per_depth, metrics, "Where the draft queries attend, by depth",
                           log_y=[m for m in metrics if m == "sink_mass"])


def lift_curves(per_depth: pd.DataFrame, metrics: Sequence[str] | None = None) -> go.Figure:
    """Attention against uniform vs depth: each mass / the share uniform attention over the keys seen would give it
    (log axis; the dotted line at 1 is uniform); by default the metric table's shown lifts. Self lift starts at
    depth 2 (no own slot before)."""
    metrics = metric_table.shown("lift") if metrics is None else metrics
    have = [m for m in metrics if m in per_depth and per_depth[m].notna().any()]
    fig = metric_by_depth(per_depth, have or list(metrics), "Attention against uniform (lift: 1 = uniform), by depth",
                          log_y=True)
    for j in range(len(have)):
        fig.add_hline(y=1.0, line_dash="dot", line_color="#888", row=j // 3 + 1, col=j % 3 + 1)
    return fig


def recency_profile(per_depth: pd.DataFrame) -> go.Figure:
    """The drift argument at a glance, one panel per series: attention on the j most recent keys, j = 1..K-1 — the
    depth-1 query's on prompt tokens (line: what recency alone gives) against the depth-(j+1) query's on its own j
    drafted slots (markers), each with its 95% CI over groups. Own drafts above the line: drift; on it: recency.
    Each a share of its row's non-sink keys (the verdict's basis) where the trace has its per-head table, so a sink
    that fades with depth does not lift the markers; raw shares otherwise (the title says which)."""
    title = "Own drafts against equally recent prompt tokens (above the line: drift)"
    need = ("matched_ns", "self_ns")
    if per_depth.empty or any(m not in per_depth or per_depth[m].isna().all() for m in need):
        need = ("matched_mass", "self_mass")
    else:
        title += ", shares of non-sink attention"
    if per_depth.empty or any(m not in per_depth or per_depth[m].isna().all() for m in need):
        return _empty(title + ": not recorded in this trace (recapture)")
    per_depth = in_series_order(per_depth[per_depth["depth"] >= 2]).assign(keys=lambda x: x["depth"] - 1)
    styles = series_styles(per_depth["series"])
    series = list(dict.fromkeys(per_depth["series"]))
    fig, rows, cols = _subplots(series, max_cols=3)
    for j, s in enumerate(series):
        r, c = _rc(j, cols)
        sub = per_depth[per_depth["series"] == s]
        st = styles[s]
        _line_with_band(fig, sub, "keys", need[0], "prompt tokens at depth 1", dict(st, dash="dot"), (r, c),
                        showlegend=j == 0)
        _line_with_band(fig, sub, "keys", need[1], "own drafted slots", dict(st, symbol="diamond"), (r, c),
                        showlegend=j == 0)
        fig.update_xaxes(title_text="j most recent keys", dtick=1, row=r, col=c)
        fig.update_yaxes(title_text=("share of non-sink attention" if need[0] == "matched_ns" else "attention mass")
                         if c == 1 else None, row=r, col=c)
    fig.update_layout(title=title, template=TEMPLATE, height=330 * rows + 60)
    return fig


def feature_rms(per_depth: pd.DataFrame, metrics: Sequence[str] = ("rms_in", "rms_pre", "rms_post")) -> go.Figure:
    """Hidden-state RMS vs depth on a log axis (EAGLE-3 grows, EAGLE-3.1 stays flat)."""
    return metric_by_depth(per_depth, metrics, "Feature RMS by depth (log scale)", log_y=True)


def acceptance_per_depth(per_depth: pd.DataFrame, min_n: int = MIN_N) -> go.Figure:
    """vLLM per-position acceptance rate and EAGLE n-alpha vs depth (n-alpha over < min_n reached chains greyed)."""
    return metric_by_depth(per_depth, ("acceptance_rate", "n_alpha"), "Acceptance by depth", y_range=(0, 1.02),
                           min_n=min_n)


def metric_by_trace(per_depth: pd.DataFrame, metric: str = "self_mass", max_cols: int = 4,
                    min_n: int = MIN_N) -> go.Figure:
    """Small multiples for several traces: one panel per trace (wrapped at max_cols), one line per drafter in its
    fixed style, all panels on one y axis. Reads at a glance where one chart of every series would not."""
    title = f"{label(metric)} by depth, one panel per trace"
    if per_depth.empty or metric not in per_depth:
        return _empty(title)
    df = in_series_order(per_depth).assign(_trace=[split_label(s)[0] or "" for s in per_depth["series"]])
    traces = list(dict.fromkeys(df["_trace"]))
    styles = series_styles(df["series"])
    fig, rows, cols = _subplots(traces, max_cols=max_cols, shared_yaxes="all", shared_xaxes=True)
    shown: set[str] = set()
    for j, t in enumerate(traces):
        r, c = _rc(j, cols)
        for s, sub in df[df["_trace"] == t].groupby("series", sort=False):
            d = split_label(s)[1]
            st = dict(styles[s], symbol="circle")
            _line_with_band(fig, sub, "depth", metric, d, st, (r, c), showlegend=d not in shown,
                            n_col=N_COLUMN.get(metric, "n_rounds"), min_n=min_n)
            shown.add(d)
        fig.update_xaxes(title_text="depth" if j + cols >= len(traces) else None, dtick=1, row=r, col=c)
    if metric == "sink_mass":
        fig.update_yaxes(type="log", tickformat=".2~g", dtick="D2",
                         range=log_range(df[[x for x in (metric, f"{metric}_lo", f"{metric}_hi") if x in df]].to_numpy()))
    fig.update_yaxes(title_text=label(metric), col=1)
    fig.update_layout(title=title, template=TEMPLATE, height=260 * rows + 90, legend_title_text="drafter")
    return fig


def acceptance_length_bars(summary: pd.DataFrame) -> go.Figure:
    """Mean acceptance length per series (bonus token included) with its 95% CI.

    Several traces: one group of bars per trace, one bar colour per drafter (legend by drafter)."""
    if summary.empty:
        return _empty("Mean acceptance length")
    summary = in_series_order(summary)
    styles = series_styles(summary["series"])
    parts = [split_label(s) for s in summary["series"]]
    multi = len({t for t, _ in parts}) > 1
    fig = go.Figure()
    df = summary.assign(_trace=[t or "" for t, _ in parts], _drafter=[d for _, d in parts])
    for d, sub in df.groupby("_drafter", sort=False):
        err = {"type": "data", "symmetric": False,
               "array": (sub["al_hi"] - sub["mean_acceptance_length"]).fillna(0),
               "arrayminus": (sub["mean_acceptance_length"] - sub["al_lo"]).fillna(0)}
        st = styles[sub["series"].iloc[0]]
        fig.add_trace(go.Bar(x=sub["_trace"] if multi else sub["series"], y=sub["mean_acceptance_length"],
                             error_y=err, name=d, marker_color=st["color"], customdata=sub["series"],
                             marker_pattern_shape="/" if st["dash"] != "solid" else "",
                             hovertemplate="%{customdata}<br>AL=%{y:.3f}<extra></extra>"))
    fig.update_layout(title="Mean acceptance length (95% CI over groups)", template=TEMPLATE, height=380,
                      yaxis_title="tokens per round", xaxis_title="trace" if multi else "series",
                      barmode="group", legend_title_text="drafter", showlegend=multi)
    return fig
