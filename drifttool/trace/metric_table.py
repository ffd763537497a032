"""The per-head / per-depth metrics, one declaration each: what a metric measures, when the capture computes it,
its valid range, label and unit, which way is better for a gate, and the key set whose uniform share it is read
against (its lift). The capture (run/attention_stats, run/hooks, run/tree_capture), the records, the schema,
validation, the head summary, the views, check, the plots and the live monitor all read `METRICS`; adding a
context-slot mass is one `Metric` with a `keys` rule, adding a drafted-slot mass one with a `slots` rule
(tests/package/test_one_declaration.py adds one of each at run time).

Kinds: `context` = attention mass on a set of context slots (`keys` names them; computed every round from the
kernel's log-sum-exp, and from the full row on full rounds); `tail` = mass on this chain's (or tree path's) own drafted
slots, by a `slots` rule over each query row's ancestor and own-slot masks (draft: the earlier steps, own: the
query's own input slot); `matched` = the depth-1 query's mass on its k-1 most recent keys (sinks skipped),
stored at depth k (the recency-matched control of the k-1 own slots at depth k: the same distances, prompt tokens
instead of drafts; NaN at depth 1, beyond the context, and on draft trees); `window` = the R most recent keys whatever
they are (own drafted slots and context, chains; NaN on trees); `row` = needs the full attention row (full
rounds only, NaN elsewhere: --full-every); `derived` = a sum of other masses, computed on read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Metric:
    """One per-head metric (head-mean per depth in the depths table).

    kind: context | tail | row | derived (module docstring). keys: a context mass's slots (int64 positions < n,
    ascending; sinks excluded unless it is the sink mass itself). slots: a tail mass's weights over the round's
    drafted slots from each query row's ancestor / own masks (trace/key_sets.TailSlots: chains and trees alike). count: its key-count column (the uniform share is
    count / n_keys; the lift `<stem>_lift` = mass / share). parts: a derived mass's terms (`1 -` them when
    `complement`). lo / hi: the valid range. better: +1 higher is better, -1 lower is better, 0 neither (check
    --baseline needs one). added: written after schema 3's first traces: older traces read it as NaN. live: its
    series on the monitor's /metrics (monitor/metrics.py reads it). show: where the per-depth tables and the Depth
    page's curves show it by default (a new row is shown everywhere unless it says otherwise). null: the metric
    that is its null, summed over the same rows wherever the two are compared (the monitor's paired sums)."""

    name: str
    label: str
    unit: str
    what: str
    kind: str
    keys: str | Callable | None = None  # a rule trace/key_sets.py resolves ("sink", "recent", "template") or a callable
    slots: str | Callable | None = None  # a tail mass's drafted slots: "ancestors", "own" or a callable (key_sets)
    count: str | None = None
    parts: tuple[str, ...] = ()
    complement: bool = False
    lo: float | None = 0.0
    hi: float | None = 1.0
    better: int = 0
    added: bool = False
    base_depth: int = 1  # the first depth with a value to trend from (a chain's own slots start at depth 2)
    live: tuple[str, ...] = ()  # what the live monitor exports: "lift" (a histogram of the lift per depth), "sum"
    #                             (a counter of the summed mass per depth and context bucket), "value" (a histogram of
    #                             the value itself, over `buckets`, named attention_<name>)
    show: tuple[str, ...] = ("mass", "lift")  # what the per-depth tables (terminal compare, the HTML report) and the
    #                                           Depth page's default curves show: "mass" the value, "lift" its lift
    null: str | None = None  # the metric read as its null (the recency-matched control): summed over the same rows
    buckets: tuple[float, ...] = ()  # a "value" live histogram's upper bounds

    @property
    def computed(self) -> str:
        return {"context": "every round (kernel log-sum-exp)", "tail": "every round (kernel log-sum-exp)",
                "matched": "every round, chains (kernel log-sum-exp)",
                "window": "every round, chains (kernel log-sum-exp)",
                "row": "full rounds only (--full-every)", "derived": "on read"}[self.kind]

    @property
    def lift(self) -> str | None:
        return f"{self.name.removesuffix('_mass')}_lift" if self.count else None


MASS = "share of attention"
METRICS: tuple[Metric, ...] = (
    Metric("sink_mass", "sink mass", MASS, "attention on the sink positions (--sink)", "context",
           keys="sink", count="n_sink", better=1, live=("lift", "sum")),
    Metric("draft_mass", "draft mass", MASS, "attention on this chain's earlier draft slots", "tail",
           slots="ancestors", better=-1, base_depth=2, show=()),
    Metric("own_mass", "own-slot mass", MASS, "attention on the query's own input slot", "tail", slots="own",
           better=-1, show=()),
    Metric("recent_mass", "recent mass (last R slots)", MASS, "attention on the last R context slots (--recent; "
           "sinks excluded)", "context", keys="recent", count="n_recent",
           added=True, live=("lift",), show=("lift",)),
    Metric("template_mass", "template mass (chat delimiters)", MASS, "attention on the chat template's special "
           "tokens in the context (sinks excluded)", "context",
           keys="template", count="n_template", added=True,
           live=("lift",), show=("lift",)),
    Metric("matched_mass", "recency-matched control mass", MASS, "at depth k: the depth-1 query's attention on its "
           "k-1 most recent keys (sinks skipped), prompt tokens at the distances the k-1 own slots have at depth k "
           "(the null of the self mass: a drafter whose attention depends on distance alone puts as much on its own "
           "slots)",
           "matched", added=True, base_depth=2, live=("sum",), show=()),
    Metric("recent_all_mass", "recent mass incl. drafts (last R keys)", MASS, "attention on the R most recent keys "
           "whatever they are (--recent): the query's own drafted slots plus the newest context slots (sinks "
           "excluded), R in all; the paper's 'recent' (Table 2 form); at depth 1 it equals recent_mass", "window",
           added=True, show=()),
    Metric("entropy", "entropy (nats)", "nats", "entropy of the head's attention row", "row", hi=None,
           live=("value",), show=(), buckets=(0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)),
    Metric("self_mass", "self mass (draft + own)", MASS, "attention on the chain's own slots (draft + own)",
           "derived", parts=("draft_mass", "own_mass"), count="n_self", better=-1, base_depth=2,
           live=("lift", "sum"), null="matched_mass"),
    Metric("prompt_mass", "prompt mass", MASS, "attention on the context outside the sinks", "derived",
           parts=("sink_mass", "draft_mass", "own_mass"), complement=True, show=("mass",)),
)
# the self mass's key set is the tail's: counted by the capture (n_self), not by a context rule
ROW_EXTRAS = ("max_prob", "top_pos")  # full-row fields kept per head (heads table), not head metrics


def by_name() -> dict[str, Metric]:
    return {m.name: m for m in METRICS}


def of_kind(*kinds: str) -> tuple[Metric, ...]:
    return tuple(m for m in METRICS if m.kind in kinds)


def context_masses() -> tuple[str, ...]:
    return tuple(m.name for m in of_kind("context"))


def measured_masses() -> tuple[str, ...]:
    """The masses the capture stores every round (context, tail, matched), in table order."""
    return tuple(m.name for m in of_kind("context", "tail", "matched", "window"))


def head_fields() -> tuple[str, ...]:
    """The capture's per-head field order: the first context mass (sink), the tail masses, the row metrics,
    max_prob, top_pos, then the other context masses and the matched masses (appended in table order, so positions
    0..5 stay what they were before the recent and template masses)."""
    ctx = context_masses()
    return (*ctx[:1], *(m.name for m in of_kind("tail")), *(m.name for m in of_kind("row")), *ROW_EXTRAS, *ctx[1:],
            *(m.name for m in of_kind("matched", "window")))


def key_counts() -> tuple[str, ...]:
    """The depths table's key-count columns: keys seen, the sink's, the self slots', then the other context masses'
    sets in table order (appended, as in head_fields)."""
    ctx = [m.count for m in of_kind("context") if m.count]
    return ("n_keys", *ctx[:1], *(m.count for m in of_kind("tail", "row", "derived") if m.count), *ctx[1:])


def shown(what: str) -> tuple[str, ...]:
    """The columns the per-depth tables and the Depth page's default curves show: what="mass" the metrics marked
    "mass", "lift" the lifts of those marked "lift"; the gated ones (a `better` direction: the story's sink and
    self) first, then table order."""
    if what not in ("mass", "lift"):
        raise ValueError(f"shown({what!r}): expected 'mass' or 'lift'")
    rows = sorted((m for m in METRICS if what in m.show and (what == "mass" or m.lift)), key=lambda m: not m.better)
    return tuple(m.lift if what == "lift" else m.name for m in rows)


def paired() -> dict[str, str]:
    """metric -> its null (`null`), for the sums that must run over the same rows."""
    return {m.name: m.null for m in METRICS if m.null}


def short(name: str) -> str:
    """A column's short header: the metric's stem ("sink" for sink_mass and sink_lift)."""
    return name.removesuffix("_mass").removesuffix("_lift")


def derived() -> dict[str, tuple[str, ...]]:
    """derived mass -> its terms (its value is their sum, or 1 - their sum when `complement`)."""
    return {m.name: m.parts for m in of_kind("derived")}


def added() -> tuple[str, ...]:
    """Metrics written after schema 3's first traces (read as NaN from a trace without them)."""
    return tuple(m.name for m in METRICS if m.added)


def base_depth() -> dict[str, int]:
    """Metrics (and lifts) whose depth trends start after depth 1."""
    out = {m.name: m.base_depth for m in METRICS if m.base_depth != 1}
    out.update({m.lift: m.base_depth for m in METRICS if m.lift and m.base_depth != 1})
    return out


def lifts() -> dict[str, tuple[str, str]]:
    """lift column -> (mass, count) for every metric with a uniform share."""
    return {m.lift: (m.name, m.count) for m in METRICS if m.lift}


def labels() -> dict[str, str]:
    out = {m.name: m.label for m in METRICS}
    out.update({m.lift: f"{m.label.split(' (')[0].removesuffix(' mass')} lift (x uniform)" for m in METRICS if m.lift})
    return out


def better() -> dict[str, int]:
    """Gate directions of the per-depth metrics (their lifts go the mass's way)."""
    out = {m.name: m.better for m in METRICS if m.better}
    out.update({m.lift: m.better for m in METRICS if m.lift and m.better})
    return out


def describe() -> list[dict[str, Any]]:
    """The table as rows (docs/metrics.md is generated from it)."""
    return [{"name": m.name, "label": m.label, "unit": m.unit, "what": m.what, "computed": m.computed,
             "range": f"[{m.lo if m.lo is not None else '-inf'}, {m.hi if m.hi is not None else 'inf'}]",
             "uniform share": f"{m.count} / n_keys" if m.count else "-", "lift": m.lift or "-",
             "better": {1: "higher", -1: "lower", 0: "-"}[m.better]} for m in METRICS]


def acceptance_length(accepted, rounds):
    """The one definition of mean acceptance length: 1 + accepted drafts per drafted round (the bonus token
    included). NaN with no drafted round (1.0 would read as every draft rejected). Scalars, numpy arrays and pandas
    Series alike (element-wise)."""
    acc, n = np.asarray(accepted, dtype=np.float64), np.asarray(rounds, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(n > 0, 1.0 + acc / np.where(n > 0, n, 1.0), np.nan)
    if hasattr(accepted, "index"):  # a pandas Series in, a Series out (same index)
        import pandas as pd

        return pd.Series(out, index=accepted.index)
    return float(out) if out.ndim == 0 else out
