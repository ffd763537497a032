"""The answer in words: per drafter pair, one sentence to "does EAGLE-3 drift, does EAGLE-3.1 change it?", from the
statistics alone (analysis/verdict.py). Each half of the published story is one clause read against its null:

- the hidden state: fed-back RMS at depth K / depth 1 over the same rounds (its paired test over groups);
- attention: the drift verdict, from the recency-matched ratio (own drafts at depth K against what equally recent
  prompt tokens drew at depth 1), and, wherever the drafter attends a sink (its depth-1 lift's CI above 1), how much
  of the sink it keeps by depth K.

Every arrow, word and p comes from one paired sign-flip test over groups on the quantity shown; a ratio shown is
the ratio of sums over rounds (pooled), its CI a group bootstrap. A second drafter is compared with its EAGLE-3 by
the paired per-group contrast of each quantity, and by acceptance with what it can be a claim about (these
checkpoints, not the architectures, without seeds). Self lift (per own slot against uniform attention) is
descriptive only: its null predicts a fall for any drafter that favours recent keys."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from ..styles import drafter_kind, split_label
from ..trace.metric_table import acceptance_length
from .fmt import fmt_ci, fmt_p, fmt_ratio
from .metrics import MIN_CLUSTERS
from .stats import ALPHA
from .verdict import VERDICTS, detected, flat, unspan

WEAK_SINK = 2.0  # a depth-1 sink lift above uniform but below this: a weak sink at most


def side(s, name: str) -> int:
    """+1 / -1 when the paired test over groups detects `name` above / below 1 (outside the flat band), else 0."""
    r = {"value": getattr(s, name, np.nan), "p": getattr(s, f"{name}_p", np.nan),
         "mean_log": getattr(s, f"{name}_mean_log", np.nan)}
    for sd in (1, -1):
        if detected(r, sd) and not flat(r["value"]):
            return sd
    return 0


def growth(s, k: int) -> str:
    """The hidden-state half: fed-back RMS at depth K / depth 1, its word from its own paired test."""
    v = getattr(s, "rms_growth", np.nan)
    if v != v:
        return "fed-back RMS not measured"
    p, ml = getattr(s, "rms_growth_p", np.nan), getattr(s, "rms_growth_mean_log", np.nan)
    tested = bool(np.isfinite(p) and p < ALPHA)  # the paired test over groups detects a change
    if side(s, "rms_growth") == 0 and tested:
        # the groups' test detects a change the pooled ratio does not show (one long group against many short
        # ones): never "flat" beside a detected change; both numbers said
        return (f"fed-back RMS per group {'grows' if ml > 0 else 'shrinks'} x{np.exp(ml):.2f} on average from depth "
                f"1 to {k} ({fmt_p(p, 'words')}, {s.rms_growth_n} groups) while the pooled ratio over rounds is "
                f"{fmt_ratio(v, s.rms_growth_lo, s.rms_growth_hi)}: the groups disagree with their pooled rounds")
    word = {1: "grows", -1: "shrinks", 0: "stays flat" if flat(v) else "changes by no factor the groups establish"}[
        side(s, "rms_growth")]
    out = (f"fed-back RMS {word} {fmt_ratio(v, s.rms_growth_lo, s.rms_growth_hi)} from depth 1 to {k}, "
           f"{fmt_p(s.rms_growth_p, 'words')}")
    if side(s, "rms_growth") == 0:  # flat is a finding only with what the groups could have detected
        mde = getattr(s, "rms_growth_mde", np.inf)
        out += (f" (its {s.rms_growth_n} groups detect x{mde:.2f} or more at 80% power)" if np.isfinite(mde)
                else f" (its {s.rms_growth_n} groups are too few to detect any change)")
    return out


def has_sink(s) -> bool:
    """The drafter attends a sink it could lose: its depth-1 sink lift's CI lies above 1 (outside the flat band)."""
    v, lo = s.sink_lift_d1, s.sink_lift_d1_lo
    return v == v and lo == lo and lo > 1 and not flat(v)


def sink(s) -> str:
    """The depth-1 sink lift read against uniform attention (1.0), with its CI; where the drafter attends the sink,
    how much of it is kept by depth K (sink retention, its own test)."""
    v, lo, hi = s.sink_lift_d1, s.sink_lift_d1_lo, s.sink_lift_d1_hi
    if v != v:
        return "sink lift not measured (no sink positions)"
    lo_, hi_ = (lo, hi) if lo == lo and hi == hi else (v, v)
    r = getattr(s, "sink_retention", np.nan)
    if not (lo == lo and hi == hi) and not flat(v):  # no interval (fewer groups than the bootstrap needs)
        return (f"sink not placed against uniform (depth-1 sink lift {fmt_ci(v, lo, hi)}: too few groups for an "
                "interval)")
    if not has_sink(s):
        where = "below uniform" if hi_ < 1 and not flat(v) else "no more than uniform"
        out = f"no sink to lose (depth-1 sink lift {fmt_ci(v, lo, hi)}: {where})"
        if r == r and side(s, "sink_retention") > 0:  # deeper queries attend the sink more: say it, it is no loss
            out += (f", but gains sink mass with depth: {fmt_ratio(r, s.sink_retention_lo, s.sink_retention_hi)}"
                    f" by depth {getattr(s, 'depth_k', 'K')}, {fmt_p(s.sink_retention_p, 'words')} (a sink gained, "
                    "not lost)")
        return out
    kind = "a weak sink" if v < WEAK_SINK else "the sink"
    out = f"attends {kind} (depth-1 sink lift {fmt_ci(v, lo, hi)})"
    if r == r:
        word = retention_words(r, side(s, "sink_retention"), "no loss the groups establish")
        out += (f" and keeps {fmt_ratio(r, s.sink_retention_lo, s.sink_retention_hi)} of it by depth "
                f"{getattr(s, 'depth_k', 'K')}, {fmt_p(s.sink_retention_p, 'words')}: {word}")
    return out


KEEPS_MOST, LOSES_MOST = 0.5, 0.1  # retention grades: >= 0.5 keeps most, >= 0.1 loses most, below: nearly all


def retention_words(r: float, side_: int, unchanged: str) -> str:
    """Sink retention in graded words: a detected loss is 'keeps most of it' (x0.5 or more), 'loses most of it'
    (x0.1 to 0.5) or 'loses nearly all of it' (below x0.1); a detected gain says the sink grew (a sink gained is not
    a sink lost); no detection says `unchanged`."""
    if side_ > 0:
        return "gains sink mass with depth (a sink gained, not lost)"
    if side_ == 0:
        return unchanged
    return ("keeps most of it" if r >= KEEPS_MOST else "loses most of it" if r >= LOSES_MOST
            else "loses nearly all of it")


def elsewhere(s) -> str | None:
    """Where depth-1 attention concentrates instead of a sink: the recent and template lifts (when measured)."""
    parts = [f"{name} x{v:.1f}" for name, v in (("recent", getattr(s, "recent_lift_d1", np.nan)),
                                                ("template", getattr(s, "template_lift_d1", np.nan))) if v == v]
    return f"depth-1 lifts {', '.join(parts)} uniform" if parts else None


def drift(s, k: int) -> str:
    """The attention half's verdict (analysis/verdict.py) in words, with the recency-matched ratio behind it: where
    drift is detected, the depths it is detected at and the curve's peak (its Holm-adjusted p), then depth K."""
    v = s.drift_verdict
    rm = fmt_ratio(s.recency_ratio, s.recency_ratio_lo, s.recency_ratio_hi)
    what = (f"own drafts draw {rm} what equally recent prompt tokens drew at depth 1 (recency-matched ratio at depth "
            f"{k}, {fmt_p(s.recency_ratio_p, 'words')}, {s.recency_ratio_n} groups)")
    if v == "uniform":
        return "uniform attention: every lift within x/÷ 1.05 of uniform, nothing to drift from"
    if v == "drift":
        where = str(getattr(s, "drift_depths", "") or k)
        at = f"depth {where}" if where.isdigit() else f"depths {where}"
        top = getattr(s, "recency_ratio_max_depth", None)
        if top is None or top != top or int(top) == k:
            return f"drift at {at}: {what}"
        peak = fmt_ratio(s.recency_ratio_max, s.recency_ratio_max_lo, s.recency_ratio_max_hi)
        if int(top) not in unspan(getattr(s, "drift_depths", "") or ""):  # the peak is not where the test detects
            return (f"drift at {at} (Holm over depths 2\u2013{k}, {s.recency_ratio_n} groups); the curve's peak, {peak} "
                    f"at depth {int(top)}, is not detected there ({fmt_p(s.recency_ratio_max_p_holm, 'words')} under "
                    f"Holm); at depth {k} {rm}, {fmt_p(s.recency_ratio_p, 'words')}")
        return (f"drift at {at}: own drafts draw {peak} what equally recent prompt tokens drew at depth 1 at depth "
                f"{int(top)} (the curve's peak, {fmt_p(s.recency_ratio_max_p_holm, 'words')} under Holm over depths "
                f"2\u2013{k}, {s.recency_ratio_n} groups); at depth {k} {rm}, {fmt_p(s.recency_ratio_p, 'words')}")
    if v == "no drift":
        return f"no drift: {what}" + (f"; {s.drift_why}" if "band" in s.drift_why else "")
    if s.recency_ratio != s.recency_ratio:
        return f"drift not established: {s.drift_why}"
    return f"drift not established: {what}; {s.drift_why}"


def acceptance(r, pooled: pd.Series, seeds: int) -> str:
    if r is None:
        return ""
    claim = ("over seeds: a claim about the architectures" if seeds >= 6 else
             "for these two checkpoints (one trained model per variant: nothing yet about the architectures)")
    if r.n_groups < MIN_CLUSTERS:
        return (f"acceptance length {pooled[r.series]:.2f} vs {pooled[r.baseline]:.2f}: {r.n_groups} groups, no "
                "test can reach p < 0.05")
    sig = "detected" if r.p < ALPHA else "not detected"
    return (f"acceptance length {pooled[r.series]:.2f} vs {pooled[r.baseline]:.2f} pooled over rounds (the mean "
            f"per-group difference {r.difference:+.2f} [{r.difference_lo:+.2f}, {r.difference_hi:+.2f}], paired, "
            f"{fmt_p(r.p, 'words')}, {r.n_groups} groups: {sig}) {claim}")


CONTRAST_TEXT = {"recency_ratio": "recency-matched ratio", "rms_growth": "fed-back RMS growth",
                 "sink_retention": "sink retention"}


def contrast(rows: pd.DataFrame, base_row, x_row) -> str:
    """Against its EAGLE-3: the paired per-group factor of each quantity (sink retention only where both attend
    a sink), with its p."""
    parts = []
    for q, label in CONTRAST_TEXT.items():
        r = rows[rows.quantity == q] if len(rows) else rows
        if not len(r) or r.iloc[0].n_groups < 1 or r.iloc[0].factor != r.iloc[0].factor:
            continue
        if q == "sink_retention" and not (has_sink(base_row) and has_sink(x_row)):
            continue
        r = r.iloc[0]
        parts.append(f"{label} x{r.factor:.2f} [{r.factor_lo:.2f}, {r.factor_hi:.2f}], {fmt_p(r.p, 'words')}")
    return f"against {base_row.series}: {'; '.join(parts)}" if parts else ""


def answer(cmp, s: pd.DataFrame | None = None, ad: pd.DataFrame | None = None, ct: pd.DataFrame | None = None,
           seeds: int = 1) -> list[str]:
    """Per trace, one answer per drafter against its EAGLE-3 one ("does it drift? does the other change it?"), or
    one description when a trace holds a single drafter. s / ad / ct: the summary, acceptance differences and
    contrasts when already computed."""
    got = _inputs(cmp, s, ad, ct)
    if got is None:
        return []
    ad, ct, rows, pooled = got
    k = cmp.depth
    groups: dict[str | None, list[str]] = {}
    for ser in cmp.series:
        groups.setdefault(split_label(ser.label)[0], []).append(ser.label)
    out = []
    for labels in groups.values():
        out += _trace_lines([x for x in labels if x in rows], rows, ad, ct, k, pooled, seeds)
    return out


def _clauses(r, k: int, *more: str) -> str:
    attention = [drift(r, k)] if r.drift_verdict == "uniform" else [drift(r, k), sink(r), elsewhere(r)]
    return "; ".join(x for x in [growth(r, k), *attention, *more] if x)


def _trace_lines(labels: list[str], rows: dict, ad: pd.DataFrame, ct: pd.DataFrame, k: int, pooled: pd.Series,
                 seeds: int) -> list[str]:
    """One trace's sentences: its EAGLE-3 drafter (or its first) asked whether it drifts, every other drafter
    whether it changes that (its own clauses, then the paired contrasts and acceptance against the EAGLE-3)."""
    if not labels:
        return []
    base = next((x for x in labels if drafter_kind(x) == "eagle3"), labels[0])
    about = _clauses(rows[base], k)
    out = [f"Does {base} drift? {about}." if len(labels) > 1 else f"{base}: {about}."]
    for x in labels:
        if x == base:
            continue
        a = ad[(ad.series == x) & (ad.baseline == base)] if len(ad) else ad
        acc = acceptance(a.iloc[0] if len(a) else None, pooled, seeds)
        c = ct[(ct.series == x) & (ct.baseline == base)] if len(ct) else ct
        out.append(f"Does {x} change it? {_clauses(rows[x], k, contrast(c, rows[base], rows[x]), acc)}.")
    return out


SHORT_WIDTH = 80  # the terminal's "In short" fits a plain 80-column terminal
VERDICT_SHORT = {"drift": "drift", "no drift": "no drift", "not established": "not estab.", "uniform": "uniform"}


def _cell(s, name: str, d: int = 2) -> str:
    """A pooled ratio with the arrow of its paired test (↑ / ↓ detected, · not)."""
    v = getattr(s, name, np.nan)
    if v != v:
        return "-"
    return f"x{v:.{d}f}{ {1: '↑', -1: '↓', 0: '·'}[side(s, name)]}"


def _short_cells(r, acc: str) -> list[str]:
    sink_ = "-" if r.sink_lift_d1 != r.sink_lift_d1 else f"{r.sink_lift_d1:.2f}" + ("↑" if has_sink(r) else "·")
    kept = _cell(r, "sink_retention") if has_sink(r) else "-"
    word = VERDICT_SHORT[r.drift_verdict]
    if r.drift_verdict == "drift" and getattr(r, "drift_depths", ""):
        word += f" d{r.drift_depths}"  # the depths the curve detects it at (Holm over depths)
    return [_cell(r, "rms_growth"), _cell(r, "recency_ratio"), sink_, kept, acc, word]


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


def _inputs(cmp, s, ad, ct) -> tuple[pd.DataFrame, pd.DataFrame, dict, pd.Series] | None:
    """What the answer and In short both read: acceptance differences, contrasts, summary rows by series (with the
    depth K) and the pooled acceptance length per series (computed when not given); None without a summary row."""
    s = cmp.summary() if s is None else s
    if s.empty:
        return None
    ad = cmp.acceptance_differences() if ad is None else ad
    ct = cmp.contrasts() if ct is None else ct
    g = cmp.rounds.groupby("series", observed=True)["accepted"]
    rows = {r.series: r for r in s.assign(depth_k=cmp.depth).itertuples()}
    return ad, ct, rows, acceptance_length(g.sum(), g.count())


SHORT_LEGEND = ("Pooled ratios; ↑↓ detected (paired test over groups, p < 0.05, beyond x/÷ 1.05), · not; sink lift "
                "↑: its CI above uniform; own/rec.: own drafts against prompt tokens as recent at d1 (> 1: drift).")


def short_data(cmp, s: pd.DataFrame | None = None, ad: pd.DataFrame | None = None,
               ct: pd.DataFrame | None = None) -> tuple[str, list[str], list[tuple[str, list[str]]]] | None:
    """In short as data: the counted sentence, the column heads in words and one row of cells per series (the
    terminal's text and the report's HTML table are both drawn from it)."""
    got = _inputs(cmp, s, ad, ct)
    if got is None:
        return None
    ad, _, rows, pooled = got
    k = cmp.depth
    labels = [x.label for x in cmp.series if x.label in rows]
    cells = {lab: _short_cells(rows[lab], _acc_cell(pooled, ad, lab)) for lab in labels}
    heads = [f"fed-back RMS, depth 1 → {k}", f"own drafts / equally recent prompt tokens at depth {k}",
             "sink lift at depth 1", f"sink kept at depth {k}", "acceptance length (paired difference)", "verdict"]
    keep = [i for i in range(len(heads)) if i != 3 or any(c[3] != "-" for c in cells.values())]
    return (_counted(labels, rows, k), [heads[i] for i in keep],
            [(lab, [cells[lab][i] for i in keep]) for lab in labels])


def short(cmp, s: pd.DataFrame | None = None, ad: pd.DataFrame | None = None,
          ct: pd.DataFrame | None = None) -> list[str]:
    """The terminal's "In short": one counted sentence, then one row per series (fed-back RMS depth 1 -> K, the
    recency-matched ratio at K, depth-1 sink lift, sink kept by K, acceptance length against the trace's EAGLE-3,
    the verdict) — a table that stays a dozen lines for a handful of drafters. The sentences with every CI and p
    follow under "The answer"."""
    got = _inputs(cmp, s, ad, ct)
    if got is None:
        return []
    ad, _, rows, pooled = got
    k = cmp.depth
    labels = [x.label for x in cmp.series if x.label in rows]
    cells = {lab: _short_cells(rows[lab], _acc_cell(pooled, ad, lab)) for lab in labels}
    return textwrap.wrap(_counted(labels, rows, k), SHORT_WIDTH) + _short_table(labels, cells, k)


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
    heads = [("RMS", f"d1->d{k}"), ("own/rec.", f"at d{k}"), ("sink", "lift d1"), ("sink", f"kept d{k}"),
             ("acc. length", "paired diff"), ("verdict", "")]
    keep = [i for i in range(len(heads)) if i != 3 or any(c[3] != "-" for c in cells.values())]  # sink kept: sinks only
    heads = [heads[i] for i in keep]
    cells = {lab: [c[i] for i in keep] for lab, c in cells.items()}
    widths = [max(len(h[0]), len(h[1]), *(len(c[i]) for c in cells.values())) for i, h in enumerate(heads)]
    room = SHORT_WIDTH - sum(w + 1 for w in widths)
    names, dropped = _short_labels(labels, room)
    lw = max(len("series"), *map(len, names))
    out = ["series".ljust(lw) + "".join(f" {h[0]:>{w}}" for h, w in zip(heads, widths))]
    out.append((f"({dropped}...)" if dropped else "").ljust(lw) + "".join(f" {h[1]:>{w}}"
                                                                          for h, w in zip(heads, widths)))
    for lab, name in zip(labels, names):
        out.append(name.ljust(lw) + "".join(f" {c:>{w}}" for c, w in zip(cells[lab], widths)))
    out.append("Pooled ratios; ↑↓ detected (paired test over groups, p < 0.05, beyond x/÷ 1.05),")
    out.append("· not; sink lift ↑: its CI above uniform; own/rec.: own drafts against prompt")
    out.append("tokens as recent at d1 (> 1: drift).")
    return out


def _counted(labels: list[str], rows: dict, k: int) -> str:
    """The first sentence: the verdicts counted, the fed-back state's growth and the sinks — counts, so the
    sentence stays one line however many drafters there are."""
    n = len(labels)
    verdicts = [rows[x].drift_verdict for x in labels]
    grows = [x for x in labels if side(rows[x], "rms_growth") > 0]
    kinds = sorted({drafter_kind(x) or "other" for x in grows})
    sinks = [x for x in labels if has_sink(rows[x])]
    lost = sum(side(rows[x], "sink_retention") < 0 for x in sinks)
    who = f" ({', '.join(kinds)})" if grows else ""
    parts = [f"{verdicts.count(v)} {v}" for v in VERDICTS if verdicts.count(v)]
    return (f"Drift verdicts (own drafts against equally recent prompt tokens, depth {k}) over {n} series: "
            f"{', '.join(parts)}; fed-back RMS grows in {len(grows)} of {n}{who}; a sink above uniform in "
            f"{len(sinks)} of {n}" + (f", part of it lost by depth {k} in {lost}." if sinks else "."))


GROW = {1: "grows", -1: "shrinks", 0: "does not change detectably"}


def plain_halves(cmp) -> list[str]:
    """The answer in plain words: one sentence per half of the published story (the hidden state, whether EAGLE-3
    shows the growth and EAGLE-3.1 removes it; then attention) and one for acceptance, for a trace's EAGLE-3 and
    EAGLE-3.1 drafters, from the summary and the paired contrasts — what the README and `drifttool demo` lead
    with. Empty when the trace lacks either drafter."""
    s = cmp.summary().set_index("series")
    if not {"eagle3", "eagle3.1"} <= set(s.index):
        return []
    e3, e31 = s.loc["eagle3"], s.loc["eagle3.1"]
    ct = cmp.contrasts()
    ct = ct[(ct.series == "eagle3.1")].set_index("quantity") if len(ct) else ct
    k = cmp.depth
    def grow(r) -> str:
        sd = side(r, "rms_growth")
        if sd == 0 and np.isfinite(r.rms_growth_p) and r.rms_growth_p < ALPHA:  # detected per group, not pooled
            return "changes, but its groups and its pooled rounds disagree on the direction"
        return GROW[sd]

    hidden = (f"EAGLE-3's fed-back hidden state {grow(e3)} (x{e3.rms_growth:.2f} from depth 1 to "
              f"{k}), EAGLE-3.1's {grow(e31)} (x{e31.rms_growth:.2f})")
    fixed = "rms_growth" in ct.index and ct.loc["rms_growth", "p"] < ALPHA and ct.loc["rms_growth", "factor"] < 1
    if "rms_growth" in ct.index and ct.loc["rms_growth", "p"] < ALPHA:
        hidden += (f": EAGLE-3.1 changes the growth by x{ct.loc['rms_growth', 'factor']:.2f} (paired over groups, "
                   f"{fmt_p(ct.loc['rms_growth', 'p'], 'words')})")
    if side(e3, "rms_growth") > 0:  # the pathology's first half is there: does EAGLE-3.1 fix it?
        hidden += (" — EAGLE-3.1 removes the growth" if fixed and side(e31, "rms_growth") <= 0 and
                   not (side(e31, "rms_growth") == 0 and np.isfinite(e31.rms_growth_p) and e31.rms_growth_p < ALPHA)
                   else " — EAGLE-3.1 reduces the growth but does not remove it" if fixed
                   else " — EAGLE-3.1 does not reduce it detectably")

    def verdict(name: str, r) -> str:
        rm = f"x{r.recency_ratio:.2f}" if r.recency_ratio == r.recency_ratio else ""
        dd = str(getattr(r, "drift_depths", "") or k)
        top = getattr(r, "recency_ratio_max_depth", None)
        if r.drift_verdict == "drift" and top == top and top is not None and int(top) != k:
            return (f"{name} drifts at depth{'' if dd.isdigit() else 's'} {dd} (its own drafts draw "
                    f"x{r.recency_ratio_max:.2f} what equally recent prompt tokens drew at depth {int(top)}; {rm} at "
                    f"depth {k})")
        return {"drift": f"{name} drifts at depth{'' if dd.isdigit() else 's'} {dd} (its own drafts draw {rm} what "
                         "equally recent prompt tokens drew)",
                "no drift": f"{name} does not drift (its own drafts draw {rm} what equally recent prompt tokens drew)",
                "not established": f"for {name} drift is not established ({r.drift_why})",
                "uniform": f"{name} attends uniformly"}[r.drift_verdict]

    def kept(name: str, r) -> str:
        v = r.sink_retention
        word = retention_words(v, side(r, "sink_retention"), "keeps it as far as the groups can tell")
        return (f"{name} {word} ({fmt_ratio(v, r.sink_retention_lo, r.sink_retention_hi)} of its depth-1 sink mass "
                f"at depth {k})" if v == v else f"{name}: not measured")

    sinks = [(x, r) for x, r in (("EAGLE-3", e3), ("EAGLE-3.1", e31)) if has_sink(r)]
    if sinks:
        sink_words = "; ".join(kept(x, r) for x, r in sinks)
        sink_part = f"{' and '.join(x for x, _ in sinks)} attend the target's sink at depth 1: {sink_words}"
    else:
        sink_part = ("neither drafter attends the target's sink (depth-1 sink lift not above uniform), so the sink "
                     "half of the story cannot be tested on them")
    return [f"The hidden state: {hidden}.",
            f"The attention: {verdict('EAGLE-3', e3)}; {verdict('EAGLE-3.1', e31)}; {sink_part}.",
            f"The acceptance: {plain_acceptance(cmp, s)}."]


def plain_acceptance(cmp, s: pd.DataFrame) -> str:
    """Acceptance length of EAGLE-3.1 against EAGLE-3 in plain words: the pooled values, the per-group paired
    difference with its p (and what the groups detect when nothing is), for these checkpoints."""
    ad = cmp.acceptance_differences()
    r = ad[(ad.series == "eagle3.1") & (ad.baseline == "eagle3")] if len(ad) else ad
    a31, a3 = s.loc["eagle3.1", "mean_acceptance_length"], s.loc["eagle3", "mean_acceptance_length"]
    head = f"EAGLE-3.1 accepts {a31:.2f} tokens per round against EAGLE-3's {a3:.2f}"
    if not len(r) or r.iloc[0].n_groups < MIN_CLUSTERS:
        return head + " (too few groups to test the difference)"
    r = r.iloc[0]
    diff = (f"{r.difference:+.2f} [{r.difference_lo:+.2f}, {r.difference_hi:+.2f}] per group "
            f"({fmt_p(r.p, 'words')}, {r.n_groups} groups)")
    if r.p < ALPHA:
        return f"{head}: {'a gain' if r.difference > 0 else 'a loss'} of {diff}, for these two checkpoints"
    return (f"{head}: {diff}, no difference its groups detect (they detect {r.mde:.2f} or more at 80% power), "
            "for these two checkpoints")
