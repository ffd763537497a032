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
from ..trace import metric_table
from ..trace.reader import TraceData
from ..version import __version__
from . import (
    acceptance_length_bars,
    acceptance_per_depth,
    context_curves,
    depth_curves,
    feature_rms,
    head_heatmaps,
    lift_curves,
    predictor_curves,
    recency_profile,
)

STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f4f4f4}pre{font-size:.85em;overflow-x:auto}.meta{color:#666;font-size:.85em}li{margin:.3em 0}"""


# (heading a person reads, column, decimals): the report's tables in words, rounded as the terminal rounds them
SUMMARY_COLUMNS = [("series", "series", None), ("drafts", "drafts", 0),
                   ("acceptance length", "mean_acceptance_length", 2), ("95% CI low", "al_lo", 2),
                   ("95% CI high", "al_hi", 2), ("sink lift at depth 1 (x uniform)", "sink_lift_d1", 2),
                   ("self lift, depths 2..K (x uniform)", "self_lift", 2),
                   ("self lift trend (depth K / depth 2)", "self_lift_trend", 2),
                   ("fed-back RMS growth (depth K / depth 1)", "feature_growth", 2), ("prompts", "prompts", 0),
                   ("groups", "groups", 0)]
# the metric table's shown lifts and masses (Metric.show), as the terminal's per-depth table
PER_DEPTH_COLUMNS = [("series", "series", None), ("depth", "depth", 0), ("rounds", "n_rounds", 0),
                     ("groups", "n_groups", 0),
                     *((metric_table.labels()[m], m, 2) for m in metric_table.shown("lift")),
                     *((metric_table.labels()[m], m, 4) for m in metric_table.shown("mass")),
                     ("fed-back RMS", "rms_in", 2), ("acceptance rate", "acceptance_rate", 3)]


def mass_columns() -> list[tuple[str, str, int | None]]:
    """Every mass of the metric table with its lift (a row added to the table is reported without a change here)."""
    lab = metric_table.labels()
    cols = [("series", "series", None), ("depth", "depth", 0)]
    for m in metric_table.METRICS:
        if m.unit == metric_table.MASS:
            cols.append((lab[m.name], m.name, 4))
            if m.lift:
                cols.append((lab[m.lift], m.lift, 2))
    return cols


def _cell(v, d: int | None) -> str:
    if d is None or isinstance(v, str):
        return html.escape(str(v))
    if v is None or v != v:
        return "-"
    return f"{int(round(v))}" if d == 0 else f"{v:.{d}f}"


def _table(df: pd.DataFrame, cols: list[tuple[str, str, int | None]]) -> str:
    """An HTML table with headings in words and the values rounded (columns the frame lacks are left out)."""
    have = [(h, c, d) for h, c, d in cols if c in df.columns]
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in have)
    rows = "".join("<tr>" + "".join(f"<td>{_cell(r[c], d)}</td>" for _, c, d in have) + "</tr>"
                   for _, r in df.iterrows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _answer(cmp: Comparison) -> list[str]:
    """The terminal's opening, computed the same way: "In short" (the counted sentence and its table), "The
    answer" (every sentence with its CI and p) and the findings (each detected trend with its test)."""
    from ..analysis.answer import SHORT_LEGEND, short_data
    from ..analysis.report_stats import findings

    s, tr, ad, ct = cmp.summary(), cmp.trends(), cmp.acceptance_differences(), cmp.contrasts()
    got = short_data(cmp, s, ad, ct)
    out = ["<h2>In short</h2>"]
    if got is not None:  # the terminal's table as an HTML table: full series names, heads in words, no wrapping
        sentence, heads, rows = got
        head = "".join(f"<th>{html.escape(h)}</th>" for h in ["series", *heads])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in [lab, *cells]) + "</tr>"
                       for lab, cells in rows)
        out += [f"<p>{html.escape(sentence)}</p>", f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
                f"<p><small>{html.escape(SHORT_LEGEND)}</small></p>"]
    out.append("<h2>The answer</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in plain_summary(cmp, s, ad, ct))
               + "</ul>")
    found = findings(cmp, tr, ad)
    if found:
        out.append("<h2>Findings: every detected trend and difference, with its test</h2><ul>"
                   + "".join(f"<li>{html.escape(x)}</li>" for x in found) + "</ul>")
    return out


def charts(v) -> list[tuple[str, object]]:
    """(title, figure) for every chart of the report (`v`: an analysis.views.View), in page order."""
    out = [("Acceptance length", acceptance_length_bars(v.summary)),
           ("Own drafts against equally recent prompt tokens (the drift verdict's quantity)",
            recency_profile(v.per_depth)),
           ("Attention against uniform by depth (lifts)", lift_curves(v.per_depth)),
           ("Attention by depth: raw sink, self, prompt mass", depth_curves(v.per_depth)),
           ("Hidden-state magnitudes by depth", feature_rms(v.per_depth)),
           ("Acceptance by depth", acceptance_per_depth(v.per_depth))]
    if not v.head_means.empty:
        out.append(("Per-head sink mass", head_heatmaps(v.head_means, "sink_mass")))
    if not v.by_context.empty:
        out.append(("Sink lift by context length", context_curves(v.by_context, "sink_lift")))
    try:
        pred = v.predictors()
    except Exception:  # noqa: BLE001 - a trace without the columns has no such chart; the rest stands
        pred = pd.DataFrame()
    if not pred.empty:
        out.append(("What tracks rejection", predictor_curves(pred, "self_mass")))
    return out


def _interventions(t: TraceData, es: list[dict]) -> str:
    from ..analysis.patching import answer

    return (f"<h2>Interventions ({html.escape(t.path.name)}; docs/patching.md)</h2><p>Each intervened pass drafts at "
            "its clean pass's round starts and is scored against the same target tokens; differences are paired "
            "per group.</p><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in answer(t, es)) + "</ul>")


def _patch_figures(t: TraceData, es: list[dict]) -> list:
    """The per-depth figure and, when the trace has prompt spans, their ranked scan (one effects() computation)."""
    from ..analysis.patching import scan
    from .patching import patch_effects, span_scan

    out = [(f"What each intervention changes, per depth ({t.path.name})", patch_effects(es))]
    table = scan(t, es)
    if len(table):
        out.append((f"Prompt spans ranked by the acceptance they move ({t.path.name})", span_scan(table)))
    return out


def html_report(traces: list[TraceData], title: str = "drifttool report") -> str:
    v = build_view(traces)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             "<p class='meta'>" + html.escape(
                 f"drifttool {__version__}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; traces: "
                 + ", ".join(str(t.path) for t in traces)) + "</p>",
             *_answer(Comparison.of(traces)),
             "<h2>Summary</h2>" + _table(v.summary, SUMMARY_COLUMNS)]
    figures = charts(v)
    for t in traces:  # a `drifttool patch` trace: what each intervention changes, in words and per depth
        if t.manifest.get("patch"):
            from ..analysis.patching import effects

            es = effects(t)
            parts.append(_interventions(t, es))
            figures[0:0] = _patch_figures(t, es)
    first = True
    for name, fig in figures:
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if first else False,
                                 config={"displaylogo": False}))
        first = False
    parts.append("<h2>Per depth</h2>" + _table(v.per_depth, PER_DEPTH_COLUMNS))
    parts.append("<h2>Every mass per depth</h2><p>Each per-head mass of the metric table (docs/metrics.md) and its "
                 "lift over the uniform share, head-mean per depth.</p>" + _table(v.per_depth, mass_columns()))
    parts.append("</body></html>")
    return "\n".join(parts)
