"""Filtered, aggregated views of traces: the tables behind every dashboard page (and the notebook).

`load_trace` checks a trace once (the first page's tables and columns read and validated, every other listed
file opened) and reads the rest page by page, column set by column set; head pages use the per-prompt head
summary, never the per-round heads table. `build_view` applies the shared filters (probes, tags, depth range;
heads: to the per-head tables, head_means and where) and runs the `Comparison` statistics once per filter
setting; the summary (first page) reads only the depth columns it needs, the per-depth pages the whole depths
table. Everything returned is plain pandas."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..trace import metric_table
from ..trace.describe import flags_on_text, overrides_text, pairs_text
from ..trace.footers import check_files, read_tokens
from ..trace.reader import TraceData, member
from ..trace.schema import HEAD_METRICS, LIFTS, MEASURED_MASSES
from ..trace.summary import CATEGORIES
from .compare import SUMMARY_DEPTHS, Comparison, nonsink_columns, series_table
from .metrics import context_bucket

# read and validated at load: what the first page (overview) needs (None: every column); the rest is read by
# the page that shows it
FIRST_PAGE = {"prompts": None, "rounds": None, "depths": ["drafter", *SUMMARY_DEPTHS]}


class LoadedTrace(TraceData):
    """A trace for the dashboard: each table read once per column set, on first use (thread-safe: Streamlit
    shares it across sessions); heads only as per (drafter, prompt, depth, head) sums (`head_sums`)."""

    def __init__(self, path):
        super().__init__(path)
        self._tables: dict[str, pd.DataFrame] = {}
        self._whole: set[str] = set()  # tables held with every column
        self._lock = threading.Lock()
        for n, cols in FIRST_PAGE.items():
            self.table(n, cols)
        check_files(self.path, self.manifest)  # the others: present, inside the folder, readable, with columns

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        """The table held (it may have more columns than asked for); read again, with the columns held so far
        plus the new ones (or all), only when it lacks some."""
        with self._lock:
            held = self._tables.get(name)
            if held is not None and (name in self._whole or columns is not None and set(columns) <= set(held)):
                return held
            want = None if columns is None else list(dict.fromkeys([*(held.columns if held is not None else ()),
                                                                    *columns]))
            self._tables[name] = super().table(name, want)
            if want is None:
                self._whole.add(name)
            return self._tables[name]

    @cached_property
    def head_sums(self) -> pd.DataFrame:
        """Per (drafter, prompt, depth, head): sums of every head metric, n (rounds) and entropy_n (finite
        entropies), from the head summary table."""
        h = self.table("head_summary")
        out = h[["drafter", "prompt_id", "depth", "head"]].copy()
        for c in (*MEASURED_MASSES, "entropy"):
            out[c] = h[f"{c}_sum"] if f"{c}_sum" in h else np.nan  # a mass newer than the summary: NaN
        for m in metric_table.of_kind("derived"):  # sums of sums: the derived masses' formulas (metric table)
            total = sum(h[f"{p}_sum"] for p in m.parts)
            out[m.name] = h["n"] - total if m.complement else total
        out["n"], out["entropy_n"] = h["n"], h["entropy_n"]
        return out

    @cached_property
    def where_counts(self) -> pd.DataFrame:
        """Per (drafter, prompt, depth, head): head maxima per slot kind and their max_prob sum (where_attention);
        per head, so the heads filter applies to where heads look as to the head means."""
        h = self.table("head_summary")
        if h.empty or not int(h["max_n"].sum()):
            return pd.DataFrame()
        keys = ["drafter", "prompt_id", "depth", "head"]
        return h[[*keys, *CATEGORIES, "max_prob_sum", "max_n"]].rename(columns={"max_n": "n"})

    @cached_property
    def _rows(self) -> pd.DataFrame:
        return super().rows_index()

    def rows_index(self) -> pd.DataFrame:
        return self._rows


def load_trace(path) -> LoadedTrace:
    """Read + validate a trace folder (raises DriftError naming the file on any problem)."""
    return LoadedTrace(path)


@dataclass(frozen=True)
class Filters:
    """Shared dashboard filters; empty tuples mean 'all'."""

    prompts: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    depth_range: tuple[int, int] | None = None
    heads: tuple[int, ...] = ()


_fmt_flags = pairs_text  # one wording for a manifest's flag tables (trace/describe.py)


def series_info(cmp: Comparison) -> pd.DataFrame:
    """Per series: trace, drafter identity, checkpoint layout, normalisation flags, overrides, assumptions."""
    rows = []
    for s in cmp.series:
        m = s.trace.manifest
        d = next(x for x in m["drafters"] if x["name"] == s.drafter)
        ov = d.get("overrides") or {}
        rows.append({
            "series": s.label, "trace": s.trace.name, "drafter": s.drafter, "checkpoint": d.get("path"),
            "layout": d.get("layout"), "variant": d.get("variant"), "flags": _fmt_flags(d.get("flags")),
            "flags_on": flags_on_text(d.get("flags")), "overrides": overrides_text(ov),
            "assumptions": _fmt_flags(d.get("assumptions")), "config_hash": d.get("config_hash"),
            "status": m.get("status"), "path": str(s.trace.path), "depth_K": m["capture"].get("depth"), "mode": m["capture"].get("mode"),
        })
    return pd.DataFrame(rows)


def prompt_frame(cmp: Comparison) -> pd.DataFrame:
    """The prompts table of every series, with a `series` column."""
    parts = []
    for s in cmp.series:
        p = s.trace.table("prompts")
        p = p[p["drafter"] == s.drafter].assign(series=s.label)
        if "group" not in p.columns:  # traces captured before groups were recorded: the prompt id's line id
            p["group"] = p["prompt_id"].astype(str).map(s.trace.groups)
        parts.append(p)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["series", "prompt_id", "tags"])


def tag_list(tags: str | float | None) -> list[str]:
    return [t for t in str(tags).split(",") if t] if isinstance(tags, str) else []


def selected_prompts(prompts: pd.DataFrame, f: Filters) -> set[str]:
    """Prompt ids passing the probe and tag filters (tags: any of)."""
    p = prompts
    if f.prompts:
        p = p[p["prompt_id"].isin(f.prompts)]
    if f.tags:
        want = set(f.tags)
        p = p[[bool(want & set(tag_list(t))) for t in p["tags"]]]
    return set(p["prompt_id"])


def _in_depths(df: pd.DataFrame, f: Filters) -> pd.DataFrame:
    if f.depth_range is None or df.empty:
        return df
    lo, hi = f.depth_range
    return df[(df["depth"] >= lo) & (df["depth"] <= hi)]


def head_means(cmp: Comparison, keep: dict[str, set[str]], f: Filters) -> pd.DataFrame:
    """Per series x depth x head: mean of every head metric over the selected prompts' rounds (`keep`: per series
    label, the prompt ids selected)."""
    parts = []
    for s in cmp.series:
        h = s.trace.head_sums if hasattr(s.trace, "head_sums") else LoadedTrace(s.trace.path).head_sums
        h = h[(h["drafter"] == s.drafter) & h["prompt_id"].isin(keep[s.label])]
        if f.heads:
            h = h[h["head"].isin(f.heads)]
        h = _in_depths(h, f)
        g = h.groupby(["depth", "head"], observed=True)[[*HEAD_METRICS, "n", "entropy_n"]].sum()
        m = g[list(HEAD_METRICS)].div(g["n"], axis=0)
        m["entropy"] = g["entropy"] / g["entropy_n"].where(g["entropy_n"] > 0)  # NaN entropies are not zeros
        parts.append(m.reset_index().assign(series=s.label))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["series", "depth", "head"])


def head_lifts(hm: pd.DataFrame, dd: pd.DataFrame) -> pd.DataFrame:
    """Head means with each mass's lift: the head's mean mass / the mean uniform share of its key set over the same
    rounds (per series x depth, from the depths table's key counts; every head of a round saw the same keys)."""
    counts = sorted({c for _, c in LIFTS.values()})
    if hm.empty or dd.empty or not set(counts) <= set(dd.columns):
        return hm.assign(**{k: np.nan for k in LIFTS})
    n = dd["n_keys"].astype(float).where(dd["n_keys"] > 0)
    share = dd.assign(**{c: dd[c].astype(float) / n for c in counts}).groupby(
        ["series", "depth"], observed=True)[counts].mean().reset_index()
    share["series"] = share["series"].astype(str)
    m = hm.assign(series=hm["series"].astype(str)).merge(share, on=["series", "depth"], how="left")
    for lift, (mass, c) in LIFTS.items():
        hm[lift] = (m[mass] / m[c].where(m[c] > 0)).to_numpy()
    return hm


def aux_summary(cmp: Comparison, keep: dict[str, set[str]]) -> pd.DataFrame:
    """Per series x aux chunk: mean RMS before/after fc_norm and the fraction of rounds flagged massive."""
    parts = []
    for s in cmp.series:
        a = s.trace.table("aux")
        a = a[(a["drafter"] == s.drafter) & a["prompt_id"].isin(keep[s.label])]
        if a.empty:
            continue
        g = a.groupby(["chunk", "layer_id"], observed=True).agg(
            rms_before=("rms_before", "mean"), rms_after=("rms_after", "mean"), massive=("massive", "mean"),
            rounds=("round", "size")).reset_index()
        parts.append(g.assign(series=s.label))
    cols = ["series", "chunk", "layer_id", "rms_before", "rms_after", "massive", "rounds"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


class View:
    """Every page table for a set of traces under filters `f`. Cheap parts are computed at construction;
    each heavier table on first access, then kept (one aggregation per trace set and filter setting).
    Raises DriftError if the traces cannot be compared."""

    def __init__(self, traces: list[TraceData], f: Filters = Filters()):
        cmp = Comparison.of(traces, depth_columns=SUMMARY_DEPTHS)  # the summary's columns; the rest on demand
        self.filters = f
        self.series = [s.label for s in cmp.series]
        self._traces = traces
        self._notes = [n for n in cmp.notes if not any(n in t.notes for t in traces)]
        self.info = series_info(cmp)
        prompts = prompt_frame(cmp)
        # per series: one prompt id may carry other tags in another trace (another probe suite)
        by = {label: prompts[prompts["series"] == label] for label in self.series}
        self._keep = {label: selected_prompts(p, f) for label, p in by.items()}
        self._all = all(self._keep[k] == set(p["prompt_id"]) for k, p in by.items())  # none out: no filtered copies
        self.prompts = prompts if self._all else prompts[self._kept_rows(prompts)].reset_index(drop=True)
        self._cmp = Comparison(cmp.series, self._kept(cmp.depths), self._kept(cmp.rounds), cmp.notes)
        self._pred: dict[int, pd.DataFrame] = {}
        self._pop: dict[str, pd.DataFrame] = {}

    def _kept_rows(self, df: pd.DataFrame) -> np.ndarray:
        """Rows (of a frame with series and prompt_id columns) of the prompts selected for their series."""
        ok = np.zeros(len(df), bool)
        for label, keep in self._keep.items():
            ok |= (df["series"] == label).to_numpy() & df["prompt_id"].isin(keep).to_numpy()
        return ok

    def _kept(self, df: pd.DataFrame) -> pd.DataFrame:
        return df if self._all else df[self._kept_rows(df)]

    @property
    def notes(self) -> list[str]:
        """Comparison notes, then each trace's non-finite-value note for the columns read so far (a page that
        reads more columns may add to it: show notes after the page's tables are computed)."""
        return self._notes + [n for t in self._traces for n in t.notes]

    @cached_property
    def _full(self) -> Comparison:
        """The comparison with every depths column (per-depth pages), filtered like the summary's."""
        c = self._cmp
        depths = series_table(c.series, "depths")  # with the verdict's non-sink shares, as Comparison.of adds them
        return Comparison(c.series, self._kept(nonsink_columns(c.series, depths)), c.rounds, c.notes)

    @cached_property
    def _dd(self) -> pd.DataFrame:
        return _in_depths(self._full.depths, self.filters)

    def trace_of(self, series: str) -> tuple[TraceData, str]:
        """The trace and drafter name behind a series label."""
        s = next(x for x in self._cmp.series if x.label == series)
        return s.trace, s.drafter

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per series: acceptance (all definitions), self lift and its trend, depth-1 sink lift, feature
        growth, with 95% CIs."""
        if self._cmp.rounds.empty:
            return pd.DataFrame(columns=["series", "mean_acceptance_length", "al_lo", "al_hi", "self_lift_trend"])
        out = self._cmp.summary()
        for col in ("per_position_rate", "n_alpha"):
            out[col] = [np.round(v, 4).tolist() if isinstance(v, list) else v for v in out[col]]
        return out

    @cached_property
    def glance(self) -> pd.DataFrame:
        """The Overview's headline, one row per series from the summary: the drift verdict, acceptance length (AL)
        with its CI, the recency-matched ratio at depth K (own drafts against equally recent prompt tokens), the
        depth-1 sink lift and the sink kept by K (with CIs), the fed-back RMS growth — each a ratio to 1 with two
        decimals.
        Short column names: the table fits the page beside the sidebar."""
        s = self.summary
        if s.empty:
            return pd.DataFrame(columns=["series"])
        k = int(self._cmp.depths["depth"].max()) if len(self._cmp.depths) else 1

        def ci(r, c: str, x: str = "") -> str:
            v, lo, hi = r[c], r.get(f"{c}_lo", float("nan")), r.get(f"{c}_hi", float("nan"))
            if v != v:
                return "-"
            return f"{x}{v:.2f}" + ("" if lo != lo or hi != hi else f" [{lo:.2f}, {hi:.2f}]")

        rows = []
        for _, r in s.iterrows():
            al = ci(r.rename({"mean_acceptance_length": "al"}), "al")
            verdict = r.get("drift_verdict", "-")
            if verdict == "drift" and r.get("drift_depths"):  # the depths the curve detects it at (Holm)
                verdict = f"drift d{r['drift_depths']}"
            rows.append({"series": r["series"], "verdict": verdict, "AL [95% CI]": al,
                         "groups": int(r["groups"]), f"own/recent d{k}": ci(r, "recency_ratio", "x"),
                         "sink lift d1": ci(r, "sink_lift_d1"), f"sink kept d{k}": ci(r, "sink_retention", "x"),
                         f"RMS d{k}/d1": "-" if r["rms_growth"] != r["rms_growth"] else f"x{r['rms_growth']:.2f}"})
        return pd.DataFrame(rows)

    @cached_property
    def per_depth(self) -> pd.DataFrame:
        if self._dd.empty:
            return pd.DataFrame(columns=["series", "depth"])
        return self._full.per_depth(self._dd)

    def per_depth_in(self, population: str = "all") -> pd.DataFrame:
        """per_depth over a population of rounds: 'all', or 'prefix_correct' (chains still right up to the depth;
        every teacher-forced round); its n_rounds counts that population."""
        if population == "all":
            return self.per_depth
        if population not in self._pop:
            self._pop[population] = pd.DataFrame(columns=["series", "depth"]) if self._dd.empty else \
                self._full.per_depth(self._dd, population=population)
        return self._pop[population]

    @cached_property
    def trends(self) -> pd.DataFrame:
        """Paired per-group depth trends with sign-flip p, MDE and verdict (analysis.stats), both populations."""
        if self._dd.empty:
            return pd.DataFrame()
        return Comparison(self._cmp.series, self._dd, self._cmp.rounds, []).trends()

    @cached_property
    def answer(self) -> list[str]:
        """The Overview's first sentences (analysis.answer): does EAGLE-3 drift, does the other drafter change it,
        from the first page's own columns (the drift verdict, fed-back RMS growth and sink retention paired over
        groups, depth-1 sink lift, acceptance against the EAGLE-3 series)."""
        from .answer import answer

        cmp = self._cmp
        if cmp.rounds.empty:
            return []
        return answer(cmp, self.summary, cmp.acceptance_differences(), cmp.contrasts())

    @cached_property
    def verdict(self) -> list[str]:
        """The Overview's "In short": groups and prompts, and acceptance length against the EAGLE-3 series with its
        test and power (report_stats.findings; rounds only, so the first page stays light)."""
        from .report_stats import findings

        if self._cmp.rounds.empty:
            return []
        return [self._cmp.groups_note().split(";")[0] + "."] + findings(
            self._cmp, tr=pd.DataFrame(), ad=self._cmp.acceptance_differences())

    @cached_property
    def training(self) -> pd.DataFrame:
        """Checkpoint-series curves (analysis.training) over the selected prompts; empty for other traces."""
        from .training import training_curves

        return training_curves(Comparison(self._cmp.series, self._dd, self._cmp.rounds, []))

    @cached_property
    def by_context(self) -> pd.DataFrame:
        if self._dd.empty:
            return pd.DataFrame(columns=["series", "context_bucket", "depth"])
        dd = self._dd.assign(context_bucket=context_bucket(self._dd["context_len"]))
        return self._full.per_depth(dd, by=("context_bucket",))

    def predictors(self, bins: int = 4) -> pd.DataFrame:
        """Acceptance by quantile bin of each predictor, per series x depth (see Comparison.predictors)."""
        if bins not in self._pred:
            self._pred[bins] = pd.DataFrame(columns=["series", "depth", "metric"]) if self._dd.empty else \
                Comparison(self._cmp.series, self._dd, self._cmp.rounds, self.notes).predictors(bins)
        return self._pred[bins]

    @cached_property
    def head_means(self) -> pd.DataFrame:
        """Per series x depth x head: mean masses, entropy and each mass's lift (head_lifts)."""
        return head_lifts(head_means(self._cmp, self._keep, self.filters), self._dd)

    @cached_property
    def aux_summary(self) -> pd.DataFrame:
        return aux_summary(self._cmp, self._keep)

    @cached_property
    def where(self) -> pd.DataFrame:
        """Per series x depth: share of head maxima by slot kind and mean max weight (where_attention), over the
        selected prompts, depths and heads."""
        from .where_attention import from_counts, prompt_counts

        parts = []
        for s in self._cmp.series:
            c = s.trace.where_counts if hasattr(s.trace, "where_counts") else \
                prompt_counts(s.trace.table("heads"), s.trace.table("rounds"))
            if c.empty:
                continue
            c = c[(c["drafter"] == s.drafter) & c["prompt_id"].isin(self._keep[s.label])]
            if self.filters.heads:
                c = c[c["head"].isin(self.filters.heads)]
            parts.append(_in_depths(c, self.filters).assign(series=s.label))
        return from_counts(pd.concat(parts, ignore_index=True)) if parts else pd.DataFrame()

    @cached_property
    def massive_by_depth(self) -> pd.DataFrame:
        if self._dd.empty:
            return pd.DataFrame(columns=["series", "depth", "massive"])
        return self._dd.groupby(["series", "depth"], observed=True)["massive"].mean().reset_index()


def build_view(traces: list[TraceData], f: Filters = Filters()) -> View:
    """All page tables for the given traces under filters `f` (lazy; DriftError if incomparable)."""
    return View(traces, f)


TOKEN_COLUMNS = ("input_id", "draft_id", "target_id")


def round_detail(trace: TraceData, drafter: str, prompt_id: str, round: int, decode=None) -> pd.DataFrame:
    """The per-depth rows of one drafted chain (tokens, match, masses, magnitudes). With `decode` (token_decoder's
    id -> text), the token columns hold the tokens' text as the notebook shows it ('def', ' x'), not their ids."""
    d = trace.table("depths")
    cols = ["depth", "position", *TOKEN_COLUMNS, "match", "accepted", "sink_mass", "self_mass",
            "prompt_mass", "entropy", "rms_in", "rms_post", "massive"]
    sel = d[(d["drafter"] == drafter) & (d["prompt_id"] == prompt_id) & (d["round"] == round)]
    out = sel[cols].sort_values("depth").reset_index(drop=True)
    if decode is not None:
        for c in TOKEN_COLUMNS:
            out[c] = [repr(decode(int(i))) if int(i) >= 0 else "" for i in out[c]]
    return out


def token_decoder(trace: TraceData):
    """A token-id -> text function: the trace's token table (compact traces: the ids it holds, with their
    text), else a `tokenizer.json` stored inside the trace folder (older traces), else None."""
    tok = (trace.manifest.get("tokenizer") or {}).get("tokens")
    if isinstance(tok, str):
        text = read_tokens(trace.path, tok)  # refused when it links outside the trace folder
        return lambda i: text.get(int(i), f"<{int(i)}>")
    f = member(trace.path, "tokenizer.json")  # refused when it links outside the trace folder
    if not f.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(f))
    except Exception:  # noqa: BLE001 - hover text is optional
        return None
    return lambda i: tok.decode([int(i)], skip_special_tokens=False)
