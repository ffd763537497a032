"""Rich terminal rendering of a Comparison (what `drifttool compare` and `drifttool demo` print)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .compare import Comparison


def _f(v, lo=None, hi=None, d=3) -> str:
    if v is None or v != v:
        return "-"
    s = f"{v:.{d}f}"
    if lo is not None and hi is not None and lo == lo and hi == hi:
        s += f" [{lo:.{d}f}, {hi:.{d}f}]"
    return s


def print_comparison(c: Console, cmp: Comparison, bins: int = 4, context: bool = True) -> None:
    for n in cmp.notes:
        c.print(f"[yellow]note:[/yellow] {n}")
    s = cmp.summary()
    t = Table(title="Summary (95% CI over prompts)")
    for col in ("series", "prompts", "drafts", "mean acc. length", "i.i.d. estimate", "draft acc. rate",
                "drift score", "feature growth", "sink retention"):
        t.add_column(col)
    for _, r in s.iterrows():
        t.add_row(r.series, str(r.prompts), str(r.drafts), _f(r.mean_acceptance_length, r.al_lo, r.al_hi, 2),
                  _f(r.iid_acceptance_length, d=2), _f(r.draft_acceptance_rate), _f(r.drift_score, r.drift_lo, r.drift_hi),
                  _f(r.feature_growth, d=2), _f(r.sink_retention, d=2))
    c.print(t)
    pd_ = cmp.per_depth()
    t = Table(title="Per depth: attention mass, layer-input RMS, acceptance (95% CI over prompts)")
    for col in ("series", "depth", "sink", "self", "prompt", "rms_in", "acc. rate", "n-alpha"):
        t.add_column(col)
    for _, r in pd_.iterrows():
        t.add_row(r.series, str(int(r.depth)), _f(r.sink_mass, r.sink_mass_lo, r.sink_mass_hi),
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
            t.add_row(r.series, str(r.context_bucket), _f(r.sink_mass), _f(r.self_mass), _f(r.rms_in, d=2),
                      _f(r.acceptance_rate))
        c.print(t)
    pr = cmp.predictors(bins)
    if len(pr):
        rho = pr.groupby(["series", "metric", "depth"]).spearman.first().unstack("metric")
        t = Table(title="What tracks rejection: rank correlation of each metric with acceptance (reached depths)")
        t.add_column("series")
        t.add_column("depth")
        for m in rho.columns:
            t.add_column(m)
        for (label, depth), r in rho.iterrows():
            t.add_row(label, str(depth), *[_f(r[m], d=2) for m in rho.columns])
        c.print(t)
        c.print("Negative correlation: higher values go with more rejections. Binned rates: compare --json.")
