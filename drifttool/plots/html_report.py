"""One self-contained HTML file to attach to a PR or a paper: the verdict in words, the dashboard's charts
(the same builders, over the same data layer) and the tables, with plotly.js inlined so it opens offline
without a server."""

from __future__ import annotations

import html
from datetime import datetime, timezone

import pandas as pd

from ..analysis.compare import Comparison
from ..analysis.report import plain_summary
from ..analysis.views import build_view
from ..trace.reader import TraceData
from ..version import __version__
from . import (
    acceptance_length_bars,
    acceptance_per_depth,
    context_curves,
    depth_curves,
    feature_rms,
    head_heatmaps,
    predictor_curves,
)

STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f4f4f4}.meta{color:#666;font-size:.85em}li{margin:.3em 0}"""


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    have = [c for c in cols if c in df.columns]
    return df[have].to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-", border=0)


def charts(v) -> list[tuple[str, object]]:
    """(title, figure) for every chart of the report (`v`: an analysis.views.View), in page order."""
    out = [("Acceptance length", acceptance_length_bars(v.summary)),
           ("Attention by depth: sink, self, prompt mass", depth_curves(v.per_depth)),
           ("Hidden-state magnitudes by depth", feature_rms(v.per_depth)),
           ("Acceptance by depth", acceptance_per_depth(v.per_depth))]
    if not v.head_means.empty:
        out.append(("Per-head sink mass", head_heatmaps(v.head_means, "sink_mass")))
    if not v.by_context.empty:
        out.append(("Self mass by context length", context_curves(v.by_context, "self_mass")))
    try:
        pred = v.predictors()
    except Exception:  # noqa: BLE001 - a trace without the columns has no such chart; the rest stands
        pred = pd.DataFrame()
    if not pred.empty:
        out.append(("What tracks rejections", predictor_curves(pred, "self_mass")))
    return out


def html_report(traces: list[TraceData], title: str = "drifttool report") -> str:
    v = build_view(traces)
    sentences = plain_summary(Comparison.of(traces))  # the terminal's "In short", computed the same way
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             "<p class='meta'>" + html.escape(
                 f"drifttool {__version__}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; traces: "
                 + ", ".join(str(t.path) for t in traces)) + "</p>",
             "<h2>In short</h2><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in sentences) + "</ul>",
             "<h2>Summary</h2>" + _table(v.summary, ["series", "drafts", "mean_acceptance_length", "al_lo", "al_hi",
                                                    "sink_lift_d1", "self_lift", "self_lift_trend", "feature_growth",
                                                    "n_prompts", "n_groups"])]
    first = True
    for name, fig in charts(v):
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if first else False,
                                 config={"displaylogo": False}))
        first = False
    parts.append("<h2>Per depth</h2>" + _table(v.per_depth, ["series", "depth", "n_rounds", "n_groups", "sink_mass",
                                                             "self_mass", "prompt_mass", "rms_in", "acceptance_rate"]))
    parts.append("</body></html>")
    return "\n".join(parts)
