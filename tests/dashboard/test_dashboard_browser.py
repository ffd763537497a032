"""The dashboard in a real headless browser: `drifttool dashboard` on a free local port, every page opened
in Debian's chromium through playwright, in two views: the default (no argument: every sample trace, the
sidebar showing the first) and a single trace. On every page: plotly charts rendered, no console errors, no
two titles of a chart overlapping (bounding boxes), each drafter drawn in one colour on every chart, and a
full-page screenshot. DRIFTTOOL_UPDATE_SCREENSHOT=1 copies the default view's screenshots to
docs/dashboard/ (and the Depth page of the single sample trace to docs/screenshot_depth.png). Malformed
traces are covered by the AppTest suite (test_dashboard_apptest.py)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from drifttool.dashboard.shots import keep_or_replace
from tests.support.capture import REPO, child_env

CHROMIUM = os.environ.get("DRIFTTOOL_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# (url path, page title, minimum plotly charts, minimum data grids drawn on that page; folded expanders draw none)
PAGES = [("", "Overview", 0, 2), ("depth", "Depth", 5, 0), ("heads", "Heads", 2, 0),
         ("context", "Context length", 2, 0), ("drilldown", "Prompt drill-down", 1, 0), ("magnitudes", "Magnitudes", 3, 0),
         ("rejection", "What tracks rejection", 2, 0)]
READY = """([title, n, f]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const titles = [...document.querySelectorAll('h1')].map(e => e.innerText.trim());
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(e => e.querySelector('.main-svg'));
  const grids = [...document.querySelectorAll('[data-testid="stDataFrame"]')].filter(e => e.querySelector('canvas'));
  return app && app.getAttribute('data-test-script-state') === 'notRunning' && titles.includes(title)
    && plots.length >= n && grids.length >= f && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0;
}"""


def _require_browser():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        why = "playwright-python is not installed (pip install playwright)"
    else:
        why = None if Path(CHROMIUM).is_file() else f"{CHROMIUM} missing (apt-get install chromium)"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"browser test must run in CI: {why}")
        pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 1800.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"dashboard not healthy after {timeout}s:\n{log.read_text()[-3000:]}")


SAMPLE = REPO / "sample_traces" / "smollm2-long_code.drift"
UPDATE = os.environ.get("DRIFTTOOL_UPDATE_SCREENSHOT") == "1"
# Every chart's title and subplot titles / annotations as boxes, and each legend series' colour.
BOXES = """() => [...document.querySelectorAll('.js-plotly-plot')].map(el => {
  const nodes = [...el.querySelectorAll('.infolayer .annotation, .infolayer .gtitle')];
  return nodes.map(a => { const r = a.getBoundingClientRect();
    return {text: a.textContent, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; })
    .filter(b => b.x1 > b.x0 && b.text.trim());
})"""
COLOURS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(el => (el.data || [])
  .filter(t => t.showlegend !== false && t.name && (t.type === 'scatter' || t.type === 'bar'))
  .map(t => [t.name, t.type === 'bar' ? (t.marker || {}).color : (t.line || {}).color]))"""


def overlaps(boxes: list[dict], tol: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of boxes whose intersection is wider and taller than `tol` pixels."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            w = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
            h = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if w > tol and h > tol:
                out.append((a["text"], b["text"]))
    return out


def drafter_colours(charts: list[list[list]]) -> dict[str, set]:
    """drafter (the part of a series label after 'trace:') -> every colour it is drawn in on the page."""
    got: dict[str, set] = {}
    for chart in charts:
        for name, colour in chart:
            if name.startswith("ctx ") or name in ("sink slots", "query slot") or not isinstance(colour, str):
                continue
            got.setdefault(name.rpartition(":")[2], set()).add(colour)
    return got


def test_overlap_and_colour_checks_catch_what_they_should():
    a = {"text": "a", "x0": 0, "y0": 0, "x1": 100, "y1": 20}
    assert overlaps([a, {**a, "text": "b", "x0": 50, "x1": 150}]) == [("a", "b")]
    assert overlaps([a, {**a, "text": "b", "x0": 100, "x1": 150}]) == []
    assert drafter_colours([[["t1:eagle3", "#1"]], [["t2:eagle3", "#2"], ["ctx 0-127", "#3"]]]) == {"eagle3": {"#1", "#2"}}


@pytest.fixture(scope="module", params=["default", "single"])
def server(request, dash_traces, tmp_path_factory):
    _require_browser()
    view = request.param
    if view == "default":
        if not any((REPO / "sample_traces").glob("*.drift")):
            pytest.skip("no sample_traces/*.drift in this checkout")
        traces = []  # what a new user sees: `drifttool dashboard` with no argument
    else:
        traces = [str(SAMPLE if SAMPLE.is_dir() else dash_traces["a"])]
    with _dashboard(traces, tmp_path_factory.mktemp("dashlog")) as url:
        yield view, url, traces


@contextlib.contextmanager
def _dashboard(traces: list[str], logdir: Path):
    """`drifttool dashboard TRACES` on a free port until healthy; yields its URL, stops it afterwards."""
    port = _free_port()
    log = logdir / "streamlit.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "drifttool.cli", "dashboard", *traces, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _visit_pages(page, view: str, url: str | None, traces, tmp_path, problems: list[str], seen: dict) -> dict:
    """Open every page (through the sidebar after the first), check it, screenshot it; returns render times."""
    timings = {}
    for path, title, n_charts, n_grids in PAGES:
        t0 = time.perf_counter()
        if not path and url:  # open the app once; then navigate like a user, through the sidebar
            page.goto(url, wait_until="domcontentloaded")
        else:
            page.get_by_test_id("stSidebarNavLink").filter(has_text=title).first.click()
            page.wait_for_url(re.compile(rf".*/{path}(\?.*)?$"))  # the view's state rides in the query string
        page.wait_for_function(READY, arg=[title, n_charts, n_grids], timeout=180_000)
        page.wait_for_timeout(300)  # plotly lays out annotations after the first paint
        timings[path or "overview"] = round(time.perf_counter() - t0, 2)
        assert page.locator("[data-testid='stException']").count() == 0, f"{view}: exception on page /{path}"
        assert page.locator("[data-testid='stAlertContentError']").count() == 0, f"{view}: error on page /{path}"
        if not path:  # the Overview answers the question at 1400 px: the verdict, sink lift, no table cut off
            text = page.locator("[data-testid='stMain']").inner_text()
            assert "In short" in text and "sink lift d1" in page.content(), f"{view}: overview lacks verdict / sink lift"
            # the drift verdict's words, in the answer and in the headline table
            assert re.search(r"(drift:|no drift:|drift not established:|uniform attention:)", text), \
                f"{view}: overview does not state a drift verdict"
            assert "own/recent" in page.content(), f"{view}: the headline table lacks the recency-matched ratio"
            # its first sentence is the answer in words: does EAGLE-3 drift, does EAGLE-3.1 change it
            first = text[text.index("The answer"):]
            assert re.search(r"The answer\s+Does \S*eagle3 drift\? fed-back RMS (grows|shrinks|stays flat)", first), \
                f"{view}: overview does not open with the answer: {first[:200]!r}"
            assert "drift score" not in text, f"{view}: the retired drift score is on the overview"
            chips = [c[0] for c in page.evaluate(CHIPS)]  # the names without their common start ('smollm2-')
            shown = [x.name.removesuffix(".drift") for x in (REPO / "sample_traces").glob("*.drift")
                     if x.name.removesuffix(".drift").removeprefix("smollm2-") in chips] if view == "default" else []
            assert shown or view != "default", chips
            assert all(f"{n} (" in text for n in shown), f"{view}: overview does not name {shown} whole"
        wide = page.evaluate(OVERFLOW)  # every page's default view fits 1400 px: no sideways scrolling
        problems += [f"{view} /{path}: scrolls sideways at 1400 px: {w}" for w in wide]
        charts_boxes, charts_colours = page.evaluate(BOXES), page.evaluate(COLOURS)
        seen["boxes"] += sum(map(len, charts_boxes))
        seen["colours"] += sum(map(len, charts_colours))
        for i, boxes in enumerate(charts_boxes):
            problems += [f"{view} /{path} chart {i}: titles overlap: {a!r} / {b!r}" for a, b in overlaps(boxes)]
        for drafter, cols in drafter_colours(charts_colours).items():
            if len(cols) > 1:
                problems.append(f"{view} /{path}: {drafter} drawn in {len(cols)} colours: {sorted(cols)}")
        if path == "heads":  # the 'self' slot kind is drawn in a colour no drafter has
            slots = {c for chart in charts_colours for n, c in chart if n == "self"}
            drafters = {c for chart in charts_colours for n, c in chart if "eagle" in n or "mtp" in n}
            if not slots or slots & drafters:
                problems.append(f"{view} /heads: self slot colour {sorted(slots)} vs drafters {sorted(drafters)}")
        shot = tmp_path / f"{view}_{path or 'overview'}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if UPDATE and view == "default":
            (REPO / "docs" / "dashboard").mkdir(parents=True, exist_ok=True)
            keep_or_replace(shot, REPO / "docs" / "dashboard" / f"{path or 'overview'}.png")
        if UPDATE and view == "single" and path == "depth" and traces == [str(SAMPLE)]:
            keep_or_replace(shot, REPO / "docs" / "screenshot_depth.png")  # the README screenshot
    return timings


def _visit_tree_page(page, tmp_path) -> None:
    """The Draft trees page on the bundled tree trace (sample_traces/trees/): one round's tree and the per-branch
    depth curves, each drafter in its own colour; the per-depth pages' selector does not offer the tree trace."""
    trees = sorted((REPO / "sample_traces" / "trees").glob("*.drift"))
    if not trees:
        pytest.skip("no sample_traces/trees/*.drift in this checkout")
    page.get_by_test_id("stSidebarNavLink").filter(has_text="Draft trees").first.click()
    page.wait_for_url(re.compile(r".*/trees(\?.*)?$"))
    page.wait_for_function(READY, arg=["Draft trees", 2, 0], timeout=180_000)
    assert page.locator("[data-testid='stException']").count() == 0
    assert trees[0].name.removesuffix(".drift") in page.locator("[data-testid='stMain']").inner_text()
    curves = page.evaluate(COLOURS)[-1]
    colour_of: dict[str, set] = {}
    for name, colour in curves:
        colour_of.setdefault(name.split("/")[-1].split(" \u00b7 ")[0], set()).add(colour)
    assert len(colour_of) >= 2 and all(len(c) == 1 for c in colour_of.values()), colour_of
    assert len({next(iter(c)) for c in colour_of.values()}) == len(colour_of), colour_of  # one colour per drafter
    shot = tmp_path / "default_trees.png"
    page.screenshot(path=str(shot), full_page=True)
    if UPDATE:
        keep_or_replace(shot, REPO / "docs" / "dashboard" / "trees.png")


def _visit_training_page(page, problems: list[str]) -> None:
    """Across training with no argument: the shipped checkpoint series drawn by default (it was an empty page),
    without sideways scrolling."""
    if not SERIES.is_dir():
        pytest.skip(f"{SERIES} not in this checkout")
    page.get_by_test_id("stSidebarNavLink").filter(has_text="Across training").first.click()
    page.wait_for_url(re.compile(r".*/training(\?.*)?$"))
    page.wait_for_function(READY, arg=["Across training", 1, 0], timeout=180_000)
    assert page.locator("[data-testid='stException']").count() == 0
    lines = [n for chart in page.evaluate(COLOURS) for n, _ in chart]
    assert {"eagle3", "eagle3.1"} <= set(lines), lines
    problems += [f"default /training: scrolls sideways at 1400 px: {w}" for w in page.evaluate(OVERFLOW)]


def _visit_patch_page(page, tmp_path, problems: list[str]) -> None:
    """Interventions with no argument: the shipped patch traces' answers and per-depth figure (the first one)."""
    if not any((REPO / "sample_traces" / "patch").glob("*.drift")):
        pytest.skip("no sample_traces/patch/*.drift in this checkout")
    page.get_by_test_id("stSidebarNavLink").filter(has_text="Interventions").first.click()
    page.wait_for_url(re.compile(r".*/interventions(\?.*)?$"))
    page.wait_for_function(READY, arg=["Interventions", 1, 0], timeout=180_000)
    page.wait_for_timeout(300)
    assert page.locator("[data-testid='stException']").count() == 0
    assert "acceptance length" in page.locator("[data-testid='stMain']").inner_text()
    problems += [f"default /interventions: scrolls sideways at 1400 px: {w}" for w in page.evaluate(OVERFLOW)]
    shot = tmp_path / "default_patching.png"
    page.screenshot(path=str(shot), full_page=True)
    if UPDATE:
        keep_or_replace(shot, REPO / "docs" / "dashboard" / "patching.png")


def _select_all_traces(page) -> int:
    """Add every trace in the sidebar's 'Traces shown' multiselect, as a user would; returns how many."""
    box = page.locator("[data-testid='stSidebar'] [data-testid='stMultiSelect']").first
    for _ in range(50):
        box.locator("input").click()
        opts = page.get_by_role("option")
        if opts.count() == 0 or "No results" in opts.first.inner_text():
            page.keyboard.press("Escape")
            break
        opts.first.click()
        page.wait_for_function(READY_ANY, timeout=180_000)
    return len(page.evaluate(CHIPS))


# the visible (not folded) data grids whose content is wider than their box, and the page's own width
OVERFLOW = """() => { const out = [];
  if (document.documentElement.scrollWidth > window.innerWidth + 1) out.push('page ' + document.documentElement.scrollWidth);
  document.querySelectorAll('[data-testid="stDataFrame"]').forEach((g, i) => {
    if (!g.offsetParent) return;
    const sc = g.querySelector('.dvn-scroller');
    if (sc && sc.scrollWidth > sc.clientWidth + 2) out.push('grid ' + i + ': ' + sc.scrollWidth + ' > ' + sc.clientWidth);
  });
  return out; }"""


READY_ANY = """() => { const app = document.querySelector('[data-testid="stApp"]');
  return app && app.getAttribute('data-test-script-state') === 'notRunning'; }"""


@contextlib.contextmanager
def _chromium():
    """A headless Chromium (Debian's, through playwright), closed on any exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def test_every_page_renders_in_chromium(server, tmp_path):
    view, url, traces = server
    errors: list[str] = []
    problems: list[str] = []
    timings = {}
    seen = {"boxes": 0, "colours": 0}
    with _chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1700})
        page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        timings[view] = _visit_pages(page, view, url, traces, tmp_path, problems, seen)
        if view == "default":  # one trace (3 drafters) shown by default, the others one click away
            picked = page.evaluate(CHIPS)
            assert len(picked) == 1, picked
            n = _select_all_traces(page)  # ... and every page still reads with all of them at once
            assert n == len(list((REPO / "sample_traces").glob("*.drift"))) + len(CHAT) > 1, n
            timings["all"] = _visit_pages(page, "all", None, traces, tmp_path, problems, seen)
            _visit_tree_page(page, tmp_path)
            _visit_training_page(page, problems)
            _visit_patch_page(page, tmp_path, problems)
    print("render times (s):", timings)
    assert not errors, errors
    assert seen["boxes"] > 20 and seen["colours"] > 20, seen  # the checks saw the charts' titles and series
    assert not problems, "\n".join(problems)


SERIES = REPO / "sample_traces" / "training" / "smollm2-sink-s0-series.drift"
CHAT = sorted((REPO / "sample_traces" / "chat").glob("*.drift"))  # the README's chat trace, loaded by default
# each chip of the sidebar's trace selector: its full label, and whether its text is cut (wider than its box)
CHIPS = """() => [...document.querySelectorAll('[data-testid="stSidebar"] [data-testid="stMultiSelect"] [data-tag]')]
  .map(t => { const e = t.querySelector('[title]') || t; return [e.title || e.innerText, e.scrollWidth > e.clientWidth + 1]; })"""


def test_default_view_opens_on_the_headline_whole_and_overview_has_its_path(server):
    """No argument: the README's headline trace is the one shown (not the alphabetically first), its chip and every
    other trace's chip show the name whole, and `/overview` opens the Overview (it was "Page not found")."""
    view, url, _ = server
    if view != "default":
        pytest.skip("the default view's check")

    with _chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.goto(f"{url}/overview", wait_until="domcontentloaded")
        page.wait_for_function(READY, arg=["Overview", 0, 1], timeout=180_000)
        assert "Page not found" not in page.content()
        chips = page.evaluate(CHIPS)
        assert [c[0] for c in chips] == [SAMPLE.name.removesuffix(".drift").removeprefix("smollm2-")], chips
        n = _select_all_traces(page)
        assert n == len(list((REPO / "sample_traces").glob("*.drift"))) + len(CHAT), n
        chips = page.evaluate(CHIPS)
        assert "mt_chat" in [c[0] for c in chips] or not CHAT, chips
        assert not [c[0] for c in chips if c[1]], f"trace names cut in the sidebar: {chips}"


def test_training_page_renders_the_checkpoint_series(tmp_path):
    """The Across training page on the bundled checkpoint-series trace: four charts, one line per variant."""
    _require_browser()
    if not SERIES.is_dir():
        pytest.skip(f"{SERIES} not in this checkout")

    with _dashboard([str(SERIES)], tmp_path) as url:
        with _chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1700})
            page.goto(f"{url}/training", wait_until="domcontentloaded")
            page.wait_for_function(READY, arg=["Across training", 4, 0], timeout=180_000)
            assert page.locator("[data-testid='stException']").count() == 0
            lines = page.evaluate(COLOURS)
            assert all({n for n, _ in chart} == {"eagle3", "eagle3.1"} for chart in lines), lines
            page.screenshot(path=str(tmp_path / "training.png"), full_page=True)
            if UPDATE:
                keep_or_replace(tmp_path / "training.png", REPO / "docs" / "dashboard" / "training.png")


SLIDER_VALUES = """() => [...document.querySelectorAll('[data-testid="stSidebar"] [data-testid="stSliderThumbValue"]')]
  .map(e => e.innerText.trim())"""
PICKED = """() => document.querySelector('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').innerText"""


def test_a_link_to_a_view_opens_the_same_view_in_a_new_browser(dash_traces, tmp_path):
    """Open a page with a link (trace b, depths 2-3), move to another page through the sidebar, copy the URL the
    app wrote, open it in a fresh browser context (no session state): same page, same trace, same depth range."""
    _require_browser()

    traces = [str(dash_traces["a"]), str(dash_traces["b"])]
    with _dashboard(traces, tmp_path) as url:
        with _chromium() as browser:
            first = browser.new_page(viewport={"width": 1400, "height": 1200})
            first.goto(f"{url}/depth?traces=b&depth=2-3", wait_until="domcontentloaded")
            first.wait_for_function(READY, arg=["Depth", 4, 0], timeout=180_000)
            picked = first.evaluate(CHIPS)  # b alone, not a
            assert [c[0] for c in picked] == ["b"], picked
            assert first.evaluate(SLIDER_VALUES) == ["2", "3"]
            first.get_by_test_id("stSidebarNavLink").filter(has_text="Heads").first.click()
            first.wait_for_url(re.compile(r".*/heads\?.*"))
            first.wait_for_function(READY, arg=["Heads", 2, 0], timeout=180_000)
            link = first.url
            assert "traces=b" in link and "depth=2-3" in link, link
            picked_first = first.evaluate(PICKED)
            fresh = browser.new_context(viewport={"width": 1400, "height": 1200}).new_page()
            fresh.goto(link, wait_until="domcontentloaded")
            fresh.wait_for_function(READY, arg=["Heads", 2, 0], timeout=180_000)
            assert fresh.evaluate(PICKED) == picked_first
            assert fresh.evaluate(SLIDER_VALUES) == ["2", "3"]
            assert fresh.locator("[data-testid='stException']").count() == 0
