"""Rich terminal rendering of a Comparison (what `drifttool compare` and `drifttool demo` print)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape as _e  # names, paths and notes are data, not rich markup
from rich.table import Table

from .compare import Comparison


def _f(v, lo=None, hi=None, d=3) -> str:
    if v is None or v != v:
        return "-"
    s = f"{v:.{d}f}"
    if lo is not None and hi is not None and lo == lo and hi == hi:
        s += f" [{lo:.{d}f}, {hi:.{d}f}]"
    return s


def _list(v, d=2) -> str:
    if v is None or isinstance(v, float):
        return "-"
    return " ".join(_f(x, d=d) for x in v)


def print_acceptance(c: Console, s) -> None:
    """Every acceptance definition by name (docs/acceptance.md), measured beside the i.i.d. estimate."""
    from .metrics import ACCEPTANCE_DEFINITIONS as D

    t = Table(title="Acceptance, every definition (docs/acceptance.md)")
    t.add_column("definition")
    for label in s.series:
        t.add_column(_e(label))
    rows = [
        (D["mean_acceptance_length"]["name"], lambda r: _f(r.mean_acceptance_length, r.al_lo, r.al_hi, 2)),
        (D["iid_acceptance_length"]["name"] + " (p)",
         lambda r: f"{_f(r.iid_acceptance_length, d=2)} (p={_f(r.iid_p, d=2)})"),
        ("measured - i.i.d.", lambda r: _f(r.mean_acceptance_length - r.iid_acceptance_length, d=2)),
        (D["draft_acceptance_rate"]["name"], lambda r: _f(r.draft_acceptance_rate)),
        (D["per_position_rate"]["name"] + ", depth 1..K", lambda r: _list(r.per_position_rate)),
        (D["n_alpha"]["name"] + ", depth 1..K", lambda r: _list(r.n_alpha)),
    ]
    for name, fn in rows:
        t.add_row(name, *[fn(r) for _, r in s.iterrows()])
    c.print(t)


def print_decay(c: Console, cmp: Comparison, breakeven: float | None = None) -> None:
    from .decay import context_curve, decay_table

    cc = context_curve(cmp)
    t = Table(title="Long-context decay: by context length (power-of-two buckets)")
    for col in ("series", "context", "rounds", "acc. length", "draft acc. rate", "drift score", "sink", "rms_in"):
        t.add_column(col)
    for _, r in cc.iterrows():
        t.add_row(_e(r.series), r.context_bucket, str(r.rounds), _f(r.acceptance_length, d=2),
                  _f(r.draft_acceptance_rate), _f(r.drift_score), _f(r.sink_mass), _f(r.rms_in, d=2))
    c.print(t)
    dt = decay_table(cmp, breakeven)
    t = Table(title="Long-context decay: trend vs log2(context), break-even")
    for col in ("series", "contexts", "AL / doubling", "drift / doubling", "cost ratio c", "break-even AL",
                "stops paying at"):
        t.add_column(col)
    for _, r in dt.iterrows():
        se = f" ± {r.al_per_doubling_se:.3f}" if r.al_per_doubling_se == r.al_per_doubling_se else ""
        at = r.breakeven_context
        t.add_row(_e(r.series), f"{r.context_min}-{r.context_max}", _f(r.al_per_doubling) + se, _f(r.drift_per_doubling),
                  _f(r.cost_ratio), _f(r.breakeven_al, d=2), "-" if at is None or at != at else f"{at:,.0f}")
    c.print(t)
    for _, r in dt.iterrows():
        c.print(f"  {_e(r.series)}: {r.breakeven_status}; break-even from {r.breakeven_source}")
    c.print("Break-even AL = 1 + K*c, c = drafter step cost / target verify cost (docs/acceptance.md).")


def print_window(c: Console, cmp: Comparison) -> None:
    from .decay import any_beyond, window_split

    if not any_beyond(cmp):
        return
    ws = window_split(cmp)
    t = Table(title="Trained window: rounds inside vs beyond the drafter's trained context (all metrics: --json)")
    for col in ("series", "side", "window", "drafts", "acc. length", "draft acc. rate", "drift score",
                "feature growth"):
        t.add_column(col)
    for _, r in ws.iterrows():
        t.add_row(_e(r.series), r.side, str(r.window), str(r.drafts), _f(r.mean_acceptance_length, d=2),
                  _f(r.draft_acceptance_rate), _f(r.drift_score), _f(r.feature_growth, d=2))
    c.print(t)


def print_comparison(c: Console, cmp: Comparison, bins: int = 4, context: bool = True,
                     breakeven: float | None = None) -> None:
    for n in cmp.notes:
        c.print(f"[bold red]{_e(n)}[/bold red]" if n.startswith("FLAGGED") else f"[yellow]note:[/yellow] {_e(n)}", emoji=False)
    s = cmp.summary()
    t = Table(title="Summary (95% CI over prompts)")
    for col in ("series", "prompts", "drafts", "mean acceptance length (vLLM)", "i.i.d. estimate", "draft acc. rate",
                "drift score", "feature growth", "sink retention"):
        t.add_column(col)
    for _, r in s.iterrows():
        t.add_row(_e(r.series), str(r.prompts), str(r.drafts), _f(r.mean_acceptance_length, r.al_lo, r.al_hi, 2),
                  _f(r.iid_acceptance_length, d=2), _f(r.draft_acceptance_rate), _f(r.drift_score, r.drift_lo, r.drift_hi),
                  _f(r.feature_growth, d=2), _f(r.sink_retention, d=2))
    c.print(t)
    print_acceptance(c, s)
    pd_ = cmp.per_depth()
    t = Table(title="Per depth: attention mass, layer-input RMS, acceptance (95% CI over prompts)")
    for col in ("series", "depth", "sink", "self", "prompt", "rms_in", "per-position rate (vLLM)", "n-alpha (EAGLE)"):
        t.add_column(col)
    for _, r in pd_.iterrows():
        t.add_row(_e(r.series), str(int(r.depth)), _f(r.sink_mass, r.sink_mass_lo, r.sink_mass_hi),
                  _f(r.self_mass, r.self_mass_lo, r.self_mass_hi), _f(r.prompt_mass), _f(r.rms_in, d=2),
                  _f(r.acceptance_rate, r.acceptance_rate_lo, r.acceptance_rate_hi), _f(r.n_alpha))
    c.print(t)
    if context:
        bc = cmp.by_context()
        agg = bc.groupby(["series", "context_bucket"], observed=True).agg(
            self_mass=("self_mass", "mean"), sink_mass=("sink_mass", "mean"), rms_in=("rms_in", "mean"),
            acceptance_rate=("acceptance_rate", "mean")).reset_index()
        t = Table(title="By context length (means over depths)")
        for col in ("series", "context", "sink", "self", "rms_in", "mean acc. rate"):
            t.add_column(col)
        for _, r in agg.iterrows():
            t.add_row(_e(r.series), str(r.context_bucket), _f(r.sink_mass), _f(r.self_mass), _f(r.rms_in, d=2),
                      _f(r.acceptance_rate))
        c.print(t)
        print_decay(c, cmp, breakeven)
    print_window(c, cmp)
    pr = cmp.predictors(bins)
    if len(pr):
        rho = pr.groupby(["series", "metric", "depth"]).spearman.first().unstack("metric")
        t = Table(title="What tracks rejection: rank correlation of each metric with acceptance (reached depths)")
        t.add_column("series")
        t.add_column("depth")
        for m in rho.columns:
            t.add_column(m)
        for (label, depth), r in rho.iterrows():
            t.add_row(_e(label), str(depth), *[_f(r[m], d=2) for m in rho.columns])
        c.print(t)
        c.print("Negative correlation: higher values go with more rejections. Binned rates: compare --json.")
    print_where(c, cmp)


def print_where(c: Console, cmp: Comparison) -> None:
    """Where each head's largest weight sits, by depth: the drafter's own sinks, whatever they are."""
    from .errors import DriftError
    from .where_attention import CATEGORIES, DEFINITIONS

    try:
        w = cmp.where()
    except DriftError as e:
        c.print(f"[yellow]note:[/yellow] where-attention statistics unavailable: {_e(str(e))}", emoji=False)
        return
    if w.empty:
        c.print("[yellow]note:[/yellow] where-attention statistics not recorded (trace from an older drifttool)")
        return
    t = Table(title="Where heads look hardest: share of head maxima by slot kind, mean max weight")
    for col in ("series", "depth", *CATEGORIES, "max w", "n"):
        t.add_column(col)
    for _, r in w.iterrows():
        t.add_row(_e(r.series), str(int(r.depth)), *[_f(r[k], d=2) for k in CATEGORIES], _f(r.max_prob, d=2),
                  str(int(r.n)))
    c.print(t)
    c.print("; ".join(f"{k}: {DEFINITIONS[k]}" for k in CATEGORIES), emoji=False)
