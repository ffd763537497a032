"""Every number of the dashboard / notebook tables (analysis.views.View) recomputed from the raw Parquet tables of
real captured traces by a separate, naive path (plain pandas/numpy here, no drifttool.analysis), under filters.

The traces: two trained tiny drafters (e3, e31) in one trace with `full_every=4` (entropy NaN on the other rounds),
a long prompt whose context crosses the 128 bucket edge, and a second trace whose drafter is also called e3 (its
series label is prefixed). Views are built from the dashboard's loader and from the notebook's reader."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from drifttool.analysis.views import Filters, build_view, load_trace
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace.reader import read_trace
from tests.support.capture import prompt, write_probes

MASSES = ("sink_mass", "draft_mass", "own_mass", "self_mass", "prompt_mass")
FILTERS = [
    Filters(),
    Filters(prompts=("p1", "p4")),
    Filters(tags=("code",)),
    Filters(depth_range=(2, 3)),
    Filters(heads=(0, 3)),
    Filters(tags=("code", "chat"), depth_range=(1, 2), heads=(1,)),
]


@pytest.fixture(scope="module")
def traces(trained_pair, trained_pair31, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("numbers")
    tags = [["code", "short"], ["chat"], ["code"], []]
    rows = [{"id": f"p{i}", "token_ids": p, "tags": tags[i]} for i, p in enumerate(trained_pair.prompts)]
    rows.append({"id": "p4", "token_ids": prompt(4, 118), "tags": ["long"]})  # context crosses 128
    probes = write_probes(root / "probes.jsonl", rows)
    drafters = [
        DrafterSpec.parse(f"e3={trained_pair.checkpoint}"),
        DrafterSpec.parse(f"e31={trained_pair31.checkpoint}"),
    ]
    a = run_capture(
        trained_pair.target,
        drafters,
        str(probes),
        str(root / "a.drift"),
        depth=4,
        max_new_tokens=24,
        progress=False,
        full_every=4,
    )
    b = run_capture(
        trained_pair.target,
        drafters[:1],
        str(probes),
        str(root / "b.drift"),
        depth=4,
        max_new_tokens=16,
        progress=False,
        full_every=3,
        limit=3,
    )
    # the same prompt ids tagged differently (another probe suite): tags select per trace
    other = write_probes(
        root / "other.jsonl",
        [
            {"id": "p0", "token_ids": rows[0]["token_ids"], "tags": ["chat"]},
            {"id": "p1", "token_ids": rows[1]["token_ids"], "tags": ["code"]},
        ],
    )
    c = run_capture(
        trained_pair.target,
        drafters[1:],
        str(other),
        str(root / "c.drift"),
        depth=4,
        max_new_tokens=12,
        progress=False,
        full_every=4,
    )
    return [Path(a), Path(b), Path(c)]


@lru_cache(maxsize=64)
def raw(path: Path, table: str) -> pd.DataFrame:
    """A table as stored (Parquet under TABLE/), keys as plain strings, derived masses computed in float64
    (cached: callers do not modify it)."""
    df = pd.read_parquet(path / table)
    for c in ("drafter", "prompt_id", "tags"):
        if c in df:
            df[c] = df[c].astype(str)
    if {"sink_mass", "draft_mass", "own_mass"} <= set(df):
        s, d, o = (df[c].astype(np.float64) for c in ("sink_mass", "draft_mass", "own_mass"))
        df["self_mass"], df["prompt_mass"] = d + o, 1.0 - s - d - o
    if {"n_keys", "n_sink", "n_self"} <= set(df):  # lifts: mass / (count / keys seen), NaN for an empty set
        for lift, mass, count in (("self_lift", "self_mass", "n_self"), ("sink_lift", "sink_mass", "n_sink")):
            df[lift] = (df[mass] * df["n_keys"] / df[count].where(df[count] > 0)).astype(np.float64)
    return df


def series_map(view) -> dict[str, tuple[Path, str]]:
    """Series label -> (trace folder, drafter); labels are the drafter name, or trace:drafter when names collide."""
    out = {r.series: (Path(r.path), r.drafter) for r in view.info.itertuples()}
    for label, (_, drafter) in out.items():
        assert label == drafter or label.endswith(f":{drafter}")
    return out


def kept_prompts(path: Path, drafter: str, f: Filters) -> set[str]:
    p = raw(path, "prompts")
    p = p[p.drafter == drafter]
    ok = pd.Series(True, index=p.index)
    if f.prompts:
        ok &= p.prompt_id.isin(f.prompts)
    if f.tags:
        ok &= p.tags.map(lambda t: any(x in f.tags for x in t.split(",") if x))
    return set(p[ok].prompt_id)


def select(df: pd.DataFrame, path: Path, drafter: str, f: Filters, heads: bool = False) -> pd.DataFrame:
    df = df[(df.drafter == drafter) & df.prompt_id.isin(kept_prompts(path, drafter, f))]
    if f.depth_range is not None and "depth" in df:
        df = df[df.depth.between(*f.depth_range)]
    if heads and f.heads:
        df = df[df["head"].isin(f.heads)]
    return df


def close(got, want, what: str, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(
        np.asarray(got, float), np.asarray(want, float), atol=atol, rtol=1e-6, equal_nan=True, err_msg=what
    )


def bootstrap(df: pd.DataFrame, col: str, n_boot: int = 10_000) -> tuple[float, float, float]:
    """Mean of `col` and its 95% interval with the selected prompts resampled (the seeded multinomial draw the
    package documents: seed 0, prompts in sorted order; none from one prompt)."""
    g = df.groupby(df.prompt_id.astype(str))[col].agg(["sum", "count"]).sort_index()  # groups = prompt ids here
    k = len(g)
    if k < 6:  # fewer than six groups: no interval (a bootstrap over so few has far below 95% coverage)
        return g["sum"].sum() / g["count"].sum(), np.nan, np.nan
    w = np.random.default_rng(0).multinomial(k, np.full(k, 1 / k), size=n_boot).astype(float)
    stats = (w @ g["sum"].to_numpy(float)) / (w @ g["count"].to_numpy(float))
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return g["sum"].sum() / g["count"].sum(), lo, hi


def views(paths: list[Path], f: Filters):
    """The dashboard's view (load_trace) and the notebook's (read_trace) of the traces, and the notebook's of the
    first alone (one trace: its keys stay categorical, with every prompt as a category even when filtered out)."""
    return [
        build_view([load_trace(p) for p in paths], f),
        build_view([read_trace(p) for p in paths], f),
        build_view([read_trace(paths[0])], f),
    ]


@pytest.mark.parametrize("f", FILTERS, ids=str)
def test_head_means_and_where(traces, f):
    partial = []  # per series: some entropies NaN (and maxima -1), yet every mean defined
    for v in views(traces, f):
        smap = series_map(v)
        assert sorted(v.head_means.series.unique()) == sorted(smap)
        for label, (path, drafter) in smap.items():
            h = select(raw(path, "heads"), path, drafter, f, heads=True)
            want = h.groupby(["depth", "head"])[list(MASSES)].mean()
            # entropy: NaN on rounds without the full attention row; the mean is over the finite ones only
            want["entropy"] = h.groupby(["depth", "head"]).entropy.agg(lambda e: e[np.isfinite(e)].mean())
            got = v.head_means[v.head_means.series == label].set_index(["depth", "head"]).sort_index()
            assert list(got.index) == list(want.index), label
            for c in want:
                close(got[c], want[c], f"head_means {label} {c} {f}")
            assert want.entropy.notna().all()

            # where heads look hardest: rounds with a recorded maximum, the slot kind of each maximum
            w = h[h.top_pos >= 0].merge(
                raw(path, "rounds")[["drafter", "prompt_id", "round", "context_len"]],
                on=["drafter", "prompt_id", "round"],
            )
            t, n = w.top_pos.to_numpy(), w.context_len.to_numpy()
            kind = np.select(
                [t >= n, t == 0, t < 4, t >= n - 16], ["self", "pos0", "early", "recent"], "other"
            )
            share = pd.crosstab(w.depth, kind, normalize="index")
            got = v.where[v.where.series == label].set_index("depth").sort_index()
            assert list(got.index) == list(share.index), label
            for k in ("pos0", "early", "recent", "self", "other"):
                close(got[k], share[k] if k in share else 0.0, f"where {label} {k} {f}")
            close(got["max_prob"], w.groupby("depth").max_prob.mean(), f"where {label} max_prob {f}")
            close(got["n"], w.groupby("depth").size(), f"where {label} n {f}")
            partial.append(h.entropy.isna().any() and len(w) < len(h))
    assert sum(partial) >= len(partial) // 2


@pytest.mark.parametrize("f", FILTERS[:4], ids=str)
def test_prompts_aux_massive(traces, f):
    for v in views(traces, f):
        for label, (path, drafter) in series_map(v).items():
            r = select(
                raw(path, "rounds"), path, drafter, Filters(f.prompts, f.tags)
            )  # prompts: no depth filter
            g = r.groupby("prompt_id").accepted.agg(["size", "sum"])
            got = v.prompts[v.prompts.series == label].assign(prompt_id=lambda x: x.prompt_id.astype(str))
            got = got.set_index("prompt_id").sort_index()
            assert list(got.index) == list(g.index), label
            close(got.n_rounds, g["size"], f"prompts n_rounds {label}")
            close(got.accepted_total, g["sum"], f"prompts accepted_total {label}")
            close(got.mean_acceptance_length, 1 + g["sum"] / g["size"], f"prompts AL {label}")
            s = v.summary.set_index("series").loc[label]
            close(s.drafts, len(r), f"summary drafts {label}")
            al = 1 + np.array(bootstrap(r, "accepted"))
            close([s.mean_acceptance_length, s.al_lo, s.al_hi], al, f"summary AL {label} {f}")
            dd = select(
                raw(path, "depths"), path, drafter, Filters(f.prompts, f.tags)
            )  # summary: every depth
            close(
                [s.self_lift, s.self_lift_lo, s.self_lift_hi],
                bootstrap(dd[dd.depth >= 2], "self_lift"),
                f"self lift {label}", atol=1e-4,
            )
            by = dd.groupby("depth")[["rms_in", "sink_mass"]].mean()
            close(s.feature_growth, by.rms_in.iloc[-1] / by.rms_in.iloc[0], f"feature_growth {label}")
            close(s.sink_retention, by.sink_mass.iloc[-1] / by.sink_mass.iloc[0], f"sink_retention {label}")

            a = select(raw(path, "aux"), path, drafter, Filters(f.prompts, f.tags))
            want = a.groupby(["chunk", "layer_id"]).agg(
                rms_before=("rms_before", "mean"),
                rms_after=("rms_after", "mean"),
                massive=("massive", "mean"),
                rounds=("round", "size"),
            )
            got = v.aux_summary[v.aux_summary.series == label].set_index(["chunk", "layer_id"]).sort_index()
            assert list(got.index) == list(want.index) and len(want), label
            for c in want:
                close(got[c], want[c], f"aux {label} {c}")

            d = select(raw(path, "depths"), path, drafter, f)
            got = v.massive_by_depth[v.massive_by_depth.series == label].set_index("depth").sort_index()
            close(got.massive, d.groupby("depth").massive.mean(), f"massive {label}")


def bucket(ctx: np.ndarray) -> np.ndarray:
    """Context bucket labels: [0, 128), [128, 256), [256, 512), ... (powers of two from 128)."""
    lo = np.where(ctx < 128, 0, 2 ** np.floor(np.log2(np.maximum(ctx, 1))).astype(int))
    return np.array([f"{a}-{(128 if a == 0 else 2 * a) - 1}" for a in lo])


@pytest.mark.parametrize("f", [Filters(), Filters(tags=("long", "chat"), depth_range=(2, 4))], ids=str)
def test_by_context(traces, f):
    for v in views(traces, f):
        bc = v.by_context.assign(context_bucket=lambda x: x.context_bucket.astype(str))
        assert set(bc.context_bucket) == {"0-127", "128-255"}
        for label, (path, drafter) in series_map(v).items():
            d = select(raw(path, "depths"), path, drafter, f)
            d = d.assign(context_bucket=bucket(d.context_len.to_numpy()), acc=d.accepted.astype(float))
            keys = ["context_bucket", "depth"]
            gb = d.groupby(keys)
            want = pd.DataFrame(
                {
                    m: gb[m].mean()
                    for m in (
                        "sink_mass",
                        "self_mass",
                        "prompt_mass",
                        "draft_mass",
                        "own_mass",
                        "entropy",
                        "rms_in",
                        "rms_pre",
                        "rms_post",
                    )
                }
            )
            want["acceptance_rate"] = gb.acc.mean()
            want["n_alpha"] = d[d.reached].groupby(keys).acc.mean()
            want["n_rounds"], want["n_reached"] = gb.size(), gb.reached.sum()
            want["n_prompts"] = gb.prompt_id.nunique()
            got = bc[bc.series == label].set_index(keys).sort_index()
            assert list(got.index) == list(want.index), label
            for c in want:
                close(got[c], want[c], f"by_context {label} {c}")


@pytest.mark.parametrize("bins", [3, 4])
def test_predictors(traces, bins):
    f = Filters(prompts=("p0", "p1", "p2", "p4"))
    v = views(traces, f)[0]
    pr = v.predictors(bins)
    for label, (path, drafter) in series_map(v).items():
        d = select(raw(path, "depths"), path, drafter, f)
        d = d[d.reached]
        mine = pr[pr.series == label]
        assert set(zip(mine.depth, mine.metric)) == {
            (k, m) for k in set(d.depth) for m in ("sink_mass", "self_mass", "rms_in")
        }
        for (depth, m), got in mine.groupby(["depth", "metric"]):
            sub = d[d.depth == depth]
            x, y = sub[m].to_numpy(np.float64), sub.accepted.to_numpy(np.float64)
            edges = np.unique(np.quantile(x, np.linspace(0, 1, bins + 1)))
            b = np.searchsorted(edges[1:-1], x, side="left") if len(edges) > 1 else np.zeros(len(x), int)
            want = (
                pd.DataFrame({"x": x, "y": y, "b": b})
                .groupby("b")
                .agg(lo=("x", "min"), hi=("x", "max"), acceptance=("y", "mean"), n=("y", "size"))
            )
            got = got.set_index("bin").sort_index()
            assert list(got.index) == list(want.index), (label, depth, m)
            for c in want:
                close(got[c], want[c], f"predictors {label} d{depth} {m} {c}", atol=1e-5)
            rho = spearmanr(x, y).statistic if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0 else np.nan
            close(got.spearman.iloc[0], rho, f"spearman {label} d{depth} {m}")
    assert pr.spearman.notna().sum() > 10 and pr.groupby(["series", "depth", "metric"]).size().max() == bins
