"""Rich terminal rendering of a Comparison (what `drifttool compare` and `drifttool demo` print).

Every table fits 80 columns: a 95% CI sits on the line under its value, long series labels wrap inside
their cell (never cut with an ellipsis), and per-depth tables keep the drafters of one depth on adjacent
rows. The report ends with a plain-language summary of what differs between the drafters and by how much."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.markup import escape as _e  # names, paths and notes are data, not rich markup

from ..trace.metric_table import by_name, short, shown
from ..trace.positions import query_position
from .compare import MIN_N, Comparison
from .metrics import MIN_CLUSTERS
from .report_table import SERIES_WIDTH  # noqa: F401
from .report_table import fmt as _f
from .report_table import label as _lab
from .report_table import order as _order
from .report_table import series_width as _sw
from .report_table import table as _table


def _n(v, n, min_n: int = MIN_N, d: int = 2) -> str:
    """A value over n rounds; starred and dimmed when n < min_n (a handful of chains is not a rate)."""
    s = _f(v, d=d)
    if s != "-" and n == n and n < min_n:
        return f"[dim]{s}*[/dim]"
    return s


def print_acceptance(c: Console, s: pd.DataFrame) -> None:
    """Acceptance under each definition by name (docs/acceptance.md), measured beside the i.i.d. estimate.
    The per-depth definitions (per-position rate, n-alpha) are in the acceptance-by-depth table."""
    from .metrics import ACCEPTANCE_DEFINITIONS as D

    t = _table("Acceptance (95% CI over groups)", "series", "groups /\nprompts", "drafts", "mean acc.\nlength",
               "i.i.d.\n(p)", "meas. -\ni.i.d.", "draft\nacc.\nrate",
               widths={**_sw(s["series"]), "mean acc.\nlength": 12})
    for _, r in s.iterrows():
        t.add_row(_lab(r.series), f"{r.groups} / {r.prompts}", str(r.drafts),
                  _f(r.mean_acceptance_length, r.al_lo, r.al_hi, 2),
                  f"{_f(r.iid_acceptance_length, d=2)}\n(p={_f(r.iid_p, d=2)})",
                  _f(r.mean_acceptance_length - r.iid_acceptance_length, d=2), _f(r.draft_acceptance_rate))
    c.print(t)
    names = "; ".join(D[k]["name"] for k in ("mean_acceptance_length", "iid_acceptance_length",
                                            "draft_acceptance_rate", "per_position_rate", "n_alpha"))
    c.print(f"Definitions (docs/acceptance.md): {names}.", markup=False)


def print_drift(c: Console, s: pd.DataFrame) -> None:
    t = _table("Attention against uniform, and feature growth (95% CI over groups)", "series", "sink lift\nat d1",
               "self lift\nd2..K", "self lift\ntrend", "feature\ngrowth", widths={**_sw(s["series"])})
    for _, r in s.iterrows():
        t.add_row(_lab(r.series), _f(r.sink_lift_d1, r.sink_lift_d1_lo, r.sink_lift_d1_hi, d=2),
                  _f(r.self_lift, r.self_lift_lo, r.self_lift_hi, d=1),
                  _f(r.self_lift_trend, r.self_lift_trend_lo, r.self_lift_trend_hi, d=2), _f(r.feature_growth, d=2))
    c.print(t)
    c.print("lift = mass / the share uniform attention over the keys the query saw would give it (1.0 = no more "
            "than uniform). sink lift at d1: no sink to lose when it is near 1. self lift trend: self lift at depth K "
            "/ at depth 2, same rounds (descriptive: it falls for any drafter that favours recent keys; drift is read "
            "by the recency-matched ratio). feature growth: RMS(layer input) at depth K / depth 1.", markup=False)


def print_per_depth(c: Console, cmp: Comparison) -> None:
    """Two per-depth tables (attention, acceptance), rows by depth then drafter."""
    pd_ = cmp.per_depth()
    if pd_.empty:
        return
    pd_ = pd_.assign(_o=pd_["series"].map(_order(cmp))).sort_values(["depth", "_o"])
    for title, cols, widths, gated in _attention_tables(pd_, c.width):
        heads = [f"{short(m)}\nlift" if m.endswith("_lift") else short(m) for m in cols]
        t = _table(title, "depth", "series", *heads, widths={**_sw(pd_["series"]), **widths})
        last = None
        for _, r in pd_.iterrows():
            if last is not None and r.depth != last:
                t.add_section()
            last = r.depth
            t.add_row(str(int(r.depth)), _lab(r.series), *(_mass_cell(r, m, m in gated) for m in cols))
        c.print(t)
    t = _table("Per depth: acceptance (95% CI over groups)", "depth", "series", "rounds", "prefix-\ncorrect",
               "per-position\nrate (vLLM)", "n-alpha\n(EAGLE)",
               widths={**_sw(pd_["series"]), "per-position\nrate (vLLM)": 14})
    last, small = None, False
    for _, r in pd_.iterrows():
        if last is not None and r.depth != last:
            t.add_section()
        last = r.depth
        small |= bool(r.n_reached < MIN_N)
        t.add_row(str(int(r.depth)), _lab(r.series), str(int(r.n_rounds)), str(int(r.n_reached)),
                  _f(r.acceptance_rate, r.acceptance_rate_lo, r.acceptance_rate_hi), _n(r.n_alpha, r.n_reached))
    c.print(t)
    if small:
        c.print(f"* n-alpha over fewer than {MIN_N} chains reaching the depth: too few to read as a rate.",
                markup=False)


def _attention_tables(pd_: pd.DataFrame, width: int) -> list[tuple[str, list[str], dict[str, int], set[str]]]:
    """(title, columns, minimum widths, masses with a CI line) of the per-depth attention tables. The metric table's
    shown lifts and masses (Metric.show): a row added there is printed here. Lifts in one table; masses (the story's
    gated ones with their CI line; prompt = 1 - sink - self, its value alone) and the layer-input RMS in as many
    tables as fit the console's width: headers whole, no column cut off."""
    lifts = [m for m in shown("lift") if m in pd_]
    masses = [*(m for m in shown("mass") if m in pd_), "rms_in"]
    gated = {m for m in masses if m in by_name() and by_name()[m].better}
    room = width - 6 - (_sw(pd_["series"]).get("series", SERIES_WIDTH) + 2)
    chunks: list[list[str]] = [[]]
    for m in masses:
        if chunks[-1] and sum(16 if x in gated else 9 for x in (*chunks[-1], m)) > room:
            chunks.append([])
        chunks[-1].append(m)
    out = [("Per depth: attention against uniform (lift = mass / its uniform share; all rounds)", lifts,
            {f"{short(m)}\nlift": max(5, len(short(m))) for m in lifts}, gated)]
    return out + [("Per depth: attention masses (95% CI over groups) and layer-input RMS" + (" (continued)" if i else ""),
                   cols, {short(m): 14 for m in cols if m in gated}, gated) for i, cols in enumerate(chunks)]


def _mass_cell(r: pd.Series, m: str, ci: bool) -> str:
    """A per-depth cell: a lift or the RMS to 2 decimals, a mass to 3 (its CI on the next line when `ci`)."""
    if m.endswith("_lift") or m == "rms_in":
        return _f(r[m], d=2)
    return _f(r[m], r.get(f"{m}_lo", float("nan")), r.get(f"{m}_hi", float("nan"))) if ci else _f(r[m])


def print_decay(c: Console, cmp: Comparison, breakeven: float | None = None) -> None:
    from .decay import context_curve, decay_table

    cc = context_curve(cmp)
    if cc.empty:
        return
    cc = cc.assign(_o=cc["series"].map(_order(cmp))).sort_values(["bucket_lo", "_o"])
    t = _table("Long-context decay: by context length (power-of-two buckets)", "context", "series", "rounds",
               "acc.\nlength", "draft\nacc.\nrate", "self\nlift", "sink", "rms_in", widths=_sw(cc["series"]))
    last = None
    for _, r in cc.iterrows():
        if last is not None and r.bucket_lo != last:
            t.add_section()
        last = r.bucket_lo
        t.add_row(r.context_bucket, _lab(r.series), str(r.rounds), _f(r.acceptance_length, d=2),
                  _f(r.draft_acceptance_rate), _f(r.self_lift, d=1), _f(r.sink_mass), _f(r.rms_in, d=2))
    c.print(t)
    dt = decay_table(cmp, breakeven)
    t = _table("Long-context decay: trend vs log2(context) (95% CI over groups), break-even", "series", "contexts",
               "AL /\ndoub-\nling", "self\nlift /\ndoub-\nling", "cost\nratio\nc", "break-\neven\nAL",
               "stops\npaying\nat", widths=_sw(dt["series"]))
    for _, r in dt.iterrows():
        at = r.breakeven_context
        t.add_row(_lab(r.series), f"{r.context_min}-{r.context_max}",
                  _f(r.al_per_doubling, r.al_per_doubling_lo, r.al_per_doubling_hi), _f(r.self_lift_per_doubling, d=2),
                  _f(r.cost_ratio), _f(r.breakeven_al, d=2), "-" if at is None or at != at else f"{at:,.0f}")
    c.print(t)
    c.print(_slope_note(dt), markup=False)
    for _, r in dt.iterrows():
        be = r.breakeven_al
        side = "" if be != be else f"measured AL {r.measured_al:.2f} vs break-even {be:.2f}: "
        c.print(f"  {r.series}: {side}{r.breakeven_status}; break-even from {r.breakeven_source}", markup=False)
    c.print("Break-even AL = 1 + K*c, c = drafter step cost / target verify cost (docs/acceptance.md).")


def _slope_note(dt: pd.DataFrame) -> str:
    """The groups the decay slopes' intervals rest on (resampled whole; rounds of one document are not
    independent), and which slopes have none: too few groups."""
    ns = dict(zip(dt["series"], dt["groups"].astype(int)))
    n = f"n = {next(iter(ns.values()))} groups" if len(set(ns.values())) == 1 else "n groups " + ", ".join(
        f"{s} {k}" for s, k in ns.items())
    few = [s for s, k in ns.items() if k < MIN_CLUSTERS]
    if few and len(few) == len(ns):
        return f"AL / doubling over {n}, too few for an interval (the group bootstrap needs {MIN_CLUSTERS} or more)."
    tail = f"; none for {', '.join(few)}: fewer than {MIN_CLUSTERS} groups" if few else ""
    return f"AL / doubling: 95% CI from refits on 10,000 resamples of whole groups, {n}{tail}."


def print_window(c: Console, cmp: Comparison) -> None:
    from .decay import any_beyond, window_split, windows

    if not any_beyond(cmp):
        assumed = {lab: w for lab, w in windows(cmp).items() if w["assumed"] and w["window"]}
        if assumed and len(cmp.rounds):  # "nothing beyond" against a window nobody stated is not a finding
            deepest = int(query_position(cmp.rounds["context_len"], cmp.rounds["depth"]).max())
            sizes = ", ".join(sorted({str(w["window"]) for w in assumed.values()}))
            c.print(f"Trained window: no round reached {sizes}, but that is only max_position_embeddings (the "
                    f"drafter config does not say how long it was trained); deepest position here {deepest:,}. "
                    "Give --trained-window N to split at the length it was trained at.", markup=False)
        return
    ws = window_split(cmp)
    t = _table("Trained window: rounds inside vs beyond the drafter's trained context (all metrics: --json)",
               "series", "side", "window", "drafts", "acc.\nlength", "draft\nacc.\nrate", "self\nlift\ntrend",
               "feature\ngrowth", widths=_sw(ws["series"]))
    for _, r in ws.iterrows():
        t.add_row(_lab(r.series), r.side, str(r.window), str(r.drafts), _f(r.mean_acceptance_length, d=2),
                  _f(r.draft_acceptance_rate), _f(r.self_lift_trend, d=2), _f(r.feature_growth, d=2))
    c.print(t)


def print_predictors(c: Console, cmp: Comparison, bins: int = 4) -> None:
    pr = cmp.predictors(bins)
    if not len(pr):
        return
    g = pr.groupby(["series", "metric", "depth"], sort=False).agg(rho=("spearman", "first"), n=("n", "sum"))
    rho = g["rho"].unstack("metric")
    n = g["n"].groupby(["series", "depth"]).first()
    order = _order(cmp)
    keys = sorted(rho.index, key=lambda k: (k[1], order.get(k[0], 0)))
    metrics = list(rho.columns)
    t = _table("What tracks rejection: rank correlation with acceptance (reached depths)", "depth", "series", "n",
               *metrics, widths=_sw([k[0] for k in keys]))
    last, hidden = None, False
    for label, depth in keys:
        if last is not None and depth != last:
            t.add_section()
        last = depth
        nn = int(n.loc[(label, depth)])
        few = nn < MIN_N
        hidden |= few
        t.add_row(str(depth), _lab(label), str(nn),
                  *[f"[dim]n<{MIN_N}[/dim]" if few else _f(rho.loc[(label, depth), m], d=2) for m in metrics])
    c.print(t)
    c.print("Negative correlation: higher values go with more rejections. Binned rates: compare --json."
            + (f" Depths reached by fewer than {MIN_N} chains: not shown." if hidden else ""))


def plain_summary(cmp: Comparison, s: pd.DataFrame | None = None, ad: pd.DataFrame | None = None,
                  ct: pd.DataFrame | None = None) -> list[str]:
    """The answer in words (analysis.answer): per drafter pair, does EAGLE-3 drift and does the other change it,
    each quantity against its null, with p, CIs and what the data cannot tell."""
    from .answer import answer

    return answer(cmp, s, ad, ct)


def print_comparison(c: Console, cmp: Comparison, bins: int = 4, context: bool = True,
                     breakeven: float | None = None) -> None:
    for n in cmp.notes:
        c.print(f"[bold red]{_e(n)}[/bold red]" if n.startswith("FLAGGED") else f"[yellow]note:[/yellow] {_e(n)}", emoji=False)
    s = cmp.summary()
    from .report_stats import findings, print_between, print_depth_changes, print_training, print_verdicts

    tr, ad, ct = cmp.trends(), cmp.acceptance_differences(), cmp.contrasts()
    from .answer import short

    # the answer first: counted in one table ("In short"), then in words with every CI and p ("The answer")
    for title, lines, indent in (("In short", short(cmp, s, ad, ct), ""),
                                 ("The answer", plain_summary(cmp, s, ad, ct), "  ")):
        if lines:
            c.print(f"[bold]{title}[/bold]")
            for line in lines:
                c.print(f"{indent}{line}", markup=False, emoji=False, soft_wrap=not indent)
    print_acceptance(c, s)
    print_drift(c, s)
    print_per_depth(c, cmp)
    print_training(c, cmp)
    print_depth_changes(c, cmp, tr)
    print_verdicts(c, cmp, tr)
    print_between(c, cmp, ad, cmp.trend_differences(populations=("all",)))
    if context:
        bc = cmp.by_context()
        # lifts (x uniform): a raw mass falls as the context grows only because its share of the keys does
        agg = bc.groupby(["series", "context_bucket"], observed=True).agg(
            sink_lift=("sink_lift", "mean"), self_lift=("self_lift", "mean"), recent_lift=("recent_lift", "mean"),
            rms_in=("rms_in", "mean"), acceptance_rate=("acceptance_rate", "mean")).reset_index()
        t = _table("By context length (means over depths; masses as x uniform)", "context", "series", "sink\nx unif.",
                   "self\nx unif.", "recent\nx unif.", "rms_in", "mean acc.\nrate", widths=_sw(agg["series"]))
        agg = agg.assign(_o=agg["series"].map(_order(cmp))).sort_values(["context_bucket", "_o"])
        last = None
        for _, r in agg.iterrows():
            if last is not None and r.context_bucket != last:
                t.add_section()
            last = r.context_bucket
            t.add_row(str(r.context_bucket), _lab(r.series), _f(r.sink_lift, d=2), _f(r.self_lift, d=2),
                      _f(r.recent_lift, d=2), _f(r.rms_in, d=2), _f(r.acceptance_rate))
        c.print(t)
        print_decay(c, cmp, breakeven)
    print_window(c, cmp)
    print_predictors(c, cmp, bins)
    print_where(c, cmp)
    lines = findings(cmp, tr, ad)
    if lines:
        c.print("[bold]Findings: every detected trend and difference, with its test[/bold]")
        for line in lines:
            c.print(f"  {line}", markup=False, emoji=False)


def print_where(c: Console, cmp: Comparison) -> None:
    """Where each head's largest weight sits, by depth: the drafter's own sinks, whatever they are."""
    from ..errors import DriftError
    from .where_attention import CATEGORIES, DEFINITIONS

    try:
        w = cmp.where()
    except DriftError as e:
        c.print(f"[yellow]note:[/yellow] where-attention statistics unavailable: {_e(str(e))}", emoji=False)
        return
    if w.empty:
        c.print("[yellow]note:[/yellow] where-attention statistics not recorded (trace from an older drifttool)")
        return
    order = _order(cmp)
    w = w.assign(_o=w["series"].map(order).fillna(0)).sort_values(["depth", "_o"])
    t = _table("Where heads look hardest: share of head maxima by slot kind, mean max weight", "depth", "series",
               *CATEGORIES, "max w", widths=_sw(list(w["series"])))
    last = None
    for _, r in w.iterrows():
        if last is not None and r.depth != last:
            t.add_section()
        last = r.depth
        t.add_row(str(int(r.depth)), _lab(r.series), *[_f(r[k], d=2) for k in CATEGORIES], _f(r.max_prob, d=2))
    c.print(t)
    c.print("; ".join(f"{k}: {DEFINITIONS[k]}" for k in CATEGORIES), emoji=False)
