"""Side-by-side statistics of traces: per-depth table with CIs, one-number summaries, context buckets, and
which measured quantity tracks rejections.

Every (trace, drafter) pair is one *series*, labelled by the drafter name (prefixed by the trace name when
names collide). Attention is read against uniform attention (trace/schema.py LIFTS): `self_lift` is the mean self
lift (attention on the chain's own drafted slots / their uniform share) over depths 2..K, and **`self_lift_trend`**
the self lift at depth K / at depth 2 over the same rounds: 1.0 = attention per own slot does not change with depth,
> 1 = it concentrates on its own drafts as the chain deepens (drift), < 1 = it spreads. A slot count cannot move
either (the old drift score, the mean raw self mass, grew with depth because one more own slot becomes visible per
depth, and was retired for it). `sink_lift_d1` is the depth-1 sink lift (1.0 = no more than uniform: no sink to
lose); `feature_growth` is RMS(layer input at depth K) / RMS(at depth 1)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DriftError
from ..trace.metric_table import paired, shown
from ..trace.reader import TraceData, group_of_id
from ..trace.schema import HEAD_METRICS, KEY_COUNTS, LIFTS
from .metrics import acceptance, cluster_mean, context_bucket, spearman
from .nonsink import NS_COLUMNS

# the per-depth statistics, in the order tables show them: the three regions first, then every other head metric
# (trace/schema.HEAD_METRICS), then the fed-back magnitudes
_FIRST = (*shown("lift"), *(k for k in LIFTS if k not in shown("lift")), *shown("mass"))
DEPTH_METRICS = (*_FIRST, *(m for m in HEAD_METRICS if m not in _FIRST), "entropy_norm", "rms_in", "rms_pre",
                 "rms_post")
PREDICTORS = ("sink_mass", "self_mass", "rms_in")
# the depths columns Comparison.summary reads (a view of a large trace reads only these for its first page)
SUMMARY_DEPTHS = ["prompt_id", "round", "depth", "rms_in", *dict.fromkeys((*(m for m, _ in LIFTS.values()),
                                                                             *paired().values())), *KEY_COUNTS, *LIFTS]


# Per-depth statistics over fewer rounds (chains reaching the depth) than this are greyed in charts and starred
# in the terminal report; rank correlations over fewer are not shown.
MIN_N = 20
NEAR_ZERO = 1e-3  # a sink mass below this is "no sink": ratios of two such numbers are noise, not a result


def lift_trend(d: pd.DataFrame, metric: str, d_from: int, d_to: int) -> tuple[float, float, float]:
    """Mean `metric` at depth d_to / at depth d_from over the rounds that have both (each round paired with itself),
    with a 95% CI over groups (group bootstrap of the ratio of sums); NaN when d_to <= d_from."""
    from .metrics import bootstrap_ratio

    if d_to <= d_from or d.empty:
        return (np.nan, np.nan, np.nan)
    key = ["prompt_id", "round"] if "round" in d.columns else ["prompt_id"]
    a = d[d.depth == d_from].set_index(key)[[metric, "group"]]
    b = d[d.depth == d_to].set_index(key)[metric]
    both = a.join(b.rename("to"), how="inner").dropna(subset=[metric, "to"])
    if both.empty:
        return (np.nan, np.nan, np.nan)
    g = both.groupby("group", observed=True)[["to", metric]].sum()
    return bootstrap_ratio(g["to"].to_numpy(), g[metric].to_numpy())


def no_sink(d: pd.DataFrame) -> bool:
    """One series' depths rows hold no depth-1 sink mass to keep (mean below NEAR_ZERO): its sink retention is noise."""
    return not (d.loc[d.depth == 1, "sink_mass"].astype(np.float64).mean() >= NEAR_ZERO)


def ratio(num: float, den: float, floor: float = NEAR_ZERO) -> float:
    """num / den, or NaN when den (or both) is below `floor` (sink retention of two ~0 sink masses is not 1254)."""
    if not (np.isfinite(num) and np.isfinite(den)) or abs(den) < floor:
        return float("nan")
    return float(num / den)


@dataclass
class Series:
    label: str
    trace: TraceData
    drafter: str


def check_distinct(traces: list[TraceData]) -> list[str]:
    """One folder given twice would count its data twice: refused. An unchanged copy (same trace id and shards)
    is a note: it is another series, under its own label."""
    seen: dict = {}
    notes = []
    for t in traces:
        where = t.path.resolve()
        if where in seen:
            raise DriftError(f"{t.path}: the same trace as {seen[where].path} (given twice); give each trace once")
        seen[where] = t
        copy = ("copy", t.manifest.get("trace_id"), json.dumps(t.manifest["shards"], sort_keys=True))
        if copy[1] is not None and copy in seen:
            notes.append(f"{t.path}: an unchanged copy of {seen[copy].path} (same trace id and shards)")
        seen.setdefault(copy, t)
    return notes


def trace_labels(traces: list[TraceData]) -> list[str]:
    """Folder names, extended by parent folders until unique (a/x.drift and b/x.drift: 'a/x', 'b/x')."""
    parts = [t.path.resolve().with_name(t.name).parts for t in traces]
    for n in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-n:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(t.path) for t in traces]


def series_of(traces: list[TraceData]) -> list[Series]:
    """One series per (trace, drafter), each with its own label: a drafter name shared by several traces is
    prefixed by the trace's label, so no two series pool their data under one label."""
    check_distinct(traces)
    out: list[Series] = []
    names = [d["name"] for t in traces for d in t.manifest["drafters"]]
    for t, tl in zip(traces, trace_labels(traces)):
        for d in t.manifest["drafters"]:
            label = d["name"] if names.count(d["name"]) == 1 else f"{tl}:{d['name']}"
            out.append(Series(label, t, d["name"]))
    return out


def check_compatible(traces: list[TraceData]) -> list[str]:
    """Raise on settings that make traces incomparable; return notes on softer differences."""
    notes = []
    for t in traces:  # a readable trace may still lack what the statistics need (e.g. a hand-written manifest)
        if not t.manifest["drafters"]:
            raise DriftError(f"{t.path / 'manifest.json'}: field 'drafters' is empty; nothing to compare")
        if t.manifest["capture"].get("depth") is None:
            raise DriftError(f"{t.path / 'manifest.json'}: field 'capture.depth' missing (expected the speculation depth)")
    base = traces[0].manifest["capture"]
    for t in traces[1:]:
        c = t.manifest["capture"]
        for key in ("depth", "mode", "sink"):
            if c.get(key) != base.get(key):
                raise DriftError(
                    f"{t.path}: capture {key} {c.get(key)!r} differs from {traces[0].path}'s {base.get(key)!r}; "
                    "traces must share depth, mode and sink definition to be compared"
                )
    notes += target_notes(traces)
    notes += suite_notes(traces)
    for t in traces:
        if t.manifest["status"] != "complete":
            notes.append(f"{t.path.name}: partial trace ({len(t.manifest['shards'])} prompts)")
        notes += flag_notes(t.manifest, t.path.name)
        notes += selection_notes(t)
    return notes


def selection_notes(t: TraceData) -> list[str]:
    """A live monitor's segment whose requests were partly selected (its `every` / `long` policies: tags
    sample:cadence, sample:long) rather than drawn uniformly: said, so its pooled statistics are not read as the
    traffic's own."""
    if not (t.manifest.get("capture") or {}).get("monitor"):
        return []
    try:
        tags = t.table("prompts")["tags"].astype(str)
    except (DriftError, KeyError):
        return []
    picked = tags.str.contains("sample:cadence|sample:long", regex=True)
    if not picked.any():
        return []
    return [f"{t.path.name}: {int(picked.sum())} of {len(tags)} requests were selected by the monitor's policy "
            "(sample:cadence / sample:long), not drawn uniformly: its statistics pool a selected and a uniform "
            "sample and describe neither the traffic nor the selection alone"]


def target_notes(traces: list[TraceData]) -> list[str]:
    """Raise when traces come from different targets or verification rules (their acceptance is not a drafter's
    property then, and paired tests would pair unlike things); note softer differences (dtype, device)."""
    first, base_t, base_c = traces[0].path, traces[0].manifest.get("target") or {}, traces[0].manifest["capture"]
    notes = []
    for t in traces[1:]:
        tt, c = t.manifest.get("target") or {}, t.manifest["capture"]
        for key in ("config_hash", "weights"):
            if base_t.get(key) and tt.get(key) and base_t[key] != tt[key]:
                raise DriftError(f"{t.path / 'manifest.json'}: target.{key} {tt[key]!r} differs from {first}'s "
                                 f"{base_t[key]!r}; traces must come from the same target to be compared")
            if bool(base_t.get(key)) != bool(tt.get(key)):  # one trace cannot say which target it measured
                lacks, has = (t.path, first) if not tt.get(key) else (first, t.path)
                notes.append(f"{lacks.name}: no target.{key} in its manifest (an older or hand-edited trace), so "
                             f"whether it measured the same target as {has.name} cannot be checked; compared as if so")
        for key, what in (("draft_sampling", "draft sampling"), ("recent", "recent-mass window R"),
                          ("rejection", "rejection method")):
            a, b = c.get(key), base_c.get(key)
            if a is not None and b is not None and a != b:
                raise DriftError(f"{t.path / 'manifest.json'}: capture.{key} {a!r} differs from {first}'s {b!r}; "
                                 f"acceptance (or the recent mass) under another {what} cannot be paired")
        if c.get("temperature") != base_c.get("temperature"):
            raise DriftError(f"{t.path / 'manifest.json'}: capture.temperature {c.get('temperature')!r} differs from "
                             f"{first}'s {base_c.get('temperature')!r}; acceptance under different sampling rules "
                             "cannot be compared")
        for key in ("dtype", "device"):
            if c.get(key) != base_c.get(key):
                notes.append(f"{t.path.name}: capture {key} {c.get(key)!r}, {first.name}: {base_c.get(key)!r} "
                             "(numbers may differ by numerics as well as by drafter)")
    return notes


def suite_name(t: TraceData) -> str:
    """The probe suite a trace was captured on: its file name without .jsonl (else its hash)."""
    pr = t.manifest["capture"].get("probes", {}) or {}
    path = str(pr.get("path") or "")
    return path.rsplit("/", 1)[-1].removesuffix(".jsonl") if path else str(pr.get("sha256") or "?")


def suite_notes(traces: list[TraceData]) -> list[str]:
    """One note when the traces were captured on more than one probe suite (none otherwise)."""
    by: dict[str, list[str]] = {}
    for t in traces:
        key = str((t.manifest["capture"].get("probes", {}) or {}).get("sha256"))
        by.setdefault(key, []).append(t)
    if len(by) < 2:
        return []
    suites = ", ".join(f"{suite_name(ts[0])} ({len(ts)} trace{'s' * (len(ts) > 1)})" for ts in by.values())
    return [f"mixed probe suites: these {len(traces)} traces cover {len(by)} suites ({suites}). Numbers of "
            "different suites differ by prompt content and length as well as by drafter; compare drafters within "
            "a suite."]


def flag_notes(manifest: dict, name: str) -> list[str]:
    """One line per flagged prompt (a failed faithfulness check), starting FLAGGED so readers can shout it."""
    return [f"FLAGGED {name}: {f['key']}: {f['message']}" for f in manifest.get("flags", [])]


def series_table(series: list[Series], table: str, columns: list[str] | None = None) -> pd.DataFrame:
    """One table of every series, with a `series` column and, where it has prompt ids, each prompt's `group`
    (its source document: the unit every bootstrap and test resamples) (`columns`: only those, plus the keys)."""
    parts = []
    for s in series:
        df = s.trace.table(table) if columns is None else s.trace.table(table, ["drafter", *columns])
        df = df[df["drafter"] == s.drafter].copy()
        df["series"] = s.label
        if "prompt_id" in df.columns and (table != "prompts" or "group" not in df.columns):
            ids = df["prompt_id"].astype(str)
            got = ids.map(s.trace.groups)
            df["group"] = got.where(got.notna(), group_of_id(ids)).astype(str)
        parts.append(df)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def nonsink_columns(series: list[Series], depths: pd.DataFrame) -> pd.DataFrame:
    """The depths of every series with self_ns / matched_ns (analysis/nonsink.py) from each trace's per-head table,
    read once per trace; the rows keep their order."""
    from .nonsink import read_heads, with_nonsink

    heads: dict[int, pd.DataFrame] = {}
    parts = []
    for s in series:
        h = heads.setdefault(id(s.trace), read_heads(s.trace))
        sub = depths[depths["series"] == s.label]
        parts.append(with_nonsink(sub, h[h["drafter"] == s.drafter] if len(h) else h))
    return pd.concat(parts).loc[depths.index] if parts else depths


@dataclass
class Comparison:
    series: list[Series]
    depths: pd.DataFrame
    rounds: pd.DataFrame
    notes: list[str]
    trained_window: int | None = None  # the user's --trained-window: wins over what the traces recorded

    @classmethod
    def of(cls, traces: list[TraceData], trained_window: int | None = None,
           depth_columns: list[str] | None = None) -> Comparison:
        """`depth_columns`: read only these of the depths table (the dashboard's first page: SUMMARY_DEPTHS)."""
        notes = check_compatible(traces)
        ser = series_of(traces)
        notes += check_distinct(traces)
        rounds = series_table(ser, "rounds")
        notes += [f"{s.label}: no drafted rounds in {s.trace.path.name} (empty trace, or every prompt ended before "
                  "a round, e.g. max_new_tokens 1); its tables are empty" for s in ser
                  if not (rounds["series"] == s.label).any()]
        depths = series_table(ser, "depths", depth_columns)
        if "matched_mass" in depths.columns:
            depths = nonsink_columns(ser, depths)
        notes += [n for t in traces for n in t.notes]  # NaN/inf counts met while reading: one note per trace
        return cls(ser, depths, rounds, notes, trained_window)

    @property
    def depth(self) -> int:
        return int(self.series[0].trace.manifest["capture"]["depth"])

    @property
    def mode(self) -> str:
        """generate | teacher-forced (check_compatible made every trace share it)."""
        return str(self.series[0].trace.manifest["capture"].get("mode", "generate"))

    @property
    def baseline(self) -> str | None:
        """The series others are compared against: the first EAGLE-3 one, else the first."""
        from ..styles import drafter_kind

        labels = [s.label for s in self.series]
        return next((x for x in labels if drafter_kind(x) == "eagle3"), labels[0] if labels else None)

    def groups_note(self) -> str:
        """How many groups and prompts the statistics rest on, and where the groups came from."""
        n_g = self.rounds["group"].nunique() if len(self.rounds) else 0
        n_p = self.rounds["prompt_id"].nunique() if len(self.rounds) else 0
        src = ("recorded per prompt" if all(s.trace.groups_recorded for s in self.series)
               else "from prompt ids (cuts of one probe line share a group; the trace records no groups)")
        return (f"{n_g} groups (source documents), {n_p} prompts; groups {src}. CIs and tests resample and pair "
                "groups, not prompts or rounds.")

    def population(self, population: str = "all", df: pd.DataFrame | None = None) -> pd.DataFrame:
        """The depths rows of a population: 'all' rounds or 'prefix_correct' (chain still right up to the depth;
        every teacher-forced round)."""
        from .stats import population_mask

        df = self.depths if df is None else df
        return df[population_mask(df, population, self.mode).to_numpy()]

    def trends(self, populations=None) -> pd.DataFrame:
        """Paired per-group depth trends of every trend metric (analysis.stats.depth_trends)."""
        from .stats import POPULATIONS, depth_trends

        return depth_trends(self.depths, self.mode, populations=populations or POPULATIONS)

    def paired_with_baseline(self) -> list[str]:
        """Series that can be paired with the baseline group by group: captured on the same probe suite (the same
        group id in another suite is another document)."""
        if self.baseline is None:
            return []
        suite = {s.label: (s.trace.manifest["capture"].get("probes") or {}).get("sha256") for s in self.series}
        return [x for x in suite if suite[x] == suite[self.baseline]]

    def trend_differences(self, populations=None) -> pd.DataFrame:
        from .stats import POPULATIONS, trend_differences

        keep = self.paired_with_baseline()
        if len(keep) < 2:
            return pd.DataFrame()
        d = self.depths[self.depths["series"].isin(keep)]
        return trend_differences(d, self.mode, self.baseline, populations=populations or POPULATIONS)

    def acceptance_differences(self) -> pd.DataFrame:
        from .stats import acceptance_differences

        keep = self.paired_with_baseline()
        if len(keep) < 2:
            return pd.DataFrame()
        return acceptance_differences(self.rounds[self.rounds["series"].isin(keep)], self.baseline)

    def per_depth(self, df: pd.DataFrame | None = None, by: tuple[str, ...] = (),
                  population: str = "all") -> pd.DataFrame:
        """Per series x depth: metric means with group-bootstrap CIs, and vLLM's per-position acceptance, over a
        population of rounds ('all', or 'prefix_correct': chains still right up to the depth), with n for each
        (n_rounds, n_prefix_correct = n_reached, n_prompts, n_groups)."""
        df = self.depths if df is None else df
        if population != "all":
            df = self.population(population, df)
        keys = ["series", *by, "depth"]
        # the verdict's non-sink shares too, where the trace has its per-head table
        parts = [cluster_mean(df, m, keys) for m in (*DEPTH_METRICS, *(c for c in NS_COLUMNS if c in df))]
        d = df.assign(acc=df["accepted"].astype(float))
        parts.append(cluster_mean(d, "acc", keys).rename(columns=lambda c: c.replace("acc", "acceptance_rate")))
        # accepted, not match: under sampled verification a draft != the target's argmax can be accepted
        dr = d[d["reached"].astype(bool)].assign(cond=lambda x: x["accepted"].astype(float))
        parts.append(cluster_mean(dr, "cond", keys).rename(columns=lambda c: c.replace("cond", "n_alpha")))
        out = parts[0]
        for p in parts[1:]:
            out = out.merge(p, on=keys, how="outer")
        # sample sizes: rounds drafting this depth, chains that reached it (n-alpha's n), prompts
        if len(d):
            n = d.assign(reached_=d["reached"].astype(int)).groupby(keys, observed=True).agg(
                n_rounds=("depth", "size"), n_reached=("reached_", "sum"), n_prompts=("prompt_id", "nunique"),
                n_groups=("group", "nunique"), n_entropy=("entropy", "count"))  # count: the finite entropies
            out = out.merge(n.reset_index(), on=keys, how="left")
            # entropy rests on the full rounds only (--full-every): its own prompts and groups
            fe = d[d["entropy"].notna()].groupby(keys, observed=True).agg(
                n_entropy_prompts=("prompt_id", "nunique"), n_entropy_groups=("group", "nunique")).reset_index()
            out = out.merge(fe, on=keys, how="left")
            out[["n_entropy_prompts", "n_entropy_groups"]] = out[["n_entropy_prompts", "n_entropy_groups"]].fillna(0) \
                .astype("int64")
        else:
            out = out.assign(n_rounds=pd.Series(dtype="int64"), n_reached=pd.Series(dtype="int64"),
                             n_prompts=pd.Series(dtype="int64"), n_groups=pd.Series(dtype="int64"),
                             n_entropy=pd.Series(dtype="int64"), n_entropy_prompts=pd.Series(dtype="int64"),
                             n_entropy_groups=pd.Series(dtype="int64"))
        return out.sort_values(keys).reset_index(drop=True)

    def summary(self) -> pd.DataFrame:
        """One row per series: acceptance under every definition, self lift and its trend, depth-1 sink lift,
        feature growth (with CIs over groups)."""
        rows = []
        k = self.depth
        for s in self.series:
            r = self.rounds[self.rounds.series == s.label]
            d = self.depths[self.depths.series == s.label]
            acc = acceptance(r["accepted"].to_numpy(), k)
            g = r.groupby("group", observed=True)["accepted"].agg(["sum", "count"])
            from .metrics import bootstrap_ratio

            al, al_lo, al_hi = bootstrap_ratio(g["sum"].to_numpy(), g["count"].to_numpy())
            deep = d[d.depth >= 2]
            gd = deep.groupby("group", observed=True)["self_lift"].agg(["sum", "count"])
            lift, llo, lhi = bootstrap_ratio(gd["sum"].to_numpy(), gd["count"].to_numpy())
            trend, tlo, thi = lift_trend(d, "self_lift", 2, k)
            g1 = d[d.depth == 1].groupby("group", observed=True)["sink_lift"].agg(["sum", "count"])
            s1, s1lo, s1hi = bootstrap_ratio(g1["sum"].to_numpy(), g1["count"].to_numpy())
            d1 = d[d.depth == 1]
            where = {f"{m}_d1": float(d1[m].mean()) if m in d1 and d1[m].notna().any() else np.nan
                     for m in ("recent_lift", "template_lift")}  # where depth-1 attention goes instead
            by_depth = d.groupby("depth")[["rms_in", "sink_mass"]].mean()
            rows.append({
                "series": s.label, "prompts": r["prompt_id"].nunique(), "groups": r["group"].nunique(),
                "drafts": acc.get("drafts", 0),
                "mean_acceptance_length": 1 + al, "al_lo": 1 + al_lo, "al_hi": 1 + al_hi,
                "draft_acceptance_rate": acc.get("draft_acceptance_rate", np.nan),  # nan: no drafted rounds
                "iid_acceptance_length": acc.get("iid_acceptance_length", np.nan), "iid_p": acc.get("iid_p", np.nan),
                "self_lift": lift, "self_lift_lo": llo, "self_lift_hi": lhi,
                "self_lift_trend": trend, "self_lift_trend_lo": tlo, "self_lift_trend_hi": thi,
                "sink_lift_d1": s1, "sink_lift_d1_lo": s1lo, "sink_lift_d1_hi": s1hi, **where,
                "feature_growth": float(by_depth["rms_in"].iloc[-1] / by_depth["rms_in"].iloc[0]) if len(by_depth) else np.nan,
                "per_position_rate": acc.get("per_position_rate"), "n_alpha": acc.get("n_alpha"),
                **self._verdict(s, d, k),
            })
        return pd.DataFrame(rows)

    @staticmethod
    def _verdict(s: Series, d: pd.DataFrame, k: int) -> dict:
        """The drift verdict's columns (analysis/verdict.py): recency-matched ratio, sink retention, fed-back RMS
        growth (each with CI, p), drift_verdict and its reason."""
        from .verdict import summary_columns

        recorded = "matched_mass" in d and bool(d.loc[d.depth >= 2, "matched_mass"].notna().any())
        out = summary_columns(d, k, recorded)
        if no_sink(d):  # noise / noise
            out.update({c: np.nan for c in out if c.startswith("sink_retention") and not c.endswith("_n")})
        if not recorded and out["drift_verdict"] == "not established" and k >= 2 and len(d):
            v = s.trace.manifest.get("drifttool_version", "an earlier version")
            out["drift_why"] = (f"recency-matched ratio not recorded in this trace (captured by drifttool {v}); "
                                "recapture")
        return out

    def recency_curve(self) -> pd.DataFrame:
        """Per series: RM(k), k = 2..K, with CIs and p (analysis/verdict.py)."""
        from .verdict import recency_curve

        parts = [recency_curve(self.depths[self.depths.series == s.label], self.depth).assign(series=s.label)
                 for s in self.series]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def contrasts(self) -> pd.DataFrame:
        """Per series other than the baseline (same suite): the paired per-group contrast of RM(K), sink retention
        and fed-back RMS growth against the baseline (analysis/verdict.py)."""
        from .verdict import contrast

        keep = self.paired_with_baseline()
        b = self.depths[self.depths.series == self.baseline]
        rows = []
        for x in keep:
            if x == self.baseline:
                continue
            d = self.depths[self.depths.series == x]
            for r in contrast(d, b, self.depth):
                if r["quantity"] == "sink_retention" and (no_sink(d) or no_sink(b)):
                    r.update(factor=np.nan, factor_lo=np.nan, factor_hi=np.nan, p=np.nan)
                rows.append(dict(r, series=x, baseline=self.baseline))
        return pd.DataFrame(rows)

    def by_context(self) -> pd.DataFrame:
        d = self.depths.assign(context_bucket=context_bucket(self.depths["context_len"]))
        return self.per_depth(d, by=("context_bucket",))

    def predictors(self, bins: int = 4) -> pd.DataFrame:
        """Per series x depth x metric: acceptance (given the chain reached that depth) by quantile bin of
        the metric, and the metric's rank correlation with acceptance."""
        rows = []
        d = self.depths[self.depths["reached"].astype(bool)]
        for (label, depth), sub in d.groupby(["series", "depth"], observed=True):
            y = sub["accepted"].astype(float).to_numpy()  # == match when greedy; sampled accepts non-argmax
            for m in PREDICTORS:
                x = sub[m].to_numpy(np.float64)
                rho = spearman(x, y)
                try:  # quantile edges, right-closed bins: pd.qcut (pandas 2) put a value equal to an edge 1 ulp up
                    edges_q = np.unique(np.nanquantile(x, np.linspace(0, 1, bins + 1)))
                    if len(edges_q) < 2:  # a constant metric: one bin
                        raise ValueError
                    q = pd.cut(x, edges_q, include_lowest=True, labels=False)
                except ValueError:
                    q = np.zeros(len(x), dtype=int)
                rates = pd.Series(y).groupby(q).mean()
                edges = pd.Series(x).groupby(q).agg(["min", "max"])
                for b in rates.index:
                    rows.append({"series": label, "depth": depth, "metric": m, "bin": int(b),
                                 "lo": float(edges.loc[b, "min"]), "hi": float(edges.loc[b, "max"]),
                                 "acceptance": float(rates.loc[b]), "n": int((q == b).sum()), "spearman": rho})
        return pd.DataFrame(rows)

    def heads(self) -> pd.DataFrame:
        """The per-head table of every series (read on demand: it is the largest table)."""
        return series_table(self.series, "heads")

    def where(self) -> pd.DataFrame:
        """Per series x depth: where heads look hardest (see where_attention) and how concentrated they are."""
        from .where_attention import attention_targets

        return attention_targets(self.heads(), self.rounds)

    def top_positions(self, depth: int, k: int = 5) -> pd.DataFrame:
        from .where_attention import top_positions

        return top_positions(self.heads(), self.rounds, depth, k)

    def training(self) -> pd.DataFrame:
        """Per variant x checkpoint step x depth, for a checkpoint-series trace (analysis.training); else empty."""
        from .training import training_curves

        return training_curves(self)
