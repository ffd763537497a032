"""`drifttool check`: a regression gate for drafters in CI.

Rules are `METRIC[@depthN[-depthM]] OP NUMBER[%]` with OP one of >=, <=, >, <, ==, e.g. `acceptance_length>=2.0`,
`self_mass@depth5<=0.4`, `draft_acceptance_rate>=40%`, `sink_mass@depth8-depth1>=-0.01`. METRIC is a column of
`compare`'s summary (one number per drafter; no @depth) or of its per-depth table (needs @depthN), or a
long-context trend; `@depthN-depthM` is a depth trend: the mean over groups of each group's change of the metric
from depth M to depth N (paired; the report adds its sign-flip p, MDE and n groups). Every rule is
checked for every drafter in the trace (or only `--drafter NAME`); a value that cannot be computed (no data)
fails. With a baseline trace, chosen metrics (default mean acceptance length) are compared per drafter name and
fail when they worsen by more than `max_drop` (relative). Exit: 0 all pass, 1 any failure, 2 user error."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..errors import DriftError
from ..trace import metric_table
from ..trace.reader import TraceData
from .compare import DEPTH_METRICS, Comparison, check_compatible, suite_name

SUMMARY_METRICS = ("mean_acceptance_length", "draft_acceptance_rate", "iid_acceptance_length", "iid_p",
                   "recency_ratio", "recency_ratio_max", "rms_growth", "self_lift", "self_lift_trend", "sink_lift_d1", "feature_growth",
                   "sink_retention", "prompts", "drafts")
# ratios to 1 (lifts, trends, retention, growth): a value within float32 noise of 1 (RATIO_NOISE: an exactly
# uniform drafter's 1.0000000105) compares as 1.0, so a gate does not fail on float noise; the value reported is
# the measured one. Only the noise: a wider snap (the words' x/÷ 1.05 flat band) silently defeated thresholds
# inside the band (recency_ratio<=1.02 passed at 1.04) and hid regressions from --baseline.
RATIO_NOISE = 1e-6
RATIOS = ("recency_ratio", "recency_ratio_max", "rms_growth", "self_lift", "self_lift_trend", "sink_lift_d1",
          "feature_growth",
          "sink_retention", *metric_table.lifts())
DECAY_METRICS = ("al_per_doubling", "self_lift_per_doubling")
# a `drifttool patch` trace: per patched series, the intervention's paired change of acceptance length against its
# clean series (patched - clean, mean over groups; its CI, sign-flip p and MDE reported), e.g. a gate that removing
# drift must not cost more than 0.02: `patch_al_change>=-0.02`
PATCH_METRICS = ("patch_al_change",)
# names a gate may hold from before the lifts: refused with what replaced them (a silent redefinition would flip a
# gate's outcome with exit 0)
RETIRED = {"drift_score": "self_lift_trend (self lift at depth K / depth 2; 1.0 = uniform) or self_lift",
           "drift": "self_lift_trend (self lift at depth K / depth 2; 1.0 = uniform) or self_lift",
           "drift_per_doubling": "self_lift_per_doubling"}
PER_DEPTH = (*DEPTH_METRICS, "acceptance_rate", "n_alpha")
ALIASES = {"acceptance_length": "mean_acceptance_length", "al": "mean_acceptance_length",
           "mean_al": "mean_acceptance_length", "iid_estimate": "iid_acceptance_length",
           "per_position_rate": "acceptance_rate", "alpha": "n_alpha"}
# Direction of "worse" for --baseline: +1 higher is better, -1 lower is better.
# The per-depth attention metrics and their lifts take theirs from the metric table (trace/metric_table.py).
DIRECTION = {"mean_acceptance_length": 1, "draft_acceptance_rate": 1, "iid_acceptance_length": 1, "iid_p": 1,
             "sink_retention": 1, "recency_ratio": -1, "recency_ratio_max": -1, "rms_growth": -1, "self_lift_trend": -1, "sink_lift_d1": 1, "feature_growth": -1,
             "acceptance_rate": 1, "n_alpha": 1, "rms_in": -1, "rms_pre": -1,
             "rms_post": -1, "al_per_doubling": 1, "self_lift_per_doubling": -1, **metric_table.better()}
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
_RULE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:@\s*depth\s*(\d+)(?:\s*-\s*depth\s*(\d+))?)?\s*(>=|<=|==|>|<)\s*"
                   r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%?)\s*$")
KNOWN = (f"summary: {', '.join(SUMMARY_METRICS + DECAY_METRICS + PATCH_METRICS)} (aliases: {', '.join(sorted(ALIASES))}); per depth "
         f"(@depthN, or a trend @depthN-depthM): {', '.join(PER_DEPTH)}")


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str  # canonical column name
    depth: int | None
    op: str
    threshold: float
    from_depth: int | None = None  # a depth trend: change from this depth to `depth`, paired over groups

    def holds(self, value: float) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return OPS[self.op](as_compared(self.metric, value), self.threshold)


def as_compared(metric: str, v: float) -> float:
    """The value a gate compares: a ratio within float32 noise of 1 (RATIO_NOISE) as 1.0, anything else as is."""
    return 1.0 if metric in RATIOS and abs(v - 1.0) <= RATIO_NOISE else v


def canonical(metric: str, where: str) -> str:
    if metric in RETIRED:
        raise DriftError(f"{where}: {metric!r} was retired (it grew with the number of visible draft slots, not with "
                         f"drift); use {RETIRED[metric]}")
    m = ALIASES.get(metric, metric)
    if m not in SUMMARY_METRICS + DECAY_METRICS + PER_DEPTH + PATCH_METRICS:
        raise DriftError(f"{where}: unknown metric {metric!r}; known metrics: {KNOWN}")
    return m


def parse_rule(text: str) -> Rule:
    where = f"--rule {text!r}"
    m = _RULE.match(text)
    if not m:
        raise DriftError(f"{where}: malformed; expected METRIC[@depthN] OP NUMBER with OP one of "
                         f"{', '.join(OPS)} (e.g. 'acceptance_length>=2.0', 'self_mass@depth5<=0.4')")
    name, depth, from_depth, op, num, pct = m.groups()
    metric = canonical(name, where)
    if metric in PER_DEPTH and depth is None:
        raise DriftError(f"{where}: {name!r} is a per-depth metric; add @depthN, e.g. '{name}@depth2{op}{num}{pct}'")
    if metric not in PER_DEPTH and depth is not None:
        raise DriftError(f"{where}: {name!r} is one number per drafter; drop '@depth{depth}'")
    for d in (depth, from_depth):
        if d is not None and int(d) < 1:
            raise DriftError(f"{where}: depth {d} is invalid; depths start at 1")
    if from_depth is not None and int(from_depth) == int(depth):
        raise DriftError(f"{where}: a trend needs two different depths (got depth{depth}-depth{from_depth})")
    if from_depth is not None and metric in ("acceptance_rate", "n_alpha"):
        raise DriftError(f"{where}: {name!r} has no per-round value to pair over groups; use it at one depth")
    return Rule(text.strip(), metric, int(depth) if depth else None, op, float(num) / (100 if pct else 1),
                int(from_depth) if from_depth else None)


def parse_drop(text: str) -> float:
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise DriftError(f"--max-drop {text!r}: expected a fraction or a percentage, e.g. 2% or 0.02") from None
    if not 0 <= v < 1:
        raise DriftError(f"--max-drop {text!r}: expected a relative drop in [0%, 100%)")
    return v


class Values:
    """Metric lookup per series of one trace (tables computed once, on demand)."""

    def __init__(self, trace: TraceData, drafter: str | None = None):
        self.cmp = Comparison.of([trace])
        self.trace = trace
        names = [s.drafter for s in self.cmp.series]
        if drafter is not None:
            if drafter not in names:
                raise DriftError(f"--drafter {drafter!r}: not in {trace.path} (drafters: {', '.join(names)})")
            self.cmp.series = [s for s in self.cmp.series if s.drafter == drafter]
        self._summary = self._depth = self._decay = None

    @property
    def drafters(self) -> list[str]:
        return [s.drafter for s in self.cmp.series]

    def _tree_depth(self, drafter: str, metric: str, depth: int, where: str) -> float:
        """A tree trace's per-depth value: the mean over every drafted node at that depth (compare's 'all nodes'
        branch); acceptance definitions of chains do not apply to trees."""
        n = self.trace.tree_nodes
        if metric not in n.columns:
            raise DriftError(f"{where}: {metric!r} is a chain statistic; a tree trace has per-node "
                             "sink/self/prompt mass, entropy and magnitudes (compare shows trees by branch)")
        if depth > int(n["depth"].max()):
            raise DriftError(f"{where}: depth {depth} is beyond the trace's tree depth {int(n['depth'].max())}")
        sub = n[(n["drafter"].astype(str) == drafter) & (n["depth"] == depth)][metric]
        return float(sub.mean()) if len(sub) else math.nan

    def trend(self, drafter: str, metric: str, depth: int, from_depth: int, where: str) -> dict[str, float]:
        """The paired change of `metric` from `from_depth` to `depth` over groups (analysis.stats.paired)."""
        from .stats import change_between

        if self.trace.is_tree:
            raise DriftError(f"{where}: depth trends are paired over a chain's depths; a tree trace has none")
        k = self.cmp.depth
        if max(depth, from_depth) > k:
            raise DriftError(f"{where}: depth {max(depth, from_depth)} is beyond the trace's speculation depth K = {k}")
        label = next(s.label for s in self.cmp.series if s.drafter == drafter)
        return change_between(self.cmp.depths[self.cmp.depths.series == label], metric, from_depth, depth)

    def get(self, drafter: str, metric: str, depth: int | None, where: str) -> float:
        label = next(s.label for s in self.cmp.series if s.drafter == drafter)
        if metric in PER_DEPTH and self.trace.is_tree:
            return self._tree_depth(drafter, metric, depth, where)
        if metric in PER_DEPTH:
            k = self.cmp.depth
            if depth > k:
                raise DriftError(f"{where}: depth {depth} is beyond the trace's speculation depth K = {k}")
            if self._depth is None:
                self._depth = self.cmp.per_depth()
            row = self._depth[(self._depth.series == label) & (self._depth.depth == depth)]
        elif metric in DECAY_METRICS:
            if self._decay is None:
                from .decay import decay_table

                self._decay = decay_table(self.cmp)
            row = self._decay[self._decay.series == label]
        else:
            if self._summary is None:
                self._summary = self.cmp.summary()
            row = self._summary[self._summary.series == label]
        if row.empty:
            return math.nan
        v = row.iloc[0][metric]
        if v is None or pd.isna(v):
            return math.nan
        return float(v)


def _baseline_metrics(baseline_metrics: list[str] | None) -> list[tuple[str, str, int | None]]:
    """(text, canonical metric, depth or None) per --baseline-metric; each must have a 'better' direction."""
    out = []
    for m in baseline_metrics or ["mean_acceptance_length"]:
        name, _, dep = m.partition("@")
        where = f"--baseline-metric {m!r}"
        metric = canonical(name.strip(), where)
        if metric not in DIRECTION:
            raise DriftError(f"{where}: no 'better' direction is defined for {name!r}; use a --rule instead")
        d = None
        if metric in PER_DEPTH:
            mm = re.fullmatch(r"depth(\d+)", dep.strip())
            if not mm or int(mm.group(1)) < 1:
                raise DriftError(f"{where}: {name!r} is a per-depth metric; write {name}@depthN")
            d = int(mm.group(1))
        elif dep:
            raise DriftError(f"{where}: {name!r} is one number per drafter; drop '@{dep}'")
        out.append((m, metric, d))
    return out


def _patch_rows(cur: Values, r: Rule) -> list[dict[str, Any]]:
    """A patch rule's rows: one per patched series of the trace (the clean series have no intervention to gate)."""
    from .patching import effects

    if r.depth is not None or r.from_depth is not None:
        raise DriftError(f"--rule {r.text!r}: {r.metric} is one number per intervention; drop '@depth'")
    if not cur.trace.manifest.get("patch"):
        raise DriftError(f"--rule {r.text!r}: {cur.trace.path} is not a `drifttool patch` trace (no interventions)")
    rows = []
    for e in effects(cur.trace):
        if e["patched"] not in cur.drafters and e["clean"] not in cur.drafters:
            continue
        a = e["acceptance_length"]
        v = float(a["difference"]) if a.get("difference") is not None else math.nan
        rows.append({"rule": r.text, "drafter": e["patched"], "metric": r.metric, "depth": None, "op": r.op,
                     "threshold": r.threshold, "value": v if math.isfinite(v) else None, "passed": r.holds(v),
                     "p": a.get("p"), "mde": a.get("mde"), "n_groups": a.get("n_groups"),
                     "ci": [a.get("difference_lo"), a.get("difference_hi")]})
    return rows


def _rule_rows(cur: Values, parsed: list[Rule]) -> list[dict[str, Any]]:
    """One row per rule and drafter: the value (or a depth trend's paired statistics) and whether the rule holds."""
    rows = []
    for r in parsed:
        if r.metric in PATCH_METRICS:
            rows += _patch_rows(cur, r)
            continue
        for dname in cur.drafters:
            extra: dict[str, Any] = {}
            if r.from_depth is not None:
                st = cur.trend(dname, r.metric, r.depth, r.from_depth, f"--rule {r.text!r}")
                v = st["mean"]
                extra = {"from_depth": r.from_depth, "p": st["p"], "mde": st["mde"], "n_groups": st["n"],
                         "ci": [st["lo"], st["hi"]]}
            else:
                v = cur.get(dname, r.metric, r.depth, f"--rule {r.text!r}")
            rows.append({"rule": r.text, "drafter": dname, "metric": r.metric, "depth": r.depth, "op": r.op,
                         "threshold": r.threshold, "value": v if math.isfinite(v) else None,
                         "passed": r.holds(v), **extra})
    return rows


def _common_drafters(trace: TraceData, baseline: TraceData, cur: Values, base: Values) -> list[str]:
    """The drafters both traces hold, after checking the baseline was captured on the same probe suite."""
    bs, ts = (str((t.manifest["capture"].get("probes") or {}).get("sha256")) for t in (baseline, trace))
    if bs != ts:
        raise DriftError(f"--baseline {baseline.path}: captured on probe suite {suite_name(baseline)!r} "
                         f"(sha256 {bs}), {trace.path} on {suite_name(trace)!r} (sha256 {ts}); a baseline "
                         "must be captured on the same probe suite")
    common = [d for d in cur.drafters if d in base.drafters]
    if not common:
        raise DriftError(f"--baseline {baseline.path}: no drafter in common with {trace.path} "
                         f"(baseline: {', '.join(base.drafters)}; trace: {', '.join(cur.drafters)})")
    return common


def _baseline_row(text: str, metric: str, dname: str, b: float, v: float, drop: float) -> dict[str, Any]:
    """How much worse than the baseline (in the metric's 'better' direction), relative, against the allowed drop."""
    b_, v_ = (as_compared(metric, x) if math.isfinite(x) else x for x in (b, v))
    worse = DIRECTION[metric] * (b_ - v_)
    change = (worse / abs(b_)) if b_ else (0.0 if worse <= 0 else math.inf)
    ok = math.isfinite(b) and math.isfinite(v) and change <= drop
    return {"metric": text, "drafter": dname, "baseline": b if math.isfinite(b) else None,
            "value": v if math.isfinite(v) else None,
            "relative_drop": change if math.isfinite(change) else None, "max_drop": drop, "passed": bool(ok)}


def _baseline_rows(trace: TraceData, baseline: TraceData, cur: Values, bms, drop: float
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """The --baseline comparison's rows and its notes (incompatibilities that are not failures, drafters missing)."""
    notes = [n for n in check_compatible([baseline, trace])
             if not n.startswith("FLAGGED") and "partial trace" not in n]  # those fail as integrity rows
    base = Values(baseline)
    common = _common_drafters(trace, baseline, cur, base)
    notes += [f"drafter {d!r} not in the baseline; not compared" for d in cur.drafters if d not in common]
    rows = [_baseline_row(text, metric, dname, base.get(dname, metric, d, f"--baseline-metric {text!r}"),
                          cur.get(dname, metric, d, f"--baseline-metric {text!r}"), drop)
            for text, metric, d in bms for dname in common]
    return rows, notes


def run_check(trace: TraceData, rules: list[str], baseline: TraceData | None = None, max_drop: str | float = "2%",
              baseline_metrics: list[str] | None = None, drafter: str | None = None) -> dict[str, Any]:
    """Evaluate every rule (and the baseline comparison); returns the JSON-able report."""
    parsed = [parse_rule(r) for r in rules]
    if not parsed and baseline is None:
        raise DriftError("check: nothing to check; give at least one --rule or a --baseline trace")
    drop = parse_drop(max_drop) if isinstance(max_drop, str) else float(max_drop)
    bms = _baseline_metrics(baseline_metrics)
    cur = Values(trace, drafter)
    results = _rule_rows(cur, parsed)
    notes = [n for n in cur.cmp.notes if "no drafted rounds" in n or "non-finite" in n]
    integrity = integrity_rows(trace, baseline)
    base_rows: list[dict[str, Any]] = []
    if baseline is not None:
        base_rows, more = _baseline_rows(trace, baseline, cur, bms, drop)
        notes += more
    n_fail = sum(not r["passed"] for r in (*results, *base_rows, *integrity))
    return {"trace": str(trace.path), "baseline_trace": str(baseline.path) if baseline else None,
            "passed": n_fail == 0, "failed": n_fail, "checks": len(results) + len(base_rows) + len(integrity),
            "rules": results, "baseline": base_rows, "integrity": integrity, "notes": notes}


def integrity_rows(trace: TraceData, baseline: TraceData | None) -> list[dict[str, Any]]:
    """Failing checks for traces whose numbers a gate cannot stand on: a flagged prompt (a failed faithfulness
    check: the recorded drafts are not what the engine ran) or a partial capture (fewer prompts than the suite)."""
    rows = []
    for role, t in (("trace", trace), ("baseline", baseline)):
        if t is None:
            continue
        for f in t.manifest.get("flags", []):
            rows.append({"trace": str(t.path), "role": role, "check": "faithfulness", "passed": False,
                         "detail": f"FLAGGED {f.get('key')}: {f.get('message')}"})
        if t.manifest.get("status") != "complete":
            rows.append({"trace": str(t.path), "role": role, "check": "complete", "passed": False,
                         "detail": f"partial trace: {len(t.manifest.get('shards', []))} prompts captured "
                                   f"(status {t.manifest.get('status')!r})"})
    return rows


def print_check(c, rep: dict[str, Any]) -> None:
    from rich.markup import escape as e  # rules, names, paths and notes are data, not rich markup
    from rich.table import Table

    def f(v) -> str:
        return "-" if v is None else f"{v:.4g}"

    res = lambda ok: "[green]PASS[/green]" if ok else "[bold red]FAIL[/bold red]"  # noqa: E731
    if rep["rules"]:
        t = Table(title=f"drifttool check {e(rep['trace'])}")
        for col in ("rule", "drafter", "value", "result"):  # a rule and a name whole, the value wraps
            t.add_column(col, no_wrap=col != "value", overflow="fold")
        for r in rep["rules"]:
            val = f(r["value"]) if r["value"] is not None else "no data"
            if "n_groups" in r:  # a depth trend: its test and power beside the value
                mde = "inf" if r["mde"] == math.inf else f(r["mde"])
                val += f" (p {f(r['p'])}, MDE {mde}, {r['n_groups']} groups)"
            t.add_row(e(r["rule"]), e(r["drafter"]), val, res(r["passed"]))
        c.print(t)
    if rep["baseline"]:
        t = Table(title=f"against baseline {e(rep['baseline_trace'])}")
        for col in ("metric", "drafter", "baseline", "value", "worse by", "allowed", "result"):
            t.add_column(col, overflow="fold")  # wrap, never cut a rule or a name
        for r in rep["baseline"]:
            d = r["relative_drop"]
            t.add_row(e(r["metric"]), e(r["drafter"]), f(r["baseline"]), f(r["value"]),
                      "-" if d is None else f"{100 * d:+.2f}%", f"{100 * r['max_drop']:.2f}%", res(r["passed"]))
        c.print(t)
    if rep.get("integrity"):
        t = Table(title="trace integrity (a gate cannot pass on these)")
        for col in ("trace", "check", "detail", "result"):
            t.add_column(col, overflow="fold")  # wrap, never cut a rule or a name
        for r in rep["integrity"]:
            t.add_row(e(f"{r['role']}: {r['trace']}"), r["check"], e(r["detail"]), res(r["passed"]))
        c.print(t)
    for n in rep["notes"]:
        c.print(f"[yellow]note:[/yellow] {e(n)}")
    if rep["passed"]:
        c.print(f"[green]all {rep['checks']} checks passed[/green]")
    else:
        c.print(f"[bold red]{rep['failed']} of {rep['checks']} checks failed[/bold red]")
