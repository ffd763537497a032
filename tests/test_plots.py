"""drifttool.plots on fixture traces: pure figure builders (no Streamlit), one trace per series, shared scales."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("plotly")
from drifttool import plots  # noqa: E402
from drifttool.views import Filters, build_view, load_trace  # noqa: E402


@pytest.fixture(scope="module")
def view(dash_traces):
    return build_view([load_trace(dash_traces["a"]), load_trace(dash_traces["b"])])


def _names(fig) -> set[str]:
    return {t.name for t in fig.data if t.name and "CI" not in t.name}


def test_depth_figures_have_one_line_per_series_with_bands(view):
    for fig in (plots.depth_curves(view.per_depth), plots.feature_rms(view.per_depth),
                plots.acceptance_per_depth(view.per_depth)):
        assert _names(fig) == set(view.series)
        assert any(t.fill == "toself" for t in fig.data)  # CI bands
    assert plots.feature_rms(view.per_depth).layout.yaxis.type == "log"


def test_head_heatmaps_share_one_colour_scale_and_diff_is_symmetric(view):
    fig = plots.head_heatmaps(view.head_means, "sink_mass", view.series)
    assert len(fig.data) == len(view.series) and {t.coloraxis for t in fig.data} == {"coloraxis"}
    vals = view.head_means["sink_mass"]
    assert fig.layout.coloraxis.cmin == pytest.approx(vals.min()) and fig.layout.coloraxis.cmax == pytest.approx(vals.max())
    d = plots.head_diff_heatmap(view.head_means, "e3", "e31", "self_mass")
    z = np.asarray(d.data[0].z, dtype=float)
    want = plots.head_matrix(view.head_means, "e3", "self_mass") - plots.head_matrix(view.head_means, "e31", "self_mass")
    np.testing.assert_allclose(z, want.to_numpy())
    assert d.data[0].zmin == -d.data[0].zmax


def test_context_rejection_and_magnitude_figures(view):
    assert plots.context_curves(view.by_context, "self_mass").data
    assert [str(b) for b in plots.bucket_order(pd.Series(["128-255", ">=131072", "0-127"]))] == \
        ["0-127", "128-255", ">=131072"]
    assert _names(plots.predictor_curves(view.predictors(), "rms_in")) == set(view.series)
    assert _names(plots.predictor_correlations(view.predictors())) == set(view.series)
    assert not view.aux_summary.empty  # aux chunks are captured (before/after fc_norm)
    e31 = view.aux_summary[view.aux_summary.series == "e31"]
    assert np.allclose(e31["rms_after"], 1.0, atol=0.05)  # fc_norm output has unit RMS (weights = 1)
    assert _names(plots.aux_rms(view.aux_summary)) == set(view.series)
    assert plots.massive_flags(view.massive_by_depth, view.aux_summary).data


def test_attention_row_marks_sinks_draft_slots_and_queries(dash_traces):
    t = load_trace(dash_traces["a"])
    r = t.rows_index().iloc[0]
    row, slots = t.attention_row(r.drafter, r.prompt_id, int(r["round"]))
    ctx = int(r.context_len)
    sinks = plots.sink_slots(t.manifest["capture"]["sink"], ctx, slots)
    assert sinks == [0, 1, 2, 3]
    fig = plots.attention_row_heatmap(row, slots, ctx, sinks, decode=lambda i: f"<{i}>")
    heat = fig.data[0]
    assert np.asarray(heat.z).shape == row.shape == (4, ctx + 3)
    assert heat.customdata[0][5] == f"{slots[5]} '<{slots[5]}>'"
    q = next(tr for tr in fig.data if tr.name == "query slot")
    assert list(q.x) == [ctx - 1 + j for j in range(4)]
    assert fig.layout.shapes[0].x0 == ctx - 0.5  # draft-slot band


def test_filters_and_empty_views(dash_traces):
    t = load_trace(dash_traces["a"])
    v = build_view([t], Filters(prompts=("p0",), depth_range=(2, 3), heads=(1,)))
    assert set(v.per_depth["depth"]) == {2, 3} and set(v.head_means["head"]) == {1}
    assert set(v.prompts["prompt_id"]) == {"p0"}
    empty = build_view([t], Filters(tags=("no-such-tag",)))
    assert empty.per_depth.empty and empty.head_means.empty
    for fig in (plots.depth_curves(empty.per_depth), plots.head_heatmaps(empty.head_means),
                plots.context_curves(empty.by_context), plots.predictor_curves(empty.predictors()),
                plots.acceptance_length_bars(empty.summary)):
        assert fig.layout.annotations  # "no data for the current filters"
