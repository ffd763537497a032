"""An MTP trace on the charts and the dashboard: a real capture of a tiny DeepSeek-V3 MTP head and its
norm_output what-if (tests/support/mtp_fixtures.py) is drawn by every figure of the view, in the MTP heads'
own style (reddish purple; the what-if dashed) and in the one series order, and every dashboard page renders it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")
from drifttool import plots  # noqa: E402
from drifttool.analysis.views import build_view, load_trace  # noqa: E402
from drifttool.run.engines.hf import DrafterSpec, run_capture  # noqa: E402
from drifttool.styles import KIND_STYLES, drafter_kind, series_order  # noqa: E402
from tests.support import mtp_fixtures as fx  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def mtp_trace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mtp_series")
    folder = fx.write_target(root / "ds", fx.DEEPSEEK)
    probes = root / "p.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": p}) + "\n"
                              for i, p in enumerate(([5, 9, 14, 3, 22, 40, 7, 61], [2, 33, 33, 18, 90, 4]))))
    return run_capture(str(folder), [DrafterSpec.parse(f"mtp={folder}"),
                                     DrafterSpec.parse(f"mtp-postnorm={folder}?norm_output=true")],
                       str(probes), str(root / "mtp.drift"), depth=3, max_new_tokens=10, progress=False)


def test_mtp_kinds_styles_and_order():
    assert drafter_kind("mtp") == drafter_kind("ds-mtp") == drafter_kind("t:mtp") == "mtp"
    assert drafter_kind("mtp-postnorm") == drafter_kind("mtp+norm_output") == "mtp what-if"
    assert drafter_kind("eagle3+norm_output") == "what-if" and drafter_kind("smtpx") is None
    mtp, wif = KIND_STYLES["mtp"], KIND_STYLES["mtp what-if"]
    assert mtp["color"] == wif["color"] and mtp["dash"] != wif["dash"]
    others = {KIND_STYLES[k]["color"] for k in ("eagle3", "eagle3.1", "what-if")} | set(plots.PALETTE)
    assert mtp["color"] not in others  # no other drafter is drawn in the MTP heads' colour
    assert series_order(["my", "mtp-postnorm", "mtp", "eagle3"]) == ["eagle3", "mtp", "mtp-postnorm", "my"]


def test_every_figure_draws_an_mtp_trace_in_its_style(mtp_trace):
    view = build_view([load_trace(mtp_trace)])
    assert sorted(view.series) == ["mtp", "mtp-postnorm"]
    want = {"mtp": KIND_STYLES["mtp"]["color"], "mtp-postnorm": KIND_STYLES["mtp what-if"]["color"]}
    figs = {"depth": plots.depth_curves(view.per_depth), "rms": plots.feature_rms(view.per_depth),
            "acceptance": plots.acceptance_per_depth(view.per_depth),
            "bars": plots.acceptance_length_bars(view.summary), "heads": plots.head_heatmaps(view.head_means,
                                                                                            "sink_mass"),
            "context": plots.context_summary(view.by_context), "aux": plots.aux_rms(view.aux_summary)}
    for name, fig in figs.items():
        lines = [t for t in fig.data if t.name in want]
        assert lines or fig.layout.annotations, name  # heatmaps name their panels instead
        for t in lines:
            color = getattr(getattr(t, "line", None), "color", None) or getattr(getattr(t, "marker", None),
                                                                                  "color", None)
            if t.type != "heatmap":  # a heatmap's colours are its values' scale
                assert color == want[t.name], (name, t.name, color)
        seen = list(dict.fromkeys(t.name for t in lines))
        assert seen == [s for s in ["mtp", "mtp-postnorm"] if s in seen], (name, seen)
    dashes = {t.name: t.line.dash for t in figs["depth"].data if t.name in want and t.line.dash}
    assert dashes.get("mtp-postnorm") == "dash" and dashes.get("mtp", "solid") == "solid"


def test_dashboard_pages_render_an_mtp_trace(mtp_trace, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(sys, "argv", [str(APP), str(mtp_trace)])
    at = AppTest.from_file(str(APP), default_timeout=1800)
    at.run()
    assert not at.exception and not at.error
    assert sorted(at.dataframe[0].value["series"]) == ["mtp", "mtp-postnorm"]
    for page in ("depth", "heads", "context", "magnitudes", "rejection"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, at.exception)
        assert at.get("plotly_chart"), page
