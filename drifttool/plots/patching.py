"""What each intervention of a `drifttool patch` trace changes (analysis/patching.effects), per depth."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .base import TEMPLATE, series_styles


def patch_effects(effects: list[dict]) -> go.Figure:
    """Per clean drafter (one panel), per intervention (one line): the per-group difference of vLLM's per-position
    acceptance rate (intervened - clean) at each depth with its 95% t-interval over groups; a hollow marker where
    Holm over the depths does not detect it. The dotted line at 0 is "no change"."""
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
