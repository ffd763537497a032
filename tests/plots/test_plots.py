"""drifttool.plots on fixture traces: pure figure builders (no Streamlit), one trace per series, shared scales."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("plotly")
from drifttool import plots  # noqa: E402
from drifttool.analysis.views import Filters, build_view, load_trace  # noqa: E402


@pytest.fixture(scope="module")
def view(dash_traces):
    return build_view([load_trace(dash_traces["a"]), load_trace(dash_traces["b"])])


def _names(fig) -> set[str]:
    return {t.name for t in fig.data if t.name and "CI" not in t.name and "(n <" not in t.name}


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
    assert fig.layout.xaxis.tickformat == "d"  # slot 200, not "2e+2"
    long = np.full((4, 530), 1 / 530, np.float32)
    wide = plots.attention_row_heatmap(long, list(range(530)), 527, [0])
    assert tuple(wide.layout.xaxis.range) == (530 - 128 - 0.5, 529.5)  # opens on the newest slots, drafts readable
    assert plots.attention_row_heatmap(row, slots, ctx, sinks).layout.xaxis.range is None  # a short row: whole


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


# --- one colour per drafter (shared by every builder), sample sizes, axes ---------------------------------------

def _legend_colours(fig) -> dict[str, str]:
    """series name -> colour of its legend entry (line colour for scatter, marker colour for bars)."""
    out = {}
    for t in fig.data:
        if t.showlegend is False or not t.name or t.type == "heatmap":
            continue
        c = t.line.color if t.type == "scatter" else t.marker.color
        assert out.setdefault(t.name, c) == c, (t.name, out[t.name], c)
    return out


def _per_depth(series, depths=range(1, 9), **cols) -> pd.DataFrame:
    rows = []
    for s in series:
        for d in depths:
            r = {"series": s, "depth": d, "n_rounds": 200, "n_reached": 200, "n_prompts": 10}
            r.update({k: (v(s, d) if callable(v) else v) for k, v in cols.items()})
            rows.append(r)
    return pd.DataFrame(rows)


def test_each_drafter_has_one_fixed_style_whatever_the_order_and_chart(view):
    kinds = {"e3": "eagle3", "e31": "eagle3.1", "e3post": "what-if", "eagle3": "eagle3", "eagle3.1": "eagle3.1",
             "eagle3+norm_output": "what-if", "sink-long_code:eagle3.1": "eagle3.1", "EAGLE-3.1": "eagle3.1",
             "eagle31": "eagle3.1", "my_drafter": None}
    assert {k: plots.drafter_kind(k) for k in kinds} == kinds
    assert len({plots.KIND_STYLES[k]["color"] for k in plots.KIND_STYLES}) == 4  # MTP and its what-if share one
    assert plots.KIND_STYLES["what-if"]["dash"] != plots.KIND_STYLES["eagle3"]["dash"]
    # the same drafter keeps its colour across charts, series orders and traces
    fwd = plots.series_colors(["e3", "e31", "e3post"])
    rev = plots.series_colors(["e3post", "e31", "e3"])
    assert fwd == rev and len(set(fwd.values())) == 3
    assert plots.series_colors(["b:eagle3", "a:eagle3"])["b:eagle3"] == fwd["e3"]
    assert plots.series_style("zzz") == plots.series_style("zzz")  # hash of the name, not the order
    want = {s: plots.series_style(s)["color"] for s in view.series}
    figs = [plots.depth_curves(view.per_depth), plots.feature_rms(view.per_depth),
            plots.acceptance_per_depth(view.per_depth), plots.acceptance_length_bars(view.summary),
            plots.context_summary(view.by_context), plots.aux_rms(view.aux_summary),
            plots.massive_flags(view.massive_by_depth, view.aux_summary),
            plots.predictor_curves(view.predictors(), min_n=1), plots.predictor_correlations(view.predictors(), min_n=1)]
    # a chart drawn from the rows in another order still gives every drafter its colour
    figs.append(plots.depth_curves(view.per_depth.iloc[::-1]))
    for fig in figs:
        got = _legend_colours(fig)
        assert got and got == {k: want[k] for k in got}, fig.layout.title.text


def test_several_traces_keep_drafter_colours_and_differ_by_marker():
    s = ["t1:eagle3", "t1:eagle3.1", "t2:eagle3", "t2:eagle3.1"]
    st = plots.series_styles(s)
    assert st["t1:eagle3"]["color"] == st["t2:eagle3"]["color"] != st["t1:eagle3.1"]["color"]
    assert st["t1:eagle3"]["symbol"] != st["t2:eagle3"]["symbol"]
    summ = pd.DataFrame({"series": s, "mean_acceptance_length": [2.0, 2.5, 1.8, 2.2], "al_lo": 1.5, "al_hi": 3.0})
    fig = plots.acceptance_length_bars(summ)  # grouped by trace, one bar colour per drafter
    assert [t.name for t in fig.data] == ["eagle3", "eagle3.1"] and list(fig.data[0].x) == ["t1", "t2"]
    assert fig.data[0].marker.color == plots.KIND_STYLES["eagle3"]["color"]


def test_small_n_depths_are_drawn_apart_and_hidden_from_correlations():
    pdp = _per_depth(["eagle3"], acceptance_rate=0.5, n_alpha=lambda s, d: 1.0 if d >= 7 else 0.6)
    pdp.loc[pdp.depth >= 7, "n_reached"] = 4
    fig = plots.acceptance_per_depth(pdp)
    main = [t for t in fig.data if t.name == "eagle3" and t.xaxis == "x2"][0]
    small = [t for t in fig.data if t.name.startswith("eagle3 (n <") and t.xaxis == "x2"][0]
    assert list(main.x) == [1, 2, 3, 4, 5, 6] and list(small.x) == [7, 8]
    assert small.mode == "markers" and small.marker.line.color == plots.SMALL_N_COLOR
    assert any("fewer than" in (a.text or "") for a in fig.layout.annotations)
    pred = pd.DataFrame([{"series": "eagle3", "depth": d, "metric": "self_mass", "bin": b, "lo": 0, "hi": 1,
                          "acceptance": 0.5, "n": 50 if d < 6 else 2, "spearman": -0.77} for d in (1, 6) for b in (0, 1)])
    rho = plots.correlation_table(pred)
    assert rho.set_index("depth")["spearman"].to_dict()[1] == pytest.approx(-0.77)
    assert np.isnan(rho.set_index("depth")["spearman"][6]) and rho.set_index("depth")["n"][6] == 4
    ys = [y for t in plots.predictor_correlations(pred).data for y in t.y]
    assert ys[0] == pytest.approx(-0.77) and np.isnan(ys[1])


def test_sink_axis_shows_a_2x_change_at_small_values_and_unit_view_is_a_toggle():
    pdp = _per_depth(["eagle3"], sink_mass=lambda s, d: 0.004 + (0.006 * (d - 1) / 7), self_mass=0.3,
                     prompt_mass=0.6)
    fig = plots.depth_curves(pdp)
    ax = fig.layout.yaxis
    assert ax.type == "log"
    lo, hi = ax.range
    frac = (np.log10(0.010) - np.log10(0.004)) / (hi - lo)
    assert frac > 0.3  # the 0.004 -> 0.010 change spans a third of the panel or more (on 0-1: under 1%)
    assert fig.layout.yaxis2.type != "log" and fig.layout.yaxis2.range is None  # self mass auto-ranged
    unit = plots.depth_curves(pdp, scale="unit")
    assert unit.layout.yaxis.type != "log" and list(unit.layout.yaxis.range) == [0, 1]
    with pytest.raises(ValueError):
        plots.depth_curves(pdp, scale="bogus")


def test_empty_massive_panels_say_none_flagged():
    dep = pd.DataFrame({"series": ["eagle3"] * 2, "depth": [1, 2], "massive": [0.0, 0.0]})
    aux = pd.DataFrame({"series": ["eagle3"], "layer_id": [3], "massive": [0.25]})
    texts = [a.text for a in plots.massive_flags(dep, aux).layout.annotations]
    assert texts.count(plots.NONE_FLAGGED) == 1
    both = plots.massive_flags(dep, aux.assign(massive=0.0)).layout.annotations
    assert [a.text for a in both].count(plots.NONE_FLAGGED) == 2
    assert plots.NONE_FLAGGED not in [a.text for a in plots.massive_flags(dep.assign(massive=0.5), aux).layout.annotations]


def test_aux_rms_panels_both_label_one_log_scale_with_room_above_every_bar():
    aux = pd.DataFrame({"series": ["eagle3", "eagle3", "eagle3.1", "eagle3.1"], "chunk": [0, 2, 0, 2],
                        "layer_id": [2, 27, 2, 27], "rms_before": [2.8, 22.6, 2.8, 22.6],
                        "rms_after": [2.8, 22.6, 0.97, 1.0], "massive": 0.0, "rounds": 10})
    fig = plots.aux_rms(aux)
    y1, y2 = fig.layout.yaxis, fig.layout.yaxis2
    assert y1.type == "log" and y2.type == "log" and y2.showticklabels is not False  # "after" panel labelled
    assert y1.tickformat == ".2~g"  # full labels: 20 reads "20", not a minor-tick "2"
    lo, hi = y1.range
    assert lo < np.log10(0.97) and hi > np.log10(22.6) + 0.05  # the layer-27 bar is not clipped


def test_sink_retention_of_near_zero_masses_is_not_a_number():
    from drifttool.analysis.compare import ratio

    assert np.isnan(ratio(0.00005, 0.00000004))  # printed 1254 before
    assert ratio(0.2, 0.4) == pytest.approx(0.5)
    assert np.isnan(ratio(float("nan"), 0.4))


def test_many_series_wrap_into_a_grid_with_one_axis_title_per_column():
    hm = pd.DataFrame([{"series": f"t{i}:eagle3", "depth": d, "head": h, "sink_mass": 0.1}
                       for i in range(8) for d in (1, 2) for h in range(4)])
    fig = plots.head_heatmaps(hm)
    axes = [k for k in fig.layout if k.startswith("xaxis") and fig.layout[k].visible is not False]
    titles = [fig.layout[k].title.text for k in axes if fig.layout[k].title.text]
    assert len(axes) == 8 and titles == ["head"] * 3  # not "headheadhead..." under 8 squeezed panels
    assert fig.layout.height >= 3 * 250


def test_several_traces_get_one_panel_each_with_one_line_per_drafter():
    series = [f"t{i}:{d}" for i in range(5) for d in ("eagle3", "eagle3.1", "eagle3+norm_output")]
    pdp = _per_depth(series, self_mass=lambda s, d: 0.1 * d)
    fig = plots.metric_by_trace(pdp, "self_mass")
    assert [a.text for a in fig.layout.annotations][:5] == [f"t{i}" for i in range(5)]
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(lines) == 15 and {t.name for t in lines} == {"eagle3", "eagle3.1", "eagle3+norm_output"}
    assert sum(t.showlegend is not False for t in lines) == 3  # one legend entry per drafter, not per series
    assert {t.line.color for t in lines if t.name == "eagle3.1"} == {plots.KIND_STYLES["eagle3.1"]["color"]}
    assert plots.grid(5, 4) == (2, 4) and fig.layout.height >= 2 * 250


def test_tree_figures_keep_labels_inside_and_use_the_drafter_colours():
    nodes = pd.DataFrame({"node": [1, 2, 3, 4], "parent": [0, 0, 1, 1], "depth": [1, 1, 2, 2], "rank": [0, 1, 0, 1],
                          "draft_id": [5, 6, 7, 8], "target_id": [5, 9, 7, 7], "score": 0.5, "self_mass": 0.1,
                          "sink_mass": 0.2, "entropy": 1.0, "accepted": [True, False, True, False],
                          "main_path": [True, False, True, False]})
    words = {5: "def", 6: "\n    return", 7: "extraordinarily_long_name", 8: "x"}
    fig = plots.tree_round_figure(nodes, token_text=words.get)
    labels = list(fig.data[-1].text)
    assert all(len(t) <= 8 for t in labels) and labels[0] == "def" and labels[2].endswith("\u2026")
    assert "\n" not in labels[1]  # a newline token is drawn as a visible mark, not a line break
    lo, hi = fig.layout.xaxis.range
    assert lo < 0 and hi > 2.5  # room for the root's label on the left, the deepest labels on the right
    assert fig.layout.height >= 36 * 3  # three leaves, one label line each
    tab = pd.DataFrame([{"trace": "t", "drafter": d, "branch": b, "depth": k, "self_mass": 0.1, "self_mass_lo": 0.09,
                         "self_mass_hi": 0.12}
                        for d in ("eagle3+norm_output", "eagle3.1", "eagle3") for b in ("main path", "side branches")
                        for k in (1, 2)])
    curves = plots.tree_depth_curves(tab)
    colours = plots.series_colors(["eagle3", "eagle3.1", "eagle3+norm_output"])
    assert [t.name.split("/")[1].split(" ")[0] for t in curves.data][::2] == ["eagle3", "eagle3.1",
                                                                                "eagle3+norm_output"]
    for t in curves.data:
        assert t.line.color == colours[t.name.split("/")[1].split(" \u00b7 ")[0]]
        assert list(t.error_y.array) == pytest.approx([0.02, 0.02]) and list(t.error_y.arrayminus) == pytest.approx(
            [0.01, 0.01])  # the bootstrap interval is not symmetric


def test_slot_colours_stay_apart_from_every_drafter_colour():
    """The 'self' slot colour (where heads look) is not mistaken for a drafter: far from each drafter colour."""
    from drifttool.plots.heads import SLOT_COLORS
    from drifttool.styles import KIND_STYLES, PALETTE

    def rgb(h: str) -> tuple[int, ...]:
        return tuple(int(h.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))

    drafters = {rgb(s["color"]) for s in KIND_STYLES.values()} | {rgb(c) for c in PALETTE}
    self_c = rgb(SLOT_COLORS["self"])
    assert min(sum((a - b) ** 2 for a, b in zip(self_c, d)) ** 0.5 for d in drafters) > 60


def test_rejection_correlations_at_one_depth_are_bars_with_their_values():
    """The depth filter at 1 left one marker per series on a -1..1 axis; one depth draws one labelled bar each."""
    pred = pd.DataFrame([{"series": s, "depth": 1, "metric": m, "bin": b, "lo": 0, "hi": 1, "acceptance": 0.5,
                          "n": 50, "spearman": r} for s, r in (("t:eagle3", -0.4), ("t:eagle3.1", 0.25))
                         for m in ("self_mass", "rms_in") for b in (0, 1)])
    fig = plots.predictor_correlations(pred)
    assert {t.type for t in fig.data} == {"bar"} and len(fig.data) == 4
    assert [t.text[0] for t in fig.data[:2]] == ["-0.40", "0.25"] and list(fig.data[0].x) == ["eagle3"]
    assert fig.layout.xaxis.title.text == "depth 1"
