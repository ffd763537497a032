"""The dashboard's views read a large trace in pieces: the first page (summary) only the depth columns it
needs, the per-depth pages the rest when opened; the numbers are those of a whole-table read; NaN/inf counts
are per column, however often a table is read (once per drafter)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import drifttool.trace.reader as reader
from drifttool.analysis.compare import SUMMARY_DEPTHS, Comparison
from drifttool.analysis.views import Filters, build_view, load_trace
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace

pytest.importorskip("pyarrow")


@pytest.fixture()
def trace(dash_traces, tmp_path):
    """A captured trace (two drafters, three prompts, depth 4), copied so a test may damage it."""
    return Path(shutil.copytree(dash_traces["a"], tmp_path / "a.drift"))


def _reads(monkeypatch) -> list[tuple[str, tuple | None]]:
    seen = []
    real = reader.read_table

    def spy(path, name, manifest=None, columns=None, **kw):
        seen.append((name, None if columns is None else tuple(columns)))
        return real(path, name, manifest, columns=columns, **kw)

    monkeypatch.setattr(reader, "read_table", spy)
    return seen


def test_first_page_reads_only_the_summary_columns_and_the_rest_on_demand(trace, monkeypatch):
    seen = _reads(monkeypatch)
    t = load_trace(trace)
    v = build_view([t])
    _ = v.summary, v.prompts, v.info
    depth_reads = [c for n, c in seen if n == "depths"]
    assert depth_reads == [("drafter", *SUMMARY_DEPTHS)], depth_reads
    _ = v.per_depth  # a per-depth page: every column, once
    _ = v.by_context, v.predictors(), v.massive_by_depth
    assert [c for n, c in seen if n == "depths"] == [("drafter", *SUMMARY_DEPTHS), None]
    assert "entropy" in v.per_depth.columns and set(v.per_depth["series"]) == {"e3", "e31"}


@pytest.mark.parametrize("f", [Filters(), Filters(prompts=("p0", "p2")), Filters(depth_range=(2, 3)), Filters(tags=("chat",))])
def test_lazy_view_numbers_equal_a_whole_table_read(trace, f):
    """Summary and per-depth tables from the piecewise reads == Comparison on whole tables, filtered the same."""
    v = build_view([load_trace(trace)], f)
    whole = Comparison.of([read_trace(trace)])
    keep = set(v.prompts["prompt_id"])
    d = whole.depths[whole.depths["prompt_id"].isin(keep)]
    r = whole.rounds[whole.rounds["prompt_id"].isin(keep)]
    ref = Comparison(whole.series, d, r, whole.notes)
    pd.testing.assert_frame_equal(v.summary.drop(columns=["per_position_rate", "n_alpha"]),
                                  ref.summary().drop(columns=["per_position_rate", "n_alpha"]))
    if f.depth_range:
        lo, hi = f.depth_range
        d = d[(d["depth"] >= lo) & (d["depth"] <= hi)]
    pd.testing.assert_frame_equal(v.per_depth, ref.per_depth(d))


def test_nonfinite_counts_are_per_column_not_per_read(trace):
    """One NaN written in a two-drafter trace: the note says 1 (it said 2: the table was read once per drafter)."""
    f = sorted((trace / "depths").glob("*.parquet"))[0]
    df = pd.read_parquet(f)
    df.loc[df.index[0], "rms_in"] = np.nan
    df.to_parquet(f, index=False)
    note = [n for n in Comparison.of([read_trace(trace)]).notes if "non-finite" in n]
    assert len(note) == 1 and "depths.rms_in 1;" in note[0], note
    v = build_view([load_trace(trace)])
    _ = v.per_depth  # the whole table read after the summary's columns: still 1
    assert [n for n in v.notes if "depths.rms_in 1;" in n], v.notes


def test_unused_prompt_categories_do_not_enter_the_bootstrap(tmp_path):
    """Compact traces key prompts by categoricals: a prompt filter (or a drafter that ran fewer prompts) leaves
    unused categories, and a groupby that kept them (pandas 2's default) fed zero-count prompts into the
    bootstrap, changing the CIs. Same rows with unused categories == with plain string keys. (pandas 3 drops
    them by default; pyproject allows pandas >= 2.0, where this failed before every groupby said observed.)"""
    rng = np.random.default_rng(0)  # 12 prompts x 2 rounds: enough clusters for the CI to depend on their count
    t = write_trace(tmp_path / "x.drift", {"e3": {"accepted": list(rng.integers(0, 4, 24)),
                                                  "prompt": [f"p{i // 2:02d}" for i in range(24)],
                                                  "self_mass": list(rng.uniform(0, 0.3, 24))}}, depth=3, compact=True)
    whole = Comparison.of([read_trace(t)])
    assert isinstance(whole.depths["prompt_id"].dtype, pd.CategoricalDtype)

    def keyed(df: pd.DataFrame, how: str) -> pd.DataFrame:
        p = df["prompt_id"]
        return df.assign(prompt_id=p.astype(str) if how == "str" else p.cat.add_categories([f"gone{i}" for i in range(5)]))

    cols = ["mean_acceptance_length", "al_lo", "al_hi", "self_lift", "self_lift_trend", "self_lift_trend_lo",
            "sink_lift_d1"]
    got, want = (Comparison(whole.series, keyed(whole.depths, how), keyed(whole.rounds, how), whole.notes).summary()[cols]
                 for how in ("unused", "str"))
    pd.testing.assert_frame_equal(got, want)
