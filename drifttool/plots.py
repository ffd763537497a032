"""Plotly figure builders shared by the dashboard (app/) and the notebook API.

Pure functions of DataFrames (the outputs of `Comparison` / `drifttool.views`): no Streamlit, no I/O.
Every series (one drafter of one trace) keeps the same colour in every figure."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale
from plotly.subplots import make_subplots

PALETTE = qualitative.Plotly
LABELS = {
    "sink_mass": "sink mass", "self_mass": "self mass (draft + own)", "prompt_mass": "prompt mass",
    "draft_mass": "draft mass", "own_mass": "own-slot mass", "entropy": "entropy (nats)",
    "rms_in": "RMS layer input", "rms_pre": "RMS pre", "rms_post": "RMS post",
    "acceptance_rate": "acceptance rate (vLLM per-position)", "n_alpha": "n-alpha (given reached)",
}
TEMPLATE = "plotly_white"


def label(metric: str) -> str:
    """Human-readable name of a metric column."""
    return LABELS.get(metric, metric.replace("_", " "))


def series_colors(series: Sequence[str]) -> dict[str, str]:
    """Stable colour per series label (order of first appearance)."""
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(dict.fromkeys(series))}


def _rgba(color: str, alpha: float) -> str:
    """'#rrggbb' or 'rgb(r, g, b)' -> 'rgba(r,g,b,alpha)'."""
    if color.startswith("rgb"):
        r, g, b = (float(x) for x in color[color.index("(") + 1:color.index(")")].split(",")[:3])
    else:
        h = color.lstrip("#")
        r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r:g},{g:g},{b:g},{alpha})"


def _empty(title: str, why: str = "no data for the current filters") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, template=TEMPLATE, xaxis_visible=False, yaxis_visible=False, height=300)
    return fig


def _line_with_band(fig: go.Figure, df: pd.DataFrame, x: str, y: str, name: str, color: str,
                    row: int, col: int, showlegend: bool, dash: str | None = None) -> None:
    """One series' line plus a shaded 95% CI band from columns y_lo / y_hi when present."""
    df = df.sort_values(x)
    lo, hi = f"{y}_lo", f"{y}_hi"
    if lo in df and hi in df and df[lo].notna().any():
        fig.add_trace(go.Scatter(
            x=np.concatenate([df[x].to_numpy(), df[x].to_numpy()[::-1]]),
            y=np.concatenate([df[hi].to_numpy(), df[lo].to_numpy()[::-1]]),
            mode="lines", fill="toself", fillcolor=_rgba(color, 0.18), line={"width": 0}, hoverinfo="skip",
            legendgroup=name, showlegend=False, name=f"{name} 95% CI"), row=row, col=col)
    fig.add_trace(go.Scatter(
        x=df[x], y=df[y], mode="lines+markers", name=name, legendgroup=name, showlegend=showlegend,
        line={"color": color, "dash": dash}, hovertemplate=f"{name}<br>{x}=%{{x}}<br>{y}=%{{y:.4g}}<extra></extra>"),
        row=row, col=col)


def metric_by_depth(per_depth: pd.DataFrame, metrics: Sequence[str], title: str, log_y: bool = False,
                    y_range: tuple[float, float] | None = None) -> go.Figure:
    """One panel per metric: value vs depth, one line per series with its prompt-bootstrap CI band."""
    if per_depth.empty:
        return _empty(title)
    colors = series_colors(per_depth["series"])
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[label(m) for m in metrics], shared_xaxes=True,
                        horizontal_spacing=0.1)
    for j, m in enumerate(metrics, start=1):
        for s, sub in per_depth.groupby("series", sort=False):
            _line_with_band(fig, sub, "depth", m, s, colors[s], 1, j, showlegend=(j == 1))
        fig.update_xaxes(title_text="depth", dtick=1, row=1, col=j)
        if log_y:
            fig.update_yaxes(type="log", tickformat=".3~g", row=1, col=j)
        elif y_range:
            fig.update_yaxes(range=list(y_range), row=1, col=j)
    fig.update_layout(title=title, template=TEMPLATE, height=380, legend_title_text="series")
    return fig


def depth_curves(per_depth: pd.DataFrame, metrics: Sequence[str] = ("sink_mass", "self_mass", "prompt_mass")
                 ) -> go.Figure:
    """Attention mass on sink / own draft / prompt positions vs depth (95% CI over prompts)."""
    return metric_by_depth(per_depth, metrics, "Where the draft queries attend, by depth", y_range=(0, 1))


def feature_rms(per_depth: pd.DataFrame, metrics: Sequence[str] = ("rms_in", "rms_pre", "rms_post")) -> go.Figure:
    """Hidden-state RMS vs depth on a log axis (EAGLE-3 grows, EAGLE-3.1 stays flat)."""
    return metric_by_depth(per_depth, metrics, "Feature RMS by depth (log scale)", log_y=True)


def acceptance_per_depth(per_depth: pd.DataFrame) -> go.Figure:
    """vLLM per-position acceptance rate and EAGLE n-alpha vs depth."""
    return metric_by_depth(per_depth, ("acceptance_rate", "n_alpha"), "Acceptance by depth", y_range=(0, 1.02))


def acceptance_length_bars(summary: pd.DataFrame) -> go.Figure:
    """Mean acceptance length per series (bonus token included) with its 95% CI."""
    if summary.empty:
        return _empty("Mean acceptance length")
    colors = series_colors(summary["series"])
    err = {"type": "data", "symmetric": False,
           "array": (summary["al_hi"] - summary["mean_acceptance_length"]).fillna(0),
           "arrayminus": (summary["mean_acceptance_length"] - summary["al_lo"]).fillna(0)}
    fig = go.Figure(go.Bar(x=summary["series"], y=summary["mean_acceptance_length"], error_y=err,
                           marker_color=[colors[s] for s in summary["series"]],
                           hovertemplate="%{x}<br>AL=%{y:.3f}<extra></extra>"))
    fig.update_layout(title="Mean acceptance length (95% CI over prompts)", template=TEMPLATE, height=320,
                      yaxis_title="tokens per round", xaxis_title="series")
    return fig


def head_matrix(head_means: pd.DataFrame, series: str, metric: str) -> pd.DataFrame:
    """depth x head pivot of one series' mean metric."""
    sub = head_means[head_means["series"] == series]
    return sub.pivot_table(index="depth", columns="head", values=metric, aggfunc="mean").sort_index()


def head_heatmaps(head_means: pd.DataFrame, metric: str = "sink_mass", series: Sequence[str] | None = None
                  ) -> go.Figure:
    """One depth x head heatmap per series, all on one shared colour scale."""
    series = list(series or dict.fromkeys(head_means["series"]))
    if head_means.empty or not series:
        return _empty(f"{label(metric)} by depth and head")
    mats = [head_matrix(head_means, s, metric) for s in series]
    vals = np.concatenate([m.to_numpy().ravel() for m in mats])
    vals = vals[np.isfinite(vals)]
    zmin, zmax = (float(vals.min()), float(vals.max())) if len(vals) else (0.0, 1.0)
    fig = make_subplots(rows=1, cols=len(series), subplot_titles=series, shared_yaxes=True)
    for j, (s, m) in enumerate(zip(series, mats), start=1):
        fig.add_trace(go.Heatmap(z=m.to_numpy(), x=[str(h) for h in m.columns], y=m.index, coloraxis="coloraxis",
                                 name=s, hovertemplate=f"{s}<br>head %{{x}}<br>depth %{{y}}<br>"
                                 f"{metric}=%{{z:.4g}}<extra></extra>"), row=1, col=j)
        fig.update_xaxes(title_text="head", row=1, col=j)
    fig.update_yaxes(title_text="depth", dtick=1, autorange="reversed", row=1, col=1)
    fig.update_layout(title=f"{label(metric)} by depth and head (shared scale)", template=TEMPLATE, height=380,
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


def context_curves(by_context: pd.DataFrame, metric: str = "self_mass") -> go.Figure:
    """One panel per series: metric vs depth, one line per context-length bucket (darker = longer)."""
    if by_context.empty:
        return _empty(f"{label(metric)} by context length")
    series = list(dict.fromkeys(by_context["series"]))
    buckets = bucket_order(by_context["context_bucket"])
    shades = sample_colorscale("Viridis", [0.85 * (1 - i / max(1, len(buckets) - 1)) for i in range(len(buckets))])
    fig = make_subplots(rows=1, cols=len(series), subplot_titles=series, shared_yaxes=True)
    for j, s in enumerate(series, start=1):
        for i, b in enumerate(buckets):
            sub = by_context[(by_context["series"] == s) & (by_context["context_bucket"].astype(str) == b)]
            if not sub.empty:
                _line_with_band(fig, sub, "depth", metric, f"ctx {b}", shades[i], 1, j, showlegend=(j == 1))
        fig.update_xaxes(title_text="depth", dtick=1, row=1, col=j)
    fig.update_yaxes(title_text=label(metric), row=1, col=1)
    fig.update_layout(title=f"{label(metric)} by depth, per context-length bucket", template=TEMPLATE, height=380,
                      legend_title_text="context tokens")
    return fig


def context_summary(by_context: pd.DataFrame, metric: str = "self_mass") -> go.Figure:
    """Metric averaged over depths vs context bucket, one line per series."""
    if by_context.empty:
        return _empty(f"{label(metric)} vs context length")
    agg = by_context.assign(context_bucket=by_context["context_bucket"].astype(str)) \
        .groupby(["series", "context_bucket"], observed=True)[metric].mean().reset_index()
    order = {b: i for i, b in enumerate(bucket_order(agg["context_bucket"]))}
    agg = agg.sort_values("context_bucket", key=lambda c: c.map(order))
    colors = series_colors(by_context["series"])
    fig = go.Figure()
    for s, sub in agg.groupby("series", sort=False):
        fig.add_trace(go.Scatter(x=sub["context_bucket"], y=sub[metric], mode="lines+markers", name=s,
                                 line={"color": colors[s]}))
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
    from .sinks import SinkSpec

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


def massive_flags(massive_by_depth: pd.DataFrame, aux_summary: pd.DataFrame) -> go.Figure:
    """Fraction of rounds with a massive activation (|x| > 100 and >= 1000x median) per depth and per aux chunk."""
    if massive_by_depth.empty and aux_summary.empty:
        return _empty("Massive-activation flags")
    series = list(dict.fromkeys([*massive_by_depth.get("series", []), *aux_summary.get("series", [])]))
    colors = series_colors(series)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["drafter layer input / pre, by depth", "aux chunks"])
    for s in series:
        d = massive_by_depth[massive_by_depth["series"] == s]
        a = aux_summary[aux_summary["series"] == s]
        fig.add_trace(go.Bar(x=d["depth"], y=d["massive"], name=s, marker_color=colors[s], legendgroup=s),
                      row=1, col=1)
        fig.add_trace(go.Bar(x=[f"layer {int(v)}" for v in a["layer_id"]], y=a["massive"], name=s,
                             marker_color=colors[s], legendgroup=s, showlegend=False), row=1, col=2)
    fig.update_yaxes(range=[0, 1.02], title_text="fraction of rounds flagged", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    fig.update_xaxes(title_text="depth", dtick=1, row=1, col=1)
    fig.update_layout(title="Massive-activation flags", template=TEMPLATE, barmode="group", height=340)
    return fig


def predictor_curves(predictors: pd.DataFrame, metric: str = "self_mass", max_cols: int = 4) -> go.Figure:
    """Acceptance (given the depth was reached) vs quantile bin of one metric: one panel per depth, line per series."""
    p = predictors[predictors["metric"] == metric] if not predictors.empty else predictors
    if p.empty:
        return _empty(f"Acceptance vs {label(metric)}")
    depths = sorted(p["depth"].unique())
    cols = min(max_cols, len(depths))
    rows = -(-len(depths) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"depth {d}" for d in depths], shared_yaxes=True)
    colors = series_colors(p["series"])
    for i, d in enumerate(depths):
        r, c = i // cols + 1, i % cols + 1
        for s, sub in p[p["depth"] == d].groupby("series", sort=False):
            sub = sub.sort_values("bin")
            mid = (sub["lo"] + sub["hi"]) / 2
            fig.add_trace(go.Scatter(
                x=mid, y=sub["acceptance"], mode="lines+markers", name=s, legendgroup=s, showlegend=(i == 0),
                line={"color": colors[s]}, customdata=np.stack([sub["lo"], sub["hi"], sub["n"], sub["spearman"]], -1),
                hovertemplate=f"{s}<br>{metric} in [%{{customdata[0]:.3g}}, %{{customdata[1]:.3g}}]"
                "<br>acceptance=%{y:.3f}<br>n=%{customdata[2]}<br>rho=%{customdata[3]:.2f}<extra></extra>"),
                row=r, col=c)
        fig.update_xaxes(title_text=label(metric), row=r, col=c)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="acceptance", col=1)
    fig.update_layout(title=f"Acceptance (given reached) by quantile bin of {label(metric)}", template=TEMPLATE,
                      height=320 * rows)
    return fig


def predictor_correlations(predictors: pd.DataFrame) -> go.Figure:
    """Spearman rank correlation of each metric with acceptance, vs depth (negative: higher value, more rejections)."""
    if predictors.empty:
        return _empty("Rank correlation with acceptance")
    rho = predictors.groupby(["series", "metric", "depth"], sort=False)["spearman"].first().reset_index()
    metrics = list(dict.fromkeys(rho["metric"]))
    colors = series_colors(rho["series"])
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[label(m) for m in metrics], shared_yaxes=True)
    for j, m in enumerate(metrics, start=1):
        for s, sub in rho[rho["metric"] == m].groupby("series", sort=False):
            fig.add_trace(go.Scatter(x=sub["depth"], y=sub["spearman"], mode="lines+markers", name=s, legendgroup=s,
                                     showlegend=(j == 1), line={"color": colors[s]}), row=1, col=j)
        fig.add_hline(y=0, line_dash="dot", line_color="grey", row=1, col=j)
        fig.update_xaxes(title_text="depth", dtick=1, row=1, col=j)
    fig.update_yaxes(range=[-1, 1], title_text="Spearman rho", row=1, col=1)
    fig.update_layout(title="What tracks rejection: rank correlation with acceptance", template=TEMPLATE, height=340)
    return fig
