"""The Streamlit dashboard under streamlit.testing: every page renders on fixture traces without an
exception, with the expected charts and tables for every series; bad traces become st.error lines."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard" / "app.py"
SERIES = ["e3", "e31", "e3post"]
# page file -> (minimum plotly charts, minimum dataframes)
PAGES = {"depth": (5, 1), "heads": (2, 1), "context": (2, 1), "drilldown": (1, 1), "magnitudes": (3, 1),
         "rejection": (2, 1)}


def _app(monkeypatch, *traces: Path) -> AppTest:
    monkeypatch.setattr(sys, "argv", [str(APP), *map(str, traces)])
    at = AppTest.from_file(str(APP), default_timeout=1800)
    at.argv = list(sys.argv)  # the app reads sys.argv at every run: a shared AppTest must run with its own
    at.run()
    return at


@pytest.fixture(autouse=True)
def _shared_apps_run_with_their_own_argv(request, monkeypatch):
    """The module's shared AppTests (app_run, default_app) each ran first under their own command line; a test
    using one reruns it, so it gets that command line back whatever fixture set sys.argv last (in random test
    order the no-argument app's would otherwise load the sample traces into the two-trace app)."""
    for name in ("app_run", "default_app"):
        if name in request.fixturenames:
            shared = request.getfixturevalue(name)
            monkeypatch.setattr(sys, "argv", (shared[0] if isinstance(shared, tuple) else shared).argv)


def _chart_series(at: AppTest) -> set[str]:
    names = set()
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        names |= {t.get("name") for t in spec["data"] if t.get("name")}
    return names


@pytest.fixture(scope="module")
def app_run(dash_traces, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        at = _app(mp, dash_traces["a"], dash_traces["b"])
        results = {"overview": (at, at.get("plotly_chart"), list(at.dataframe))}
        for page in PAGES:
            at.switch_page(f"app_pages/{page}.py").run()
            results[page] = (at, list(at.get("plotly_chart")), list(at.dataframe), list(at.exception),
                             _chart_series(at))
        yield at, results
    finally:
        mp.undo()


def test_overview_lists_every_series(app_run):
    at, _ = app_run
    at.switch_page("app_pages/overview.py").run()
    assert not at.exception
    assert not at.error
    frames = [f.value for f in at.dataframe]
    glance = frames[0]  # the headline first: the verdict, acceptance with its CI, the ratios to 1 behind the verdict
    assert sorted(glance["series"]) == sorted(SERIES)
    assert {"verdict", "AL [95% CI]", "sink lift d1"} <= set(glance.columns)
    assert any(c.startswith("own/recent d") for c in glance.columns) and any(c.startswith("RMS d") for c in glance)
    # a verdict word, drift with the depths its curve detects it at (Holm over depths): "drift d2-3"
    assert all(v in {"drift", "no drift", "not established", "uniform"} or re.fullmatch(r"drift d[0-9\u2013, ]+", v)
               for v in glance["verdict"]), set(glance["verdict"])
    assert not glance["sink lift d1"].astype(str).str.fullmatch(r"0\.000").any()  # ratios with 2 decimals, no raw mass
    info = next(f for f in frames if "flags" in f.columns)  # full identity, under Details
    assert sorted(info["series"]) == sorted(SERIES)
    assert {"layout", "flags", "overrides", "variant"} <= set(info.columns)
    assert "norm_output" in info.set_index("series").loc["e3post", "overrides"]
    summary = next(f for f in frames if "mean_acceptance_length" in f.columns and "al_lo" in f.columns)
    assert sorted(summary["series"]) == sorted(SERIES)
    assert {"mean_acceptance_length", "al_lo", "al_hi", "self_lift", "self_lift_trend", "self_lift_trend_lo",
            "sink_lift_d1"} <= set(summary.columns)
    assert len(at.get("plotly_chart")) == 0  # the first page draws without plotly (its bars are in the table)
    assert any(b.label.startswith("Download table") for b in at.get("download_button"))


@pytest.mark.parametrize("page", list(PAGES))
def test_page_renders(app_run, page):
    _, results = app_run
    _, charts, frames, exceptions, names = results[page]
    assert not exceptions, [e.message for e in exceptions]
    n_charts, n_frames = PAGES[page]
    assert len(charts) >= n_charts
    assert len(frames) >= n_frames
    if page in ("depth", "rejection", "magnitudes"):
        assert set(SERIES) <= names, names


def test_filters_apply_across_pages(app_run):
    at, _ = app_run
    at.switch_page("app_pages/overview.py").run()  # the shared app may be left on a page that hides the filters
    at.sidebar.multiselect(key="flt_tags").set_value(["chat"])
    at.sidebar.slider(key="flt_depth").set_value((2, 3))
    at.switch_page("app_pages/depth.py").run()
    assert not at.exception
    per_depth = at.dataframe[0].value
    assert set(per_depth["depth"]) == {2, 3}
    at.switch_page("app_pages/overview.py").run()
    prompts = next(f.value for f in at.dataframe if "prompt_id" in f.value.columns)  # the Prompts table
    assert set(prompts["prompt_id"]) == {"p1", "p3", "p5"}  # the prompts tagged chat
    assert at.session_state["flt_tags"] == ["chat"]


def test_pages_hide_the_filters_they_ignore_and_keep_their_values(monkeypatch, dash_traces):
    """Heads only where a page reads heads, no depth range on the drill-down (one round), no filter on Draft trees
    (it reads its own traces); a value set on one page survives the pages that hide its filter."""
    at = _app(monkeypatch, dash_traces["a"], dash_traces["b"])

    def keys():
        return {w.key for w in [*at.sidebar.multiselect, *at.sidebar.slider]}

    assert {"flt_prompts", "flt_tags", "flt_depth"} <= keys() and "flt_heads" not in keys()  # Overview
    at.sidebar.slider(key="flt_depth").set_value((2, 3))
    at.switch_page("app_pages/heads.py").run()
    assert "flt_heads" in keys() and not at.exception
    at.sidebar.multiselect(key="flt_heads").set_value([0])
    at.switch_page("app_pages/drilldown.py").run()
    assert "flt_depth" not in keys() and "flt_heads" not in keys() and "flt_tags" in keys()
    at.switch_page("app_pages/trees.py").run()
    assert not keys() & {"flt_prompts", "flt_tags", "flt_depth", "flt_heads"} and not at.exception
    at.switch_page("app_pages/depth.py").run()
    assert at.sidebar.slider(key="flt_depth").value == (2, 3) and "flt_heads" not in keys()
    assert set(at.dataframe[0].value["depth"]) == {2, 3}
    at.switch_page("app_pages/heads.py").run()
    assert at.sidebar.multiselect(key="flt_heads").value == [0] and not at.exception


def test_bad_traces_show_errors_not_exceptions(monkeypatch, dash_traces):
    at = _app(monkeypatch, dash_traces["bad"], dash_traces["missing"], dash_traces["a"])
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 2
    assert any("manifest.json" in e and "not valid JSON" in e for e in errors)
    assert any("not found" in e for e in errors)
    assert sorted(at.dataframe[0].value["series"]) == ["e3", "e31"]


def test_no_loadable_trace_is_a_message(monkeypatch, dash_traces):
    at = _app(monkeypatch, dash_traces["bad"])
    assert not at.exception
    assert len(at.error) == 1
    assert at.info and "No trace to show" in at.info[0].value


def test_many_traces_open_on_the_first_with_a_selector(monkeypatch, dash_traces, tmp_path):
    """Four traces x 2 drafters (8 series > 6): the pages show the first trace only; the sidebar adds others."""
    import shutil

    copies = []
    for i in range(4):
        shutil.copytree(dash_traces["a"], tmp_path / f"t{i}.drift")
        copies.append(tmp_path / f"t{i}.drift")
    at = _app(monkeypatch, *copies)
    assert not at.exception and not at.error
    sel = at.sidebar.multiselect(key="flt_traces")
    assert len(sel.options) == 4 and sel.value == [sel.options[0]] and sel.value[0] == "t0"
    assert sorted(at.dataframe[0].value["series"]) == ["e3", "e31"]
    sel.set_value(sel.options[:2]).run()
    assert not at.exception
    assert sorted(at.dataframe[0].value["series"]) == ["t0:e3", "t0:e31", "t1:e3", "t1:e31"]
    at.switch_page("app_pages/depth.py").run()
    assert not at.exception and len(at.get("plotly_chart")) >= 3
    assert _chart_series(at) >= {"t0:e3", "t1:e31"}
    at.sidebar.multiselect(key="flt_traces").set_value([]).run()
    assert not at.exception and any("No trace selected" in i.value for i in at.info)


def test_tree_traces_beside_chain_ones_go_to_the_draft_trees_page(monkeypatch, dash_traces):
    """The bundled tree trace sits beside chain traces in the default set: the per-depth pages' selector offers
    only the chain traces (a tree trace cannot be compared with them), the Draft trees page draws the tree."""
    tree = Path(__file__).resolve().parents[2] / "sample_traces" / "trees" / "smollm2-quick-tree.drift"
    if not tree.is_dir():
        pytest.skip(f"{tree} not in this checkout")
    at = _app(monkeypatch, dash_traces["a"], dash_traces["b"], tree)
    assert not at.exception and not at.error, [e.value for e in at.error]
    sel = at.sidebar.multiselect(key="flt_traces")
    assert len(sel.options) == 2 and not any("quick-tree" in o for o in sel.options), sel.options
    assert any("1 tree trace(s) loaded" in c.value for c in at.sidebar.caption)
    at.switch_page("app_pages/trees.py").run()
    assert not at.exception and len(at.get("plotly_chart")) >= 2
    assert at.selectbox(key="tree_trace").value == "smollm2-quick-tree"
    from drifttool.analysis.views import token_decoder
    from drifttool.trace.reader import read_trace

    decode = token_decoder(read_trace(tree))  # node labels are token text: the compact token table covers them
    ids = read_trace(tree).tree_nodes["draft_id"].unique()
    assert decode is not None and not [i for i in ids if decode(i) == f"<{int(i)}>"]


def test_default_selection_rule():
    from drifttool.dashboard import lib as dashlib

    assert dashlib.default_selection([3]) == [0]
    assert dashlib.default_selection([2, 1]) == [0, 1]  # a 2-trace comparison stays whole
    assert dashlib.default_selection([3] * 8) == [0]  # the 8 sample traces: one trace, 3 drafters
    assert dashlib.default_selection([]) == []
    # too many to show at once: the README's headline trace, wherever it sorts, not the alphabetically first
    paths = [str(dashlib.SAMPLES / f"smollm2-{s}.drift") for s in ("agent_traces", "doc_qa", "long_code")]
    assert dashlib.default_selection([3] * 3, paths) == [2]
    assert dashlib.default_selection([4] * 2, paths[:2]) == [0]  # not among them: the first


@pytest.fixture(scope="module")
def default_app():
    """`drifttool dashboard` with no argument: what a new user opens."""
    from drifttool.dashboard.lib import CHAT, HEADLINE

    if not HEADLINE.is_dir() or not any(CHAT.glob("*.drift")):
        pytest.skip("the README's sample traces (long code, chat) are not in this checkout")
    mp = pytest.MonkeyPatch()
    try:
        yield _app(mp)
    finally:
        mp.undo()


def test_no_argument_opens_on_the_readme_headline_with_the_chat_trace_offered(default_app):
    at = default_app
    at.switch_page("app_pages/overview.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sel = at.sidebar.multiselect(key="flt_traces")
    assert sel.value == ["long_code"], sel.value  # the names without their common 'smollm2-'
    assert "mt_chat" in sel.options, sel.options  # sample_traces/chat/
    assert all(len(o) <= 18 for o in sel.options), sel.options  # the sidebar's chip shows ~20 characters
    assert any("common 'smollm2-'" in c.value for c in at.sidebar.caption)
    assert any("smollm2-long_code (3 drafters)" in c.value for c in at.caption)  # named whole on the page
    assert all(s.startswith("eagle3") for s in at.dataframe[0].value["series"])


def test_drilldown_shows_token_text_as_the_notebook_does(default_app):
    from drifttool.analysis.views import token_decoder
    from drifttool.dashboard.lib import HEADLINE
    from drifttool.trace.reader import read_trace

    at = default_app
    at.switch_page("app_pages/drilldown.py").run()
    assert not at.exception and not at.error
    detail = next(f.value for f in at.dataframe if "draft_id" in f.value.columns)
    decode = token_decoder(read_trace(HEADLINE))  # the notebook's decoder (Trace.plot.attention_row)
    assert decode is not None
    for col in ("input_id", "draft_id", "target_id"):
        shown = [x for x in detail[col] if x]
        assert shown and all(isinstance(x, str) and x[0] in "'\"" for x in shown), (col, shown[:5])
    # it opens on the sampled round with the most accepted drafts (one that accepted nothing shows little)
    box = next(b for b in at.selectbox if b.label == "Sampled round")
    counts = [int(o.split("(")[1].split()[0]) for o in box.options]
    assert box.index == counts.index(max(counts)), (box.options, box.index)


def test_draft_trees_and_rejection_pages_print_words_not_dicts(default_app):
    at = default_app
    at.switch_page("app_pages/trees.py").run()
    assert not at.exception and not at.error
    caption = next(c.value for c in at.caption if c.value.startswith("tree:"))
    assert "{" not in caption and "dynamic:top_k=" in caption and "sink: position 0" in caption, caption
    at.switch_page("app_pages/rejection.py").run()
    assert not at.exception and [t.value for t in at.title] == ["What tracks rejection"]


def test_the_overview_is_served_at_its_own_path_too(default_app):
    """`/overview` opened "Page not found" (the default page lives at `/` only): a hidden page answers there.
    AppTest has no URL bar: the pages the app registered are read (the browser test opens the URL itself)."""
    from drifttool.dashboard.app import PAGES

    at = default_app
    at.switch_page("app_pages/overview.py").run()  # AppTest prefers the page whose url_path is the file's name
    assert not at.exception and [t.value for t in at.title] == ["Overview"]
    paths = sorted(i.get("url_pathname") for i in at._registered_pages.values())
    assert paths == sorted(["", *(u for _, _, u, _ in PAGES)]), paths  # `/` and `/overview` both


def test_the_interventions_page_reads_the_shipped_patch_traces(default_app):
    """The patch traces load beside the others (not into the per-depth pages' selection): the page states each
    intervention's answer, draws the per-depth figure and the table; the other pages keep their selection."""
    from drifttool.dashboard.lib import PATCH

    if not any(PATCH.glob("*.drift")):
        pytest.skip("no shipped patch trace in this checkout")
    at = default_app
    at.switch_page("app_pages/patching.py").run()
    assert not at.exception and not at.error and [t.value for t in at.title] == ["Interventions"]
    text = " ".join(m.value for m in at.markdown)
    assert "acceptance length" in text and "per group" in text and "groups)" in text
    assert len(at.get("plotly_chart")) >= 1 and len(at.dataframe) >= 1
    assert all("patch" not in str(k[0]) for k in at.session_state["trace_keys"])


def test_the_interventions_page_without_a_patch_trace_says_how_to_make_one(app_run):
    at = app_run[0] if isinstance(app_run, tuple) else app_run
    at.switch_page("app_pages/patching.py").run()
    assert not at.exception and any("drifttool patch" in i.value for i in at.info)
