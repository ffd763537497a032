"""Plotly figure builders shared by the dashboard (app/) and the notebook API.

Pure functions of DataFrames (the outputs of `Comparison` / `drifttool.analysis.views`): no Streamlit, no I/O.
Every series (one drafter of one trace) keeps the same colour in every figure."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from .analysis.compare import MIN_N
from .styles import DASHES, KIND_STYLES, PALETTE, drafter_kind, series_style, split_label  # noqa: F401

# Traces of one chart are told apart by marker symbol (colour and dash stay the drafter's).
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "x", "star", "pentagon", "hexagon", "triangle-down"]
# Per-depth statistics over fewer than MIN_N rounds are drawn as hollow grey points without a line or CI band
# (and left out of rank-correlation charts): a depth reached by a handful of chains reads n-alpha 1.00.
SMALL_N_COLOR = "#BBBBBB"
LABELS = {
    "sink_mass": "sink mass", "self_mass": "self mass (draft + own)", "prompt_mass": "prompt mass",
    "draft_mass": "draft mass", "own_mass": "own-slot mass", "entropy": "entropy (nats)",
    "rms_in": "RMS layer input", "rms_pre": "RMS pre", "rms_post": "RMS post",
    "acceptance_rate": "acceptance rate (vLLM per-position)", "n_alpha": "n-alpha (given reached)",
}
# which per-depth count a metric's mean is over: n-alpha only counts chains that reached the depth
N_COLUMN = {"n_alpha": "n_reached"}
TEMPLATE = "plotly_white"
TITLE_FONT = {"size": 13}


def label(metric: str) -> str:
    """Human-readable name of a metric column."""
    return LABELS.get(metric, metric.replace("_", " "))


def series_styles(series: Sequence[str]) -> dict[str, dict[str, str]]:
    """Style per series label: colour + dash from the drafter, marker symbol from the trace (several traces)."""
    labels = list(dict.fromkeys(str(s) for s in series))
    traces = sorted({t for t in (split_label(s)[0] for s in labels) if t})
    out = {}
    for s in labels:
        st = series_style(s)
        t = split_label(s)[0]
        st["symbol"] = SYMBOLS[traces.index(t) % len(SYMBOLS)] if t else "circle"
        out[s] = st
    return out


def series_colors(series: Sequence[str]) -> dict[str, str]:
    """Colour per series label (the drafter's; see series_style)."""
    return {s: st["color"] for s, st in series_styles(series).items()}


def _rgba(color: str, alpha: float) -> str:
    """'#rrggbb' or 'rgb(r, g, b)' -> 'rgba(r,g,b,alpha)'."""
    if color.startswith("rgb"):
        r, g, b = (float(x) for x in color[color.index("(") + 1:color.index(")")].split(",")[:3])
    else:
        h = color.lstrip("#")
        r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r:g},{g:g},{b:g},{alpha})"


def grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    """(rows, cols) for n panels, at most max_cols per row."""
    cols = max(1, min(max_cols, n))
    return -(-n // cols), cols


def _subplots(titles: Sequence[str], max_cols: int = 3, **kw) -> tuple[go.Figure, int, int]:
    """make_subplots on a wrapped grid with spacing that leaves room for every subplot title."""
    rows, cols = grid(len(titles), max_cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles),
                        horizontal_spacing=kw.pop("horizontal_spacing", 0.08 if cols > 1 else 0.0),
                        vertical_spacing=min(0.3, 0.5 / rows) if rows > 1 else 0.0, **kw)
    fig.update_annotations(font=TITLE_FONT)
    for i in range(len(titles), rows * cols):  # empty cells of the last row: no axes drawn
        r, c = _rc(i, cols)
        fig.update_xaxes(visible=False, row=r, col=c)
        fig.update_yaxes(visible=False, row=r, col=c)
    return fig, rows, cols


def _rc(i: int, cols: int) -> tuple[int, int]:
    return i // cols + 1, i % cols + 1


def _empty(title: str, why: str = "no data for the current filters") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, template=TEMPLATE, xaxis_visible=False, yaxis_visible=False, height=300)
    return fig


def _line_with_band(fig: go.Figure, df: pd.DataFrame, x: str, y: str, name: str, style: dict[str, str],
                    row: int, col: int, showlegend: bool, n_col: str | None = None, min_n: int = MIN_N) -> None:
    """One series' line plus a shaded 95% CI band from columns y_lo / y_hi when present.

    With a count column `n_col`, points over fewer than `min_n` rounds are drawn apart: hollow grey markers,
    no line, no band (their n on hover)."""
    df = df.sort_values(x)
    if n_col and n_col in df:
        n = df[n_col].fillna(0).to_numpy()
        big, small = df[n >= min_n], df[n < min_n]
    else:
        big, small = df, df.iloc[0:0]
    color = style["color"]
    lo, hi = f"{y}_lo", f"{y}_hi"
    if lo in big and hi in big and big[lo].notna().any():
        fig.add_trace(go.Scatter(
            x=np.concatenate([big[x].to_numpy(), big[x].to_numpy()[::-1]]),
            y=np.concatenate([big[hi].to_numpy(), big[lo].to_numpy()[::-1]]),
            mode="lines", fill="toself", fillcolor=_rgba(color, 0.15), line={"width": 0}, hoverinfo="skip",
            legendgroup=name, showlegend=False, name=f"{name} 95% CI"), row=row, col=col)
    nd = big[n_col] if n_col and n_col in big else None
    fig.add_trace(go.Scatter(
        x=big[x], y=big[y], mode="lines+markers", name=name, legendgroup=name, showlegend=showlegend,
        line={"color": color, "dash": style.get("dash")}, marker={"color": color, "symbol": style.get("symbol")},
        customdata=None if nd is None else nd.to_numpy(),
        hovertemplate=f"{name}<br>{x}=%{{x}}<br>{y}=%{{y:.4g}}" + ("" if nd is None else "<br>n=%{customdata}")
        + "<extra></extra>"), row=row, col=col)
    if len(small):
        fig.add_trace(go.Scatter(
            x=small[x], y=small[y], mode="markers", name=f"{name} (n < {min_n})", legendgroup=name, showlegend=False,
            marker={"color": "rgba(0,0,0,0)", "symbol": style.get("symbol"), "size": 8,
                    "line": {"color": SMALL_N_COLOR, "width": 1.5}},
            customdata=small[n_col].to_numpy(),
            hovertemplate=f"{name}<br>{x}=%{{x}}<br>{y}=%{{y:.4g}}<br>only n=%{{customdata}} rounds<extra></extra>"),
            row=row, col=col)


def _has_small_n(per_depth: pd.DataFrame, metrics: Sequence[str], min_n: int) -> bool:
    return any(N_COLUMN.get(m, "n_rounds") in per_depth and (per_depth[N_COLUMN.get(m, "n_rounds")] < min_n).any()
               for m in metrics)


def log_range(values, pad: float = 1.25) -> list[float] | None:
    """A log10 axis range hugging the positive values (so a 2x change fills a visible part of the axis)."""
    v = np.asarray(pd.to_numeric(pd.Series(np.ravel(values)), errors="coerce"), dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if not len(v):
        return None
    lo, hi = float(v.min()) / pad, float(v.max()) * pad
    if hi / lo < 4:  # at least a factor 4 of axis, centred on the data
        mid = math.sqrt(lo * hi)
        lo, hi = mid / 2, mid * 2
    return [math.log10(lo), math.log10(hi)]


def metric_by_depth(per_depth: pd.DataFrame, metrics: Sequence[str], title: str, log_y: bool | Sequence[str] = False,
                    y_range: tuple[float, float] | None = None, min_n: int = MIN_N) -> go.Figure:
    """One panel per metric: value vs depth, one line per series with its prompt-bootstrap CI band.

    log_y: True (every panel) or the metrics whose panel gets a log axis fitted to the data (CI bands
    included); y_range: a fixed range for the other panels (default: plotly's autorange)."""
    if per_depth.empty:
        return _empty(title)
    styles = series_styles(per_depth["series"])
    logs = set(metrics) if log_y is True else set(log_y or ())
    fig, rows, cols = _subplots([label(m) for m in metrics], max_cols=3)
    for j, m in enumerate(metrics):
        r, c = _rc(j, cols)
        for s, sub in per_depth.groupby("series", sort=False):
            _line_with_band(fig, sub, "depth", m, s, styles[s], r, c, showlegend=(j == 0),
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


def depth_curves(per_depth: pd.DataFrame, metrics: Sequence[str] = ("sink_mass", "self_mass", "prompt_mass"),
                 scale: str = "auto") -> go.Figure:
    """Attention mass on sink / own draft / prompt positions vs depth (95% CI over prompts).

    scale 'auto': the sink-mass panel on a log axis fitted to the data (a 0.004 -> 0.010 change is visible),
    the other panels auto-ranged; scale 'unit': every panel on the full 0-1 range."""
    if scale not in ("auto", "unit"):
        raise ValueError(f"scale {scale!r}: expected 'auto' or 'unit'")
    if scale == "unit":
        return metric_by_depth(per_depth, metrics, "Where the draft queries attend, by depth", y_range=(0, 1))
    return metric_by_depth(per_depth, metrics, "Where the draft queries attend, by depth",
                           log_y=[m for m in metrics if m == "sink_mass"])


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
    df = per_depth.assign(_trace=[split_label(s)[0] or "" for s in per_depth["series"]])
    traces = list(dict.fromkeys(df["_trace"]))
    styles = series_styles(df["series"])
    fig, rows, cols = _subplots(traces, max_cols=max_cols, shared_yaxes="all", shared_xaxes=True)
    shown: set[str] = set()
    for j, t in enumerate(traces):
        r, c = _rc(j, cols)
        for s, sub in df[df["_trace"] == t].groupby("series", sort=False):
            d = split_label(s)[1]
            st = dict(styles[s], symbol="circle")
            _line_with_band(fig, sub, "depth", metric, d, st, r, c, showlegend=d not in shown,
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
    fig.update_layout(title="Mean acceptance length (95% CI over prompts)", template=TEMPLATE, height=380,
                      yaxis_title="tokens per round", xaxis_title="trace" if multi else "series",
                      barmode="group", legend_title_text="drafter", showlegend=multi)
    return fig


def head_matrix(head_means: pd.DataFrame, series: str, metric: str) -> pd.DataFrame:
    """depth x head pivot of one series' mean metric."""
    sub = head_means[head_means["series"] == series]
    return sub.pivot_table(index="depth", columns="head", values=metric, aggfunc="mean").sort_index()


def head_heatmaps(head_means: pd.DataFrame, metric: str = "sink_mass", series: Sequence[str] | None = None,
                  max_cols: int = 3) -> go.Figure:
    """One depth x head heatmap per series, all on one shared colour scale, wrapped at max_cols per row."""
    series = list(series or dict.fromkeys(head_means["series"]))
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
    series = list(dict.fromkeys(by_context["series"]))
    buckets = bucket_order(by_context["context_bucket"])
    shades = sample_colorscale("Viridis", [0.85 * (1 - i / max(1, len(buckets) - 1)) for i in range(len(buckets))])
    fig, rows, cols = _subplots(series, max_cols=max_cols, shared_yaxes=True)
    for j, s in enumerate(series):
        r, c = _rc(j, cols)
        for i, b in enumerate(buckets):
            sub = by_context[(by_context["series"] == s) & (by_context["context_bucket"].astype(str) == b)]
            if not sub.empty:
                _line_with_band(fig, sub, "depth", metric, f"ctx {b}", {"color": shades[i], "dash": "solid"}, r, c,
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
    agg = agg.sort_values("context_bucket", key=lambda c: c.map(order))
    styles = series_styles(by_context["series"])
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


def sink_slots(sink: dict | None, context_len: int, slot_tokens: Sequence[int],
               recorded: Sequence[int] | None = None) -> list[int]:
    """Slots counted as sinks in a sampled round: those the capture recorded (rows_index.sink_slots), else
    (traces written before that column) re-derived from the trace's sink definition (manifest capture.sink)
    by the same SinkSpec. Slot p holds position p's feature; the token at position p is slot_tokens[p-1],
    unknown for p = 0 (so only the recorded slots can mark position 0 for a `tok:` sink)."""
    if recorded is not None and not isinstance(recorded, float):  # NaN: a shard from before the column
        return sorted(int(p) for p in recorded if p < context_len)
    from .run.sinks import SinkSpec

    ids = [-1] + [int(t) for t in list(slot_tokens)[: max(context_len - 1, 0)]]
    return SinkSpec.from_dict(sink).positions_in(ids[:context_len])


def attention_row_heatmap(row: np.ndarray, slot_tokens: Sequence[int], context_len: int,
                          sinks: Sequence[int] = (), decode: Callable[[int], str] | None = None,
                          title: str = "Head-mean attention of the draft queries") -> go.Figure:
    """Drill-down: rows = depths 1..K, x = key slots; token id (and text) on hover; sinks and draft slots marked.

    Slots 0..n-1 hold the context (n = context_len), slots n..n+K-2 the chain's own drafted inputs; the
    depth-k query sits on slot n-2+k."""
    row = np.asarray(row, dtype=np.float32)
    k, length = row.shape
    toks = list(slot_tokens)[:length] + [-1] * max(0, length - len(slot_tokens))
    text = [f"{t}" + (f" {decode(t)!r}" if decode and t >= 0 else "") for t in toks]
    custom = np.broadcast_to(np.array(text, dtype=object), (k, length))
    z = np.where(row > 0, row, np.nan)
    fig = go.Figure(go.Heatmap(
        z=z, x=np.arange(length), y=np.arange(1, k + 1), customdata=custom, colorscale="Magma_r",
        colorbar_title="attention", zmin=0,
        hovertemplate="depth %{y}<br>slot %{x}<br>token %{customdata}<br>p=%{z:.4g}<extra></extra>"))
    if context_len < length:
        fig.add_vrect(x0=context_len - 0.5, x1=length - 0.5, fillcolor="#1f77b4", opacity=0.12, line_width=0,
                      annotation_text="draft slots", annotation_position="top left")
    if len(sinks):
        fig.add_trace(go.Scatter(x=list(sinks), y=[0.3] * len(sinks), mode="markers", name="sink slots",
                                 marker={"symbol": "triangle-down", "size": 10, "color": "#2ca02c"},
                                 hovertemplate="sink slot %{x}<extra></extra>"))
    q = [context_len - 1 + j for j in range(k)]
    fig.add_trace(go.Scatter(x=q, y=np.arange(1, k + 1), mode="markers", name="query slot",
                             marker={"symbol": "x-thin-open", "size": 9, "color": "#17becf", "line": {"width": 2}},
                             hovertemplate="query of depth %{y} at slot %{x}<extra></extra>"))
    fig.update_layout(title=title, template=TEMPLATE, height=120 + 40 * k, xaxis_title="key slot",
                      yaxis={"title": "depth", "tickvals": list(range(1, k + 1)), "autorange": "reversed"},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def aux_rms(aux_summary: pd.DataFrame) -> go.Figure:
    """Per aux chunk (target layer) RMS of the captured feature before and after fc_norm, per series."""
    if aux_summary.empty:
        return _empty("Aux feature RMS before / after fc_norm")
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
    fig.update_yaxes(type="log", title_text="RMS (log)", row=1, col=1)
    fig.update_layout(title="Aux-chunk feature RMS (target layers feeding the drafter)", template=TEMPLATE,
                      barmode="group", height=360)
    return fig


NONE_FLAGGED = "none flagged"


def massive_flags(massive_by_depth: pd.DataFrame, aux_summary: pd.DataFrame) -> go.Figure:
    """Fraction of rounds with a massive activation (|x| > 100 and >= 1000x median) per depth and per aux chunk.

    A panel where no round is flagged says so ('none flagged') instead of showing an empty axis."""
    if massive_by_depth.empty and aux_summary.empty:
        return _empty("Massive-activation flags")
    series = list(dict.fromkeys([*massive_by_depth.get("series", []), *aux_summary.get("series", [])]))
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


def predictor_curves(predictors: pd.DataFrame, metric: str = "self_mass", max_cols: int = 4,
                     min_n: int = MIN_N) -> go.Figure:
    """Acceptance (given the depth was reached) vs quantile bin of one metric: one panel per depth, line per series.

    Depths reached by fewer than min_n chains (of a series) are drawn as hollow grey points, without a line."""
    p = predictors[predictors["metric"] == metric] if not predictors.empty else predictors
    if p.empty:
        return _empty(f"Acceptance vs {label(metric)}")
    depths = sorted(p["depth"].unique())
    fig, rows, cols = _subplots([f"depth {d}" for d in depths], max_cols=max_cols, shared_yaxes=True)
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
    styles = series_styles(rho["series"])
    fig, rows, cols = _subplots([label(m) for m in metrics], max_cols=3, shared_yaxes=True)
    for j, m in enumerate(metrics):
        r, c = _rc(j, cols)
        for s, sub in rho[rho["metric"] == m].groupby("series", sort=False):
            st = styles[s]
            fig.add_trace(go.Scatter(x=sub["depth"], y=sub["spearman"], mode="lines+markers", name=s, legendgroup=s,
                                     showlegend=(j == 0), line={"color": st["color"], "dash": st["dash"]},
                                     marker={"color": st["color"], "symbol": st["symbol"]}, customdata=sub["n"],
                                     hovertemplate=f"{s}<br>depth %{{x}}<br>rho=%{{y:.2f}}<br>n=%{{customdata}}"
                                     "<extra></extra>"), row=r, col=c)
        fig.add_hline(y=0, line_dash="dot", line_color="grey", row=r, col=c)
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


def where_attention(where: pd.DataFrame, max_cols: int = 3) -> go.Figure:
    """Where heads look hardest, by depth: one panel per series, stacked shares of head maxima on position 0,
    early, recent, own draft slots and other prompt slots; the mean max weight as a black line."""
    from .analysis.where_attention import CATEGORIES, DEFINITIONS

    if where is None or where.empty:
        return _empty("Where heads look hardest", "not recorded in these traces (drifttool before head maxima)")
    series = list(dict.fromkeys(where["series"]))
    fig, rows, cols = _subplots(series, max_cols=max_cols, shared_yaxes=True)
    colors = {"pos0": "#d62728", "early": "#ff9896", "recent": "#9467bd", "self": "#ff7f0e", "other": "#c7c7c7"}
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
