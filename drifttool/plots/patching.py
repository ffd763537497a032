"""What each intervention of a `drifttool patch` trace changes (analysis/patching.effects), per depth."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .base import TEMPLATE, series_styles


def patch_effects(effects: list[dict], scan_over: int = 3) -> go.Figure:
    """Per clean drafter (one panel), per intervention (one line): the per-group difference of vLLM's per-position
    acceptance rate (intervened - clean) at each depth with its 95% t-interval over groups; a hollow marker where
    Holm over the depths does not detect it. The dotted line at 0 is "no change". A drafter's prompt spans, when
    more than `scan_over` (a scan), are left to span_scan's ranked bars."""
    n_spans: dict[str, int] = {}
    for e in effects:
        if e["intervention"].get("site") == "prompt":
            n_spans[e["clean"]] = n_spans.get(e["clean"], 0) + 1
    effects = [e for e in effects if not (e["intervention"].get("site") == "prompt"
                                          and n_spans[e["clean"]] > scan_over) and len(e["per_depth"])]
    drafters = list(dict.fromkeys(e["clean"] for e in effects))
    fig = make_subplots(rows=1, cols=max(len(drafters), 1), subplot_titles=drafters or ["no interventions"],
                        shared_yaxes=True)
    styles = series_styles([e["patched"] for e in effects])
    for e in effects:
        col = drafters.index(e["clean"]) + 1
        d = e["per_depth"]
        st = styles[e["patched"]]
        detected = (d["p_holm"] < 0.05).tolist()
        fig.add_trace(go.Scatter(
            x=d["depth"], y=d["difference"], mode="lines+markers", name=e["intervention"]["label"],
            legendgroup=e["intervention"]["label"], showlegend=col == 1,
            line={"color": st["color"]},
            marker={"symbol": ["circle" if x else "circle-open" for x in detected], "size": 9, "color": st["color"]},
            error_y={"type": "data", "symmetric": False, "array": (d["hi"] - d["difference"]).tolist(),
                     "arrayminus": (d["difference"] - d["lo"]).tolist()},
            customdata=d[["p_holm", "n_groups", "clean_rate"]].to_numpy(),
            hovertemplate="depth %{x}: %{y:+.3f} (clean rate %{customdata[2]:.3f}; Holm p %{customdata[0]:.3g}, "
                          "%{customdata[1]} groups)<extra>%{fullData.name}</extra>"), row=1, col=col)
        fig.add_hline(y=0, line_dash="dot", line_color="#888", row=1, col=col)
        fig.update_xaxes(title_text="depth", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="Δ acceptance rate (intervened − clean)", row=1, col=1)
    fig.update_layout(title="What each intervention changes in acceptance, per depth<br><sup>paired round by round; "
                            "95% CI over groups; hollow: not detected under Holm</sup>", template=TEMPLATE, height=440)
    return fig


def span_scan(table: pd.DataFrame) -> go.Figure:
    """A prompt-span scan (analysis/patching.scan), one panel per clean drafter: each span's acceptance-length change
    when it is deleted from the drafter's context (intervened - clean, mean over the groups whose prompts hold it)
    with its 95% t-interval, largest change on top; solid bars are detected under Holm across the spans."""
    t = table[table["n_groups"].fillna(0) > 0]
    drafters = list(dict.fromkeys(t["clean"])) or ["no spans"]
    fig = make_subplots(rows=1, cols=len(drafters), subplot_titles=drafters, shared_xaxes=True)
    for col, name in enumerate(drafters, 1):
        g = t[t["clean"] == name].sort_values("rank", ascending=False)
        hit = (g["p_holm"] < 0.05).to_numpy()
        fig.add_trace(go.Bar(
            x=g["difference"], y=g["span"], orientation="h", showlegend=False,
            marker={"color": ["#c0392b" if h else "rgba(192,57,43,0.25)" for h in hit], "line": {"color": "#c0392b"}},
            error_x={"type": "data", "symmetric": False, "array": (g["hi"] - g["difference"]).tolist(),
                     "arrayminus": (g["difference"] - g["lo"]).tolist()},
            customdata=g[["words", "p_holm", "n_groups", "tokens"]].to_numpy(),
            hovertemplate="%{customdata[0]}: %{x:+.3f} (Holm p %{customdata[1]:.3g}, %{customdata[2]} groups, "
                          "%{customdata[3]:.1f} tokens deleted)<extra></extra>"), row=1, col=col)
        fig.add_vline(x=0, line_dash="dot", line_color="#888", row=1, col=col)
        fig.update_xaxes(title_text="Δ acceptance length (span deleted − clean)", row=1, col=col)
    fig.update_layout(title="Which prompt spans the drafter's acceptance depends on<br><sup>each span deleted from "
                            "the drafter's context only; 95% CI over groups; solid: detected under Holm across "
                            "spans</sup>", template=TEMPLATE, height=max(320, 60 + 28 * max(len(t) // len(drafters), 1)))
    return fig
