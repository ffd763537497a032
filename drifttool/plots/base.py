"""What every figure shares: labels, series styles (colour and dash per drafter, symbol per trace), the
subplot grid, empty-figure placeholders and the line-with-CI-band trace, with small-n points drawn apart."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.compare import MIN_N
from ..styles import KIND_ORDER, drafter_kind, series_order, series_style, split_label  # noqa: F401 - re-exported
from ..trace import metric_table

# Traces of one chart are told apart by marker symbol (colour and dash stay the drafter's).
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "x", "star", "pentagon", "hexagon", "triangle-down"]
# Per-depth statistics over fewer than MIN_N rounds are drawn as hollow grey points without a line or CI band
# (and left out of rank-correlation charts): a depth reached by a handful of chains reads n-alpha 1.00.
SMALL_N_COLOR = "#BBBBBB"
LABELS = {  # the attention metrics' labels and their lifts' come from the metric table
    **metric_table.labels(),
    "rms_in": "RMS layer input", "rms_pre": "RMS pre", "rms_post": "RMS post",
    "acceptance_rate": "acceptance rate (vLLM per-position)", "n_alpha": "n-alpha (given reached)",
    "entropy_norm": "entropy / log(keys seen)",
}
# which per-depth count a metric's mean is over: n-alpha only counts chains that reached the depth
N_COLUMN = {"n_alpha": "n_reached", "entropy": "n_entropy"}  # entropy: full rounds only (--full-every)
TEMPLATE = "plotly_white"
TITLE_FONT = {"size": 13}


def label(metric: str) -> str:
    """Human-readable name of a metric column."""
    return LABELS.get(metric, metric.replace("_", " "))


def in_series_order(df: pd.DataFrame, col: str = "series") -> pd.DataFrame:
    """`df`'s rows with the series in series_order (stable within a series)."""
    if df.empty or col not in df:
        return df
    rank = {s: i for i, s in enumerate(series_order(df[col]))}
    return df.iloc[np.argsort([rank[str(v)] for v in df[col]], kind="stable")]


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


def rgba(color: str, alpha: float) -> str:
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


def subplots(titles: Sequence[str], max_cols: int = 3, **kw) -> tuple[go.Figure, int, int]:
    """make_subplots on a wrapped grid with spacing that leaves room for every subplot title."""
    rows, cols = grid(len(titles), max_cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles),
                        horizontal_spacing=kw.pop("horizontal_spacing", 0.08 if cols > 1 else 0.0),
                        vertical_spacing=min(0.3, 0.5 / rows) if rows > 1 else 0.0, **kw)
    fig.update_annotations(font=TITLE_FONT)
    for i in range(len(titles), rows * cols):  # empty cells of the last row: no axes drawn
        r, c = rc(i, cols)
        fig.update_xaxes(visible=False, row=r, col=c)
        fig.update_yaxes(visible=False, row=r, col=c)
    return fig, rows, cols


def rc(i: int, cols: int) -> tuple[int, int]:
    return i // cols + 1, i % cols + 1


def empty(title: str, why: str = "no data for the current filters") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, template=TEMPLATE, xaxis_visible=False, yaxis_visible=False, height=300)
    return fig


def line_with_band(fig: go.Figure, df: pd.DataFrame, x: str, y: str, name: str, style: dict[str, str],
                    at: tuple[int, int], showlegend: bool, n_col: str | None = None, min_n: int = MIN_N) -> None:
    """One series' line plus a shaded 95% CI band from columns y_lo / y_hi when present, in subplot `at` (row, col).

    With a count column `n_col`, points over fewer than `min_n` rounds are drawn apart: hollow grey markers,
    no line, no band (their n on hover)."""
    row, col = at
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
            mode="lines", fill="toself", fillcolor=rgba(color, 0.15), line={"width": 0}, hoverinfo="skip",
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


def has_small_n(per_depth: pd.DataFrame, metrics: Sequence[str], min_n: int) -> bool:
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
