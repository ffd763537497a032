"""Terminal tables and sentences for the paired statistics (analysis.stats): per-depth changes with their MDE,
verdicts at the deepest depth for both populations, differences between drafters, and the plain-language
findings that `compare`'s "In short" ends with. A verdict never outruns its evidence: every "no change"
carries its MDE and reads *underpowered* when the MDE exceeds the quantity itself."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from rich.console import Console

from ..trace.metric_table import acceptance_length
from .compare import Comparison
from .fmt import fmt_mde, fmt_p
from .report_table import label as _lab
from .report_table import order as _order
from .report_table import series_width as _sw
from .report_table import table as _table
from .stats import ALPHA, POPULATION_TEXT, POWER, min_p

NAMES = {"sink_mass": "sink mass", "self_mass": "self mass", "prompt_mass": "prompt mass", "rms_in": "layer-input RMS",
         "acceptance_length": "acceptance length", "sink_lift": "sink lift (x uniform)", "self_lift": "self lift (x uniform)"}


def _g(v: float, d: int = 3) -> str:
    if v is None or not isinstance(v, (int, float, np.floating, np.integer)) or v != v:
        return "-"
    if math.isinf(v):
        return "inf"
    return f"{v:+.{d}f}" if d else f"{v:.0f}"


def _dig(metric: str) -> int:
    return 2 if metric in ("rms_in", "acceptance_length") else 3


def print_depth_changes(c: Console, cmp: Comparison, tr: pd.DataFrame) -> None:
    """Per depth: sink and self mass change from their first depth, paired over groups, with MDE and the
    prefix-correct n (rounds whose chain was still right up to the depth)."""

    if tr.empty:
        return
    a = tr[tr.population == "all"]
    pc = tr[tr.population == "prefix_correct"].set_index(["series", "metric", "depth"])["n_rounds"]
    order = _order(cmp)
    keys = sorted({(int(r.depth), r.series) for r in a.itertuples()}, key=lambda k: (k[0], order.get(k[1], 0)))
    t = _table("Per depth: change from the first depth, paired over groups (all rounds; MDE at 80% power)",
               "depth", "series", "Δ sink\nvs d1", "MDE", "Δ self\nvs d2", "MDE ", "groups", "prefix-\ncorrect n",
               widths=_sw([k[1] for k in keys]))
    idx = a.set_index(["series", "metric", "depth"])
    last = None
    for depth, label in keys:
        if last is not None and depth != last:
            t.add_section()
        last = depth
        cells = []
        for m in ("sink_mass", "self_mass"):
            if (label, m, depth) in idx.index:
                r = idx.loc[(label, m, depth)]
                cells += [f"{_g(r.change)}\n(p {fmt_p(r.p, 'terminal')})", fmt_mde(r.mde, style="terminal")]
            else:
                cells += ["-", "-"]
        ng = int(idx.loc[(label, "sink_mass", depth)].n_groups) if (label, "sink_mass", depth) in idx.index else 0
        npc = pc.get((label, "sink_mass", depth), np.nan)
        t.add_row(str(depth), _lab(label), *cells, str(ng), "-" if npc != npc else str(int(npc)))
    c.print(t)
    if cmp.mode == "teacher-forced":
        c.print("Teacher-forced: every depth is drafted on the true prefix, so all rounds are prefix-correct.",
                markup=False)
    else:
        c.print("Generate mode: a depth's draft is conditioned on the chain's earlier drafts; rounds whose chain had "
                "already failed measure drafts on wrong tokens. prefix-correct n = rounds whose earlier drafts were "
                "all accepted (the population of the verdicts' second rows); teacher-forced captures measure every "
                "depth on the true prefix.", markup=False)


SHORT = {"sink_mass": "sink", "self_mass": "self", "prompt_mass": "prompt", "rms_in": "rms_in"}
PRINTED = ("sink_mass", "self_mass", "rms_in")  # prompt mass = 1 - sink - self: in --json only


def _pm(mean: float, lo: float, hi: float, d: int) -> str:
    """'+0.025' and '±0.257' (the t-interval's half width) on the next line."""
    if mean != mean:
        return "-"
    half = (hi - lo) / 2 if lo == lo and hi == hi else float("nan")
    return f"{mean:+.{d}f}" + ("" if half != half else f"\n±{half:.{d}f}")


def print_verdicts(c: Console, cmp: Comparison, tr: pd.DataFrame) -> None:
    """At the deepest depth: each metric's change per series and population, with its verdict."""

    if tr.empty:
        return
    k = int(tr["depth"].max())
    sub = tr[(tr.depth == k) & tr.metric.isin(PRINTED)]
    if cmp.mode == "teacher-forced":
        sub = sub[sub.population == "all"]  # prefix-correct = all rounds there
    order = _order(cmp)
    sub = sub.assign(_o=sub["series"].map(order), _m=sub["metric"].map(PRINTED.index))
    sub = sub.sort_values(["_m", "_o", "population"])
    t = _table(f"Depth trends to depth {k}, paired over groups (sign-flip p; ± 95% t-interval)", "metric", "rounds",
               "series", "from", "change", "p", "MDE", "verdict", widths=_sw(sub["series"]))
    last = None
    for r in sub.itertuples():
        if last is not None and r.metric != last:
            t.add_section()
        last = r.metric
        d = _dig(r.metric)
        pop = "all" if r.population == "all" else "p.c."
        t.add_row(SHORT.get(r.metric, r.metric), f"{pop} {r.n_rounds}", _lab(r.series),
                  "-" if r.base_value != r.base_value else f"{r.base_value:.{d}f}\n@d{r.from_depth}",
                  _pm(r.change, r.change_lo, r.change_hi, d), fmt_p(r.p, "terminal"),
                  fmt_mde(r.mde, d, style="terminal"), r.verdict)
    c.print(t)
    ng = int(sub["n_groups"].max()) if len(sub) else 0
    c.print(f"{cmp.groups_note()} MDE: smallest change detectable at {POWER:.0%} power, alpha {ALPHA}; "
            "'underpowered' when it exceeds the metric's value at its first depth. The sign-flip test's smallest "
            f"p over n groups is 2/2^n ({min_p(ng):.3g} for {ng}): below 6 groups nothing is detectable. "
            f"rounds: all, or p.c. = prefix-correct: {POPULATION_TEXT['prefix_correct']}.", markup=False)


def print_between(c: Console, cmp: Comparison, ad: pd.DataFrame, td: pd.DataFrame) -> None:
    """Each drafter against the baseline: acceptance length, and the difference of depth changes at depth K."""

    if ad.empty and td.empty:
        return
    k = int(td["depth"].max()) if not td.empty else cmp.depth
    rows = []
    for r in ad.itertuples():
        rows.append(("acc. length", r.series, r.difference, r.difference_lo, r.difference_hi, r.p, r.mde,
                     r.n_groups, r.verdict, 2))
    if not td.empty:
        for r in td[(td.depth == k) & (td.population == "all")].itertuples():
            if r.metric not in PRINTED:
                continue
            rows.append((f"Δ {SHORT.get(r.metric, r.metric)} d{r.from_depth}→{k}", r.series, r.difference,
                         r.difference_lo, r.difference_hi, r.p, r.mde, r.n_groups, r.verdict, _dig(r.metric)))
    order = _order(cmp)
    t = _table(f"Against {cmp.baseline}, paired over groups (all rounds)", "metric", "series", "difference", "p",
               "MDE", "groups", "verdict", widths=_sw([r[1] for r in rows]))
    rows.sort(key=lambda r: order.get(r[1], 0))
    for m, s, dv, lo, hi, p, md, n, v, d in rows:
        t.add_row(m, _lab(s), _pm(dv, lo, hi, d), fmt_p(p, "terminal"), fmt_mde(md, d, style="terminal"), str(n),
                  v.replace("rise", "higher").replace("fall", "lower"))
    c.print(t)


# "In short" states trends of the quantities a slot count cannot move (lifts) and the fed-back RMS; the raw-mass
# trends stay in the depth tables, where their dilution by added slots sits beside the lifts
IN_SHORT = ("sink_lift", "self_lift", "rms_in")


def _no_sink(cmp: Comparison) -> dict[str, str]:
    """Per series whose depth-1 sink lift's 95% CI reaches no higher than uniform (1.0): that statement."""
    s = cmp.summary()
    out = {}
    for r in s.itertuples():
        hi = getattr(r, "sink_lift_d1_hi", np.nan)
        if hi == hi and hi <= 1.0:
            out[r.series] = f"depth-1 sink lift {r.sink_lift_d1:.2f} [{r.sink_lift_d1_lo:.2f}, {hi:.2f}]"
    return out


def findings(cmp: Comparison, tr: pd.DataFrame | None = None, ad: pd.DataFrame | None = None) -> list[str]:
    """Sentences for "In short": acceptance between drafters with power, the detected depth trends (all rounds
    and prefix-correct), and what was too underpowered to tell."""
    tr = cmp.trends() if tr is None else tr
    ad = cmp.acceptance_differences() if ad is None else ad
    # pooled AL = 1 + accepted / rounds per series: the summary table's, from the rounds alone (the dashboard's
    # first page calls this without the per-depth tables)
    g = cmp.rounds.groupby("series", observed=True)["accepted"]
    pooled = acceptance_length(g.sum(), g.count()) if len(ad) else None
    out = [_acceptance_sentence(r, pooled) for r in ad.itertuples()]
    if tr.empty:
        return out
    k = int(tr["depth"].max())
    sub = tr[(tr.depth == k) & tr.metric.isin(IN_SHORT)]
    no_sink = _no_sink(cmp)
    for pop in ("all", "prefix_correct"):
        if pop == "prefix_correct" and cmp.mode == "teacher-forced":
            continue  # the same rows as all rounds
        out += _trend_sentences(sub[sub.population == pop], pop, k, no_sink)
    return out


def _acceptance_sentence(r, pooled: pd.Series) -> str:
    """One drafter against its baseline: pooled and per-group acceptance length, the paired test and its power."""
    # the pooled AL is the summary table's (tokens / rounds); the test is over groups, each group's own AL
    # weighted equally, so its means are named as such (they differ when groups have unequal rounds)
    d = (f"acceptance length {pooled[r.series]:.2f} vs {pooled[r.baseline]:.2f} (pooled over rounds); "
         f"per group {r.base_value + r.difference:.2f} vs {r.base_value:.2f} on average, paired difference "
         f"{r.difference:+.2f} [{r.difference_lo:+.2f}, {r.difference_hi:+.2f}] (p {fmt_p(r.p, 'terminal')}, "
         f"{r.n_groups} groups)") if r.n_groups > 1 else f"acceptance length: {r.n_groups} common group(s)"
    if r.verdict in ("rise", "fall"):
        v = f"{'higher' if r.difference > 0 else 'lower'}, detected"
    elif r.verdict == "underpowered" and not np.isfinite(r.mde):
        v = (f"underpowered: with {r.n_groups} groups no difference can reach p < 0.05 (the sign-flip test's "
             f"smallest p is 2/2^{r.n_groups} = {2 / 2 ** r.n_groups:.3g}; 6 groups or more)")
    elif r.verdict == "underpowered":
        v = (f"underpowered: MDE {fmt_mde(r.mde, 2, style='terminal')} tokens/round exceeds the "
             f"{r.base_value - 1:.2f} accepted drafts per round")
    else:
        v = f"no difference detected (MDE {fmt_mde(r.mde, 2, style='terminal')} tokens/round, {r.mde_rel:.0%} of it)"
    return f"{r.series} vs {r.baseline}: {d}: {v}."


def _trend_sentences(s: pd.DataFrame, pop: str, k: int, no_sink: dict[str, str]) -> list[str]:
    """The detected depth trends of one population, and one line for what was underpowered."""
    where = "all rounds" if pop == "all" else "prefix-correct rounds"
    out = []
    for r in s[s.verdict.isin(["rise", "fall"])].itertuples():
        # "no sink to leave": the depth-1 sink lift's CI does not exceed uniform (never a fixed floor)
        ns = no_sink.get(r.series) if r.metric.startswith("sink") else None
        d = _dig(r.metric)
        out.append(f"{r.series}: {NAMES.get(r.metric, r.metric)} {'rises' if r.change > 0 else 'falls'} "
                   f"from depth {r.from_depth} to {k} by {r.change:+.{d}f} [{r.change_lo:+.{d}f}, "
                   f"{r.change_hi:+.{d}f}] (from {r.base_value:.{d}f}; p {fmt_p(r.p, 'terminal')}, "
                   f"{r.n_groups} groups, "
                   f"{where})" + (f"; {ns}: no sink to leave" if ns else "") + ".")
    under = s[s.verdict == "underpowered"]
    if len(under):
        names = sorted({f"{NAMES.get(m, m)}" for m in under.metric})
        out.append(f"Underpowered at depth {k} ({where}): {', '.join(names)} for "
                   f"{', '.join(sorted(set(under.series)))} — the MDE exceeds the quantity itself, so "
                   "'no change' would not be a finding.")
    return out


def print_training(c: Console, cmp: Comparison) -> None:
    """A checkpoint-series trace: acceptance, sink and self mass and fed-back RMS per variant against the step."""
    from .training import training_table

    curves = cmp.training()
    if curves.empty:
        return
    k = cmp.depth
    t = _table(f"Across training checkpoints (all rounds; self mass and layer-input RMS at depth {k})", "variant",
               "step", "acc.\nlength", "acc.\nrate d1", "sink d1", f"self d{k}", f"rms_in\nd{k}", "groups")
    last = None
    for r in training_table(curves, k).itertuples(index=False):
        if last is not None and r.variant != last:
            t.add_section()
        last = r.variant
        t.add_row(r.variant, str(r.step), f"{r.mean_acceptance_length:.2f}", f"{r.acceptance_d1:.3f}",
                  f"{r.sink_d1:.3f}", f"{getattr(r, f'self_d{k}'):.3f}", f"{getattr(r, f'rms_in_d{k}'):.2f}",
                  str(r.groups))
    c.print(t)
