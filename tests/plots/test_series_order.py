"""One series order on every chart (read from the figures' data): by trace, then EAGLE-3, EAGLE-3.1, what-ifs,
whatever order the tables arrive in (the per-depth and context tables come sorted by label, which put the
what-if `eagle3+norm_output` between EAGLE-3 and EAGLE-3.1 in some charts and not in others)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drifttool import plots
from drifttool.analysis.views import build_view
from drifttool.plots.base import series_order
from drifttool.trace.reader import read_trace

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "smollm2-long_code.drift"


@pytest.fixture(scope="module")
def view():
    return build_view([read_trace(SAMPLE)])


def order_in(fig, names) -> list[str]:
    seen = [t.name for t in fig.data if t.name in names]
    seen += [str(a.text).split("<")[0].strip() for a in fig.layout.annotations if str(a.text).split("<")[0].strip() in names]
    return list(dict.fromkeys(seen))


def test_series_order_is_by_kind():
    assert series_order(["eagle3.1", "eagle3+norm_output", "eagle3"]) == ["eagle3", "eagle3.1", "eagle3+norm_output"]
    assert series_order(["b:eagle3.1", "a:eagle3.1", "b:eagle3", "a:eagle3"]) == [
        "b:eagle3", "b:eagle3.1", "a:eagle3", "a:eagle3.1"]  # traces in order of appearance


def test_every_chart_of_a_page_draws_the_series_in_one_order(view):
    want = series_order(view.summary["series"])
    assert len(want) == 3
    figs = {
        "acceptance bars": plots.acceptance_length_bars(view.summary.iloc[::-1]),
        "depth": plots.depth_curves(view.per_depth.sort_values("series")),
        "rms": plots.feature_rms(view.per_depth.sort_values("series", ascending=False)),
        "acceptance": plots.acceptance_per_depth(view.per_depth.sort_values("series")),
        "heads": plots.head_heatmaps(view.head_means.sort_values("series"), "sink_mass"),
        "context": plots.context_curves(view.by_context.sort_values("series"), "self_mass"),
        "context summary": plots.context_summary(view.by_context.sort_values("series"), "self_mass"),
        "aux": plots.aux_rms(view.aux_summary.sort_values("series")),
        "predictors": plots.predictor_curves(view.predictors().sort_values("series"), "self_mass"),
    }
    for name, fig in figs.items():
        got = order_in(fig, set(want))
        assert got == [s for s in want if s in got] and len(got) >= 2, (name, got)
