"""Notebook inspection API: `dt.load(path)` -> Trace (pandas views, summary, compare, plots) and
`dt.capture(drafter, target, depth=K)` for live capture with on-demand attention rows."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from .analysis.compare import Comparison
from .errors import DriftError
from .trace.reader import TraceData, read_trace


class Trace:
    """A trace on disk with pandas views and plotly figures (the dashboard's builders)."""

    def __init__(self, data: TraceData):
        self.data = data
        self.plot = _Plots(self)

    @property
    def path(self) -> Path:
        return self.data.path

    @property
    def manifest(self) -> dict:
        return self.data.manifest

    @property
    def rounds(self) -> pd.DataFrame:
        return self.data.rounds

    @property
    def depths(self) -> pd.DataFrame:
        return self.data.depths

    @property
    def heads(self) -> pd.DataFrame:
        return self.data.heads

    @property
    def prompts(self) -> pd.DataFrame:
        return self.data.prompts

    @property
    def aux(self) -> pd.DataFrame:
        return self.data.aux

    @property
    def drafters(self) -> list[str]:
        return [d["name"] for d in self.manifest["drafters"]]

    @property
    def is_tree(self) -> bool:
        return self.data.is_tree

    @property
    def tree_nodes(self) -> pd.DataFrame:
        """Draft-tree traces: one row per round x node (docs/trees.md)."""
        return self.data.tree_nodes

    @property
    def tree_heads(self) -> pd.DataFrame:
        return self.data.tree_heads

    def tree_summary(self, *others: Trace) -> pd.DataFrame:
        """Per depth and branch (main path, side branches, accepted path, all nodes): node means with 95% group
        bootstrap CIs (`{metric}_lo`, `{metric}_hi`; NaN below 6 groups)."""
        from .analysis.tree_compare import tree_depth_table

        return tree_depth_table([self.data, *(o.data for o in others)])

    def tree_figure(self, drafter: str, prompt_id: str, round: int, color: str = "self_mass"):
        """One round's tree drawn: nodes coloured by `color`, the accepted path in bold, labelled with the tokens'
        text where the trace carries its tokenizer (else their ids)."""
        from .analysis.tree_compare import tree_round
        from .analysis.views import token_decoder
        from .plots import tree_round_figure

        return tree_round_figure(tree_round(self.tree_nodes, drafter, prompt_id, round), color,
                                 token_decoder(self.data))

    def comparison(self, *others: Trace, trained_window: int | None = None) -> Comparison:
        """The full comparison object (trained_window: the length the drafters were trained at, when their
        configs do not say; see `decay.windows`)."""
        return Comparison.of([self.data, *(o.data for o in others)], trained_window=trained_window)

    def per_depth(self, population: str = "all") -> pd.DataFrame:
        """The per-depth table with 95% bootstrap CIs over groups (source documents), over 'all' rounds or the
        'prefix_correct' ones (chain still right up to the depth)."""
        return self.comparison().per_depth(population=population)

    summary = per_depth  # the older name: a per-depth table (Comparison.summary is one row per series)

    def trends(self, *others: Trace) -> pd.DataFrame:
        """Paired per-group depth trends (change from a metric's first depth to each depth) with 95% CI,
        sign-flip p, MDE at 80% power and verdict, over all and prefix-correct rounds (analysis.stats)."""
        return self.comparison(*others).trends()

    def differences(self, *others: Trace) -> pd.DataFrame:
        """Each series against the EAGLE-3 one: acceptance length and depth-trend differences, paired over
        groups, with p, MDE and verdict."""
        cmp = self.comparison(*others)
        return pd.concat([cmp.acceptance_differences(), cmp.trend_differences()], ignore_index=True)

    def training(self, *others: Trace) -> pd.DataFrame:
        """A checkpoint-series trace (capture --drafter-series): per variant x step x depth, acceptance,
        sink / self mass and fed-back RMS (analysis.training); empty for other traces."""
        return self.comparison(*others).training()

    def answer(self, *others: Trace) -> list[str]:
        """The sentences `compare` opens with: per drafter pair, does EAGLE-3 drift and does the other change it,
        read against uniform attention (lifts), with p, CIs and what the data cannot tell (analysis.answer)."""
        from .analysis.answer import answer

        return answer(self.comparison(*others))

    def patch_answer(self) -> list[str]:
        """A `drifttool patch` trace: what each intervention changes, one sentence each (acceptance length paired
        over groups, then the verdict's quantities against the clean pass; analysis.patching). Empty otherwise."""
        from .analysis.patching import answer

        return answer(self.data) if self.data.manifest.get("patch") else []

    def patch_effects(self) -> list[dict]:
        """The numbers behind patch_answer: per intervention, acceptance length, acceptance per depth (Holm over
        depths) and the verdict's quantities, each paired over groups."""
        from .analysis.patching import effects

        return effects(self.data) if self.data.manifest.get("patch") else []

    def span_scan(self) -> pd.DataFrame:
        """A patch trace's prompt spans ranked by their acceptance-length change, Holm across each drafter's spans
        (analysis.patching.scan); empty without spans."""
        from .analysis.patching import scan

        return scan(self.data) if self.data.manifest.get("patch") else pd.DataFrame()

    def findings(self, *others: Trace) -> list[str]:
        """The sentences `compare` ends with: what is detected, what is underpowered, with n groups and MDE."""
        from .analysis.report_stats import findings

        return findings(self.comparison(*others))

    def compare(self, other: Trace | None = None, *more: Trace) -> pd.DataFrame:
        """Per-series summary (acceptance definitions, self lift and its trend, growth) of this trace and others; one
        scalar per cell (the per-depth rates as columns per_position_rate_d1.., n_alpha_d1..)."""
        rest = [o for o in (other, *more) if o is not None]
        return flat_summary(self.comparison(*rest).summary())

    def where(self, *others: Trace) -> pd.DataFrame:
        """Per series x depth: where heads look hardest (position 0, early, recent, own draft slots, other)
        and their mean largest weight — the drafter's own sinks, whatever they are."""
        return self.comparison(*others).where()

    def top_positions(self, depth: int = 1, k: int = 5) -> pd.DataFrame:
        """The key slots that most often hold a head's largest weight at one depth, per series."""
        return self.comparison().top_positions(depth, k)

    def attention_row(self, drafter: str, prompt_id: str, round: int):
        """Sampled [K, L] head-mean attention rows of one round and the token id held by each slot."""
        if drafter not in self.drafters:
            raise DriftError(f"drafter {drafter!r} not in this trace; valid: {self.drafters}")
        ids = sorted(self.prompts[self.prompts.drafter == drafter].prompt_id.unique())
        if prompt_id not in ids:
            raise DriftError(f"prompt {prompt_id!r} not in this trace; valid prompt ids: {ids}")
        return self.data.attention_row(drafter, prompt_id, round)

    def _repr_html_(self) -> str:
        m = self.manifest
        rows = "".join(
            f"<tr><td>{html.escape(d['name'])}</td><td>{d.get('layout')}</td><td>{d.get('variant')}</td>"
            f"<td>{html.escape(str(d.get('overrides') or ''))}</td></tr>" for d in m["drafters"])
        c = m["capture"]
        flagged = (f" <b style='color:#c00'>FLAGGED ({len(m['flags'])} prompts: "
                   f"{html.escape('; '.join(f['key'] for f in m['flags']))})</b>") if m.get("flags") else ""
        return (f"<b>{html.escape(self.path.name)}</b> — status {m['status']}{flagged}, {m['counts']['prompts']} prompts, "
                f"{m['counts']['rounds']} rounds, depth {c['depth']}, mode {c['mode']}"
                f"<table><tr><th>drafter</th><th>layout</th><th>variant</th><th>overrides</th></tr>{rows}</table>")

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, drafters={self.drafters}, status={self.manifest['status']!r})"


class _Plots:
    """`trace.plot.depth()` etc.: the dashboard's own builders over the dashboard's data layer (views.View)."""

    def __init__(self, trace: Trace):
        self._t = trace

    def _view(self, others):
        from .analysis.views import build_view

        return build_view([self._t.data, *(o.data for o in others)])

    def depth(self, *others: Trace, metrics=None):
        """Attention by depth against uniform attention (lifts, log axis; 1 = uniform); `metrics=` masses or lifts
        to draw instead (e.g. ("sink_mass", "self_mass", "prompt_mass") for the raw masses)."""
        from . import plots

        pd_ = self._view(others).per_depth
        if metrics is None:
            return plots.lift_curves(pd_)
        return plots.lift_curves(pd_, metrics) if all(m.endswith("_lift") for m in metrics) else \
            plots.depth_curves(pd_, metrics)

    def patch(self):
        """A `drifttool patch` trace: the change in per-depth acceptance each intervention makes, with CIs."""
        from . import plots
        from .analysis.patching import effects

        return plots.patch_effects(effects(self._t.data))

    def span_scan(self):
        """A `drifttool patch --span/--scan` trace: each prompt span's acceptance-length change, ranked, with CIs."""
        from . import plots
        from .analysis.patching import scan

        return plots.span_scan(scan(self._t.data))

    def recency(self, *others: Trace):
        """The drift verdict's picture: own drafts against equally recent prompt tokens, per series."""
        from . import plots

        return plots.recency_profile(self._view(others).per_depth)

    def rms(self, *others: Trace):
        from . import plots

        return plots.feature_rms(self._view(others).per_depth)

    def acceptance(self, *others: Trace):
        from . import plots

        return plots.acceptance_per_depth(self._view(others).per_depth)

    def heads(self, *others: Trace, metric: str = "self_mass"):
        from . import plots

        return plots.head_heatmaps(self._view(others).head_means, metric)

    def context(self, *others: Trace, metric: str = "self_mass"):
        from . import plots

        return plots.context_curves(self._view(others).by_context, metric)

    def training(self, *others: Trace, metric: str = "acceptance_rate", depth: int = 1):
        """A metric at one depth against the checkpoint's training step (checkpoint-series traces)."""
        from .plots import training_curves

        return training_curves(self._view(others).training, metric, depth)

    def predictors(self, *others: Trace, metric: str = "self_mass"):
        from . import plots

        return plots.predictor_curves(self._view(others).predictors(), metric)

    def attention_row(self, prompt_id: str, round: int, drafter: str | None = None):
        """Heatmap of a sampled round's attention rows (depth x slot), sinks and draft slots marked."""
        from . import plots
        from .analysis.views import token_decoder

        drafter = drafter or self._t.drafters[0]
        rows, tokens = self._t.attention_row(drafter, prompt_id, round)
        r = self._t.rounds
        ctx = int(r[(r.drafter == drafter) & (r.prompt_id == prompt_id) & (r["round"] == round)].context_len.iloc[0])
        sink = self._t.manifest["capture"].get("sink")
        return plots.attention_row_heatmap(rows, tokens, ctx, sinks=plots.sink_slots(sink, ctx, tokens),
                                           decode=token_decoder(self._t.data))


def load(path) -> Trace:
    return Trace(read_trace(path))


def compare_many(traces: list) -> pd.DataFrame:
    """Summary of any number of traces (paths or Trace objects)."""
    data = [t.data if isinstance(t, Trace) else read_trace(t) for t in traces]
    if not data:
        raise DriftError("compare_many: give at least one trace")
    return flat_summary(Comparison.of(data).summary())


def flat_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Comparison.summary() with its list-valued columns (per-position rate, n-alpha per depth) spread into
    one scalar column per depth: per_position_rate_d1, ..., n_alpha_d1, ..."""
    out = summary.copy()
    for col in ("per_position_rate", "n_alpha"):
        if col not in out:
            continue
        vals = [v if isinstance(v, (list, tuple)) else [] for v in out.pop(col)]
        k = max((len(v) for v in vals), default=0)
        for d in range(k):
            out[f"{col}_d{d + 1}"] = [v[d] if d < len(v) else np.nan for v in vals]
    return out


class AttentionRow(np.ndarray):
    """One draft query's attention over key slots (a numpy array), labelled per slot: positions, regions,
    token_ids, tokens. `frame()` returns them as a DataFrame."""

    positions: np.ndarray
    regions: list[str]
    token_ids: list[int]
    tokens: list[str | None]

    @classmethod
    def of(cls, row, positions, regions, token_ids, tokens) -> AttentionRow:
        a = np.asarray(row).view(cls)
        a.positions, a.regions, a.token_ids, a.tokens = np.asarray(positions), list(regions), list(token_ids), \
            list(tokens)
        return a

    def __array_finalize__(self, obj) -> None:
        for k in ("positions", "regions", "token_ids", "tokens"):
            setattr(self, k, getattr(obj, k, None))

    def frame(self) -> pd.DataFrame:
        n = len(self)
        return pd.DataFrame({"position": self.positions[:n], "region": self.regions[:n],
                             "token_id": self.token_ids[:n], "token": self.tokens[:n],
                             "attention": np.asarray(self)})
