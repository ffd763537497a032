"""The drill-down: one draft query's attention row over the context, sink slots marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from ..trace.positions import query_position
from .base import (
    TEMPLATE,
)


def sink_slots(sink: dict | None, context_len: int, slot_tokens: Sequence[int],
               recorded: Sequence[int] | None = None) -> list[int]:
    """Slots counted as sinks in a sampled round: those the capture recorded (rows_index.sink_slots), else
    (traces written before that column) re-derived from the trace's sink definition (manifest capture.sink)
    by the same SinkSpec. Slot p holds position p's feature; the token at position p is slot_tokens[p-1],
    unknown for p = 0 (so only the recorded slots can mark position 0 for a `tok:` sink)."""
    if recorded is not None and not isinstance(recorded, float):  # NaN: a shard from before the column
        return sorted(int(p) for p in recorded if p < context_len)
    from ..trace.sinks import SinkSpec

    ids = [-1] + [int(t) for t in list(slot_tokens)[: max(context_len - 1, 0)]]
    return SinkSpec.from_dict(sink).positions_in(ids[:context_len])


NEWEST = 128  # a longer row opens zoomed to its newest slots (the drafts a sliver otherwise); double-click: all


def attention_row_heatmap(row: np.ndarray, slot_tokens: Sequence[int], context_len: int,
                          sinks: Sequence[int] = (), decode: Callable[[int], str] | None = None,
                          title: str = "Head-mean attention of the draft queries") -> go.Figure:
    """Drill-down: rows = depths 1..K, x = key slots; token id (and text) on hover; sinks and draft slots marked.

    Slots 0..n-1 hold the context (n = context_len), slots n..n+K-2 the chain's own drafted inputs; the
    depth-k query sits on slot n-2+k. A row longer than NEWEST slots opens on its newest NEWEST (the draft slots
    and the recent context readable; the whole row a double-click away)."""
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
    q = [query_position(context_len, d) for d in range(1, k + 1)]
    fig.add_trace(go.Scatter(x=q, y=np.arange(1, k + 1), mode="markers", name="query slot",
                             marker={"symbol": "x-thin-open", "size": 9, "color": "#17becf", "line": {"width": 2}},
                             hovertemplate="query of depth %{y} at slot %{x}<extra></extra>"))
    xaxis = {"title": "key slot", "tickformat": "d"}  # slot 200, not "2e+2"
    if length > NEWEST:
        xaxis["range"] = [length - NEWEST - 0.5, length - 0.5]
    fig.update_layout(title=title, template=TEMPLATE, height=120 + 40 * k, xaxis=xaxis,
                      yaxis={"title": "depth", "tickvals": list(range(1, k + 1)), "autorange": "reversed"},
                      legend={"orientation": "h", "y": -0.25})
    return fig
