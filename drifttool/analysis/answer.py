"""The answer in words: per drafter pair, one sentence to "does EAGLE-3 drift, does EAGLE-3.1 fix it?", from the
statistics alone. Every clause is a quantity read against what would make it mean something: fed-back state growth
(RMS at depth K / depth 1, its paired p), the depth-1 sink lift (no sink to lose when it is not above uniform),
the self-lift trend (attention per own draft slot from depth 2 to K: > 1 drift, < 1 recency / spreading), and
acceptance with what it can be a claim about (these checkpoints, not the architectures, without seeds). Where the
data cannot tell, the sentence says why instead of giving a number that reads as a finding."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from ..styles import drafter_kind, split_label
from ..trace.metric_table import acceptance_length
from .metrics import MIN_CLUSTERS
from .stats import ALPHA

WEAK_SINK = 2.0  # a depth-1 sink lift above uniform but below this: a weak sink at most


def _p(p: float) -> str:
    if p != p:
        return "p -"
    return "p < 0.001" if p < 0.001 else f"p {p:.3f}" if p < 0.01 else f"p {p:.2f}"


def _ci(v: float, lo: float, hi: float, d: int = 2) -> str:
    if v != v:
        return "-"
    return f"{v:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]" if lo == lo and hi == hi else f"{v:.{d}f} (no CI: < 6 groups)"


def _trend(tr: pd.DataFrame, series: str, metric: str, k: int) -> pd.Series | None:
    if tr is None or tr.empty:
        return None
    r = tr[(tr.series == series) & (tr.metric == metric) & (tr.depth == k) & (tr.population == "all")]
    return r.iloc[0] if len(r) else None


def growth(s, tr, k: int) -> str:
    t = _trend(tr, s.series, "rms_in", k)
    p = f", {_p(t.p)}" if t is not None else ""
    fg = s.feature_growth
    if fg != fg:
        return "fed-back RMS not measured"
    word = "grows" if fg > 1.05 else "shrinks" if fg < 0.95 else "stays flat"
    out = f"fed-back RMS {word} x{fg:.2f} from depth 1 to {k}{p}"
    if word == "stays flat" and t is not None:  # flat is a finding only with what the groups could have detected
        rel = t.mde / t.base_value if t.base_value and t.base_value == t.base_value else np.nan
        out += (f" (its {t.n_groups} groups detect a change of {rel:.0%} or more at 80% power)" if np.isfinite(rel)
                else f" (its {t.n_groups} groups are too few to detect any change)")
    return out


def sink(s) -> str:
    """The depth-1 sink lift read against uniform attention (1.0), with its CI: a sink the drafter could lose only
    when it attends the sink positions clearly more than uniform attention would."""
    v, lo, hi = s.sink_lift_d1, s.sink_lift_d1_lo, s.sink_lift_d1_hi
    if v != v:
        return "sink lift not measured (no sink positions)"
    lo_, hi_ = (lo, hi) if lo == lo and hi == hi else (v, v)
    if hi_ < 1:
        return f"no sink to lose (depth-1 sink lift {_ci(v, lo, hi)}: below uniform)"
    if lo_ <= 1:
        return f"no sink to lose (depth-1 sink lift {_ci(v, lo, hi)}: no more than uniform)"
    if v < WEAK_SINK:
        return f"a weak sink at most (depth-1 sink lift {_ci(v, lo, hi)}: above uniform, below {WEAK_SINK:g}x)"
    return f"the drafter attends the sink (depth-1 sink lift {_ci(v, lo, hi)})"


def elsewhere(s) -> str | None:
    """Where depth-1 attention concentrates instead of a sink: the recent and template lifts (when measured)."""
    parts = [f"{name} x{v:.1f}" for name, v in (("recent", getattr(s, "recent_lift_d1", np.nan)),
                                                ("template", getattr(s, "template_lift_d1", np.nan))) if v == v]
    return f"depth-1 lifts {', '.join(parts)} uniform" if parts else None


def self_trend(s, tr, k: int) -> str:
    v, lo, hi = s.self_lift_trend, s.self_lift_trend_lo, s.self_lift_trend_hi
    if v != v:
        return "self-lift trend needs depth >= 3"
    t = _trend(tr, s.series, "self_lift", k)
    p = f", {_p(t.p)}" if t is not None else ""
    if lo == lo and hi < 1:
        what = "falls: attention per own draft slot spreads with depth, recency not drift"
    elif lo == lo and lo > 1:
        what = "rises: attention concentrates on its own drafts with depth (drift)"
    else:
        what = "no trend the groups establish"
    return f"self lift x{_ci(v, lo, hi)} from depth 2 to {k}{p}: {what}"


def acceptance(r, pooled: pd.Series, seeds: int) -> str:
    if r is None:
        return ""
    claim = ("over seeds: a claim about the architectures" if seeds >= 3 else
             "for these two checkpoints (one trained model per variant: nothing yet about the architectures)")
    if r.n_groups < MIN_CLUSTERS:
        return (f"acceptance length {pooled[r.series]:.2f} vs {pooled[r.baseline]:.2f}: {r.n_groups} groups, no "
                "test can reach p < 0.05")
    sig = "detected" if r.p < ALPHA else "not detected"
    return (f"acceptance length {pooled[r.series]:.2f} vs {pooled[r.baseline]:.2f} (paired {r.difference:+.2f} "
            f"[{r.difference_lo:+.2f}, {r.difference_hi:+.2f}], {_p(r.p)}, {r.n_groups} groups: {sig}) {claim}")


def answer(cmp, s: pd.DataFrame | None = None, tr: pd.DataFrame | None = None,
           ad: pd.DataFrame | None = None, seeds: int = 1) -> list[str]:
    """Per trace, one answer per drafter against its EAGLE-3 one ("does it drift? does the other change it?"), or
    one description when a trace holds a single drafter."""
    got = _inputs(cmp, s, tr, ad)
    if got is None:
        return []
    tr, ad, rows, pooled = got
    k = cmp.depth
    groups: dict[str | None, list[str]] = {}
    for ser in cmp.series:
        groups.setdefault(split_label(ser.label)[0], []).append(ser.label)
    out = []
    for labels in groups.values():
        out += _trace_lines([x for x in labels if x in rows], rows, tr, ad, k, pooled, seeds)
    return out


def _clauses(r, tr: pd.DataFrame, k: int, *more: str) -> str:
    return "; ".join(x for x in [growth(r, tr, k), sink(r), elsewhere(r), self_trend(r, tr, k), *more] if x)


def _trace_lines(labels: list[str], rows: dict, tr: pd.DataFrame, ad: pd.DataFrame, k: int, pooled: pd.Series,
                 seeds: int) -> list[str]:
    """One trace's sentences: its EAGLE-3 drafter (or its first) asked whether it drifts, every other drafter
    whether it changes that."""
    if not labels:
        return []
    base = next((x for x in labels if drafter_kind(x) == "eagle3"), labels[0])
    about = _clauses(rows[base], tr, k)
    out = [f"Does {base} drift? {about}." if len(labels) > 1 else f"{base}: {about}."]
    for x in labels:
        if x == base:
            continue
        a = ad[(ad.series == x) & (ad.baseline == base)] if len(ad) else ad
        acc = acceptance(a.iloc[0] if len(a) else None, pooled, seeds)
        out.append(f"Does {x} change it? {_clauses(rows[x], tr, k, acc)}.")
    return out


def headline(lines: list[str]) -> str:
    """The first sentence a user reads: whether EAGLE-3 drifts and whether EAGLE-3.1 changes it."""
    return lines[0] if lines else "no drafted rounds: nothing to answer"


SHORT_WIDTH = 80  # the terminal's "In short" fits a plain 80-column terminal


def _arrow(lo: float, hi: float, v: float, lo_flat: float = 1.0, hi_flat: float = 1.0) -> str:
    """↑ / ↓ when the interval (or, without one, the value) clears the flat band; · when the data do not tell."""
    lo, hi = (lo, hi) if lo == lo and hi == hi else (v, v)
    return "↑" if lo > hi_flat else "↓" if hi < lo_flat else "·"


def _short_cells(r, tr: pd.DataFrame, k: int, acc: str) -> list[str]:
    t = _trend(tr, r.series, "rms_in", k)
    fg = r.feature_growth
    detected = t is not None and t.p == t.p and t.p < ALPHA
    rms = "-" if fg != fg else f"x{fg:.2f} " + (("↑" if fg > 1.05 else "↓" if fg < 0.95 else "·") if detected else "·")
    st = r.self_lift_trend
    self_ = "-" if st != st else f"x{st:.2f} " + _arrow(r.self_lift_trend_lo, r.self_lift_trend_hi, np.nan)
    v, lo = r.sink_lift_d1, r.sink_lift_d1_lo
    sink_ = "-" if v != v else f"{v:.2f} " + ("none" if not (lo if lo == lo else v) > 1 else
                                                "weak" if v < WEAK_SINK else "yes")
    return [rms, self_, sink_, acc]


def _short_labels(labels: list[str], room: int) -> tuple[list[str], str]:
    """Series names whole; when they do not fit, the prefix every name shares (up to a '-' or '_') is dropped and
    named once, never a cut inside a name."""
    if max(map(len, labels)) <= room or len(labels) < 2:
        return labels, ""
    common = labels[0]
    for x in labels[1:]:
        while not x.startswith(common):
            common = common[:-1]
    cut = max(common.rfind("-"), common.rfind("_")) + 1
    return ([x[cut:] for x in labels], labels[0][:cut]) if cut else (labels, "")


def _inputs(cmp, s, tr, ad) -> tuple[pd.DataFrame, pd.DataFrame, dict, pd.Series] | None:
    """What the answer and In short both read: trends, acceptance differences, summary rows by series and the
    pooled acceptance length per series (computed when not given); None without a summary row."""
    s = cmp.summary() if s is None else s
    if s.empty:
        return None
    tr = cmp.trends() if tr is None else tr
    ad = cmp.acceptance_differences() if ad is None else ad
    g = cmp.rounds.groupby("series", observed=True)["accepted"]
    return tr, ad, {r.series: r for r in s.itertuples()}, acceptance_length(g.sum(), g.count())


def short(cmp, s: pd.DataFrame | None = None, tr: pd.DataFrame | None = None,
          ad: pd.DataFrame | None = None) -> list[str]:
    """The terminal's "In short": one counted sentence, then one row per series (fed-back RMS depth 1 -> K, self
    lift depth 2 -> K, depth-1 sink lift, acceptance length against the trace's EAGLE-3) — a table that stays a
    dozen lines for a handful of drafters. The sentences with every CI and p follow under "The answer"."""
    got = _inputs(cmp, s, tr, ad)
    if got is None:
        return []
    tr, ad, rows, pooled = got
    k = cmp.depth
    labels = [x.label for x in cmp.series if x.label in rows]
    cells = {lab: _short_cells(rows[lab], tr, k, _acc_cell(pooled, ad, lab)) for lab in labels}
    return textwrap.wrap(_counted(labels, rows, cells, k), SHORT_WIDTH) + _short_table(labels, cells, k)


def _acc_cell(pooled: pd.Series, ad: pd.DataFrame, lab: str) -> str:
    """A series' pooled acceptance length, with its paired difference against the trace's EAGLE-3 where there is
    one (an arrow only where the test detects it)."""
    a = ad[ad.series == lab] if len(ad) else ad
    v = pooled.get(lab, np.nan)  # a series without a drafted round has no acceptance length
    acc = f"{v:.2f}" if v == v else "-"
    if len(a):
        r = a.iloc[0]
        mark = ("↑" if r.difference > 0 else "↓") if r.p == r.p and r.p < ALPHA else "·"
        acc += f" {r.difference:+.2f}{mark}"
    return acc


def _short_table(labels: list[str], cells: dict[str, list[str]], k: int) -> list[str]:
    """The two header lines, one row per series (names shortened only when they would not fit) and the legend."""
    heads = [("fed-back RMS", f"d1 -> d{k}"), ("self lift", f"d2 -> d{k}"), ("sink lift", "at d1"),
             ("acc. length", "paired diff")]
    widths = [max(len(h[0]), len(h[1]), *(len(c[i]) for c in cells.values())) for i, h in enumerate(heads)]
    room = SHORT_WIDTH - sum(w + 2 for w in widths)
    names, dropped = _short_labels(labels, room)
    lw = max(len("series"), *map(len, names))
    out = ["series".ljust(lw) + "".join(f"  {h[0]:>{w}}" for h, w in zip(heads, widths))]
    out.append((f"({dropped}...)" if dropped else "").ljust(lw) + "".join(f"  {h[1]:>{w}}"
                                                                          for h, w in zip(heads, widths)))
    for lab, name in zip(labels, names):
        out.append(name.ljust(lw) + "".join(f"  {c:>{w}}" for c, w in zip(cells[lab], widths)))
    out.append("↑↓ detected (p < 0.05 over groups), · not; lift = x uniform; none: not above it.")
    return out


def _counted(labels: list[str], rows: dict, cells: dict, k: int) -> str:
    """The first sentence: in how many series attention drifts (self lift rises), the fed-back state grows, and
    a sink exists to lose — counts, so the sentence stays one line however many drafters there are."""
    n = len(labels)
    drift = sum(cells[x][1].endswith("↑") for x in labels)
    grows = [x for x in labels if cells[x][0].endswith("↑")]
    kinds = sorted({drafter_kind(x) or "other" for x in grows})
    sinks = sum(cells[x][2].endswith(("weak", "yes")) for x in labels)
    who = f" ({', '.join(kinds)})" if grows else ""
    return (f"Drift (self lift rising to depth {k}) in {drift} of {n} series; fed-back RMS grows in {len(grows)} of "
            f"{n}{who}; a sink above uniform in {sinks} of {n}.")
