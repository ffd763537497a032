"""The dashboard in a real headless browser: `drifttool dashboard` on a free local port, every page opened
in Debian's chromium through playwright, plotly charts rendered, no console errors, a screenshot of the
Depth page (written to docs/ only with DRIFTTOOL_UPDATE_SCREENSHOT=1). Malformed traces are covered by the
AppTest suite (test_dashboard_apptest.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _capture_fixtures import REPO, child_env

CHROMIUM = os.environ.get("DRIFTTOOL_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# (url path, page title, minimum plotly charts on that page)
PAGES = [("", "Overview", 1), ("depth", "Depth", 3), ("heads", "Heads", 2), ("context", "Context length", 2),
         ("drilldown", "Prompt drill-down", 1), ("magnitudes", "Magnitudes", 3),
         ("rejection", "What predicts rejection", 2)]
READY = """([title, n]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const titles = [...document.querySelectorAll('h1')].map(e => e.innerText.trim());
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(e => e.querySelector('.main-svg'));
  return app && app.getAttribute('data-test-script-state') === 'notRunning' && titles.includes(title)
    && plots.length >= n && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0;
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


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
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


@pytest.fixture(scope="module")
def server(dash_traces, tmp_path_factory):
    _require_browser()
    port = _free_port()
    log = tmp_path_factory.mktemp("dashlog") / "streamlit.log"
    traces = [str(dash_traces["a"]), str(dash_traces["b"])]
    sample = REPO / "sample_traces" / "sink-long_code.drift"
    if os.environ.get("DRIFTTOOL_UPDATE_SCREENSHOT") == "1" and sample.is_dir():
        traces = [str(sample)]  # the README screenshot shows the bundled models' real result
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


def test_every_page_renders_in_chromium(server, tmp_path):
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    timings = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1700})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            for path, title, n_charts in PAGES:
                t0 = time.perf_counter()
                if not path:  # open the app once; then navigate like a user, through the sidebar
                    page.goto(server, wait_until="domcontentloaded")
                else:
                    page.get_by_test_id("stSidebarNavLink").filter(has_text=title).first.click()
                    page.wait_for_url(f"**/{path}")
                page.wait_for_function(READY, arg=[title, n_charts], timeout=120_000)
                timings[path or "overview"] = time.perf_counter() - t0
                assert page.locator("[data-testid='stException']").count() == 0, f"exception on page /{path}"
                assert page.locator("[data-testid='stAlertContentError']").count() == 0, f"error on page /{path}"
                if path == "depth":
                    shot = tmp_path / "screenshot_depth.png"
                    page.screenshot(path=str(shot), full_page=True)
                    assert shot.stat().st_size > 10_000
                    if os.environ.get("DRIFTTOOL_UPDATE_SCREENSHOT") == "1":
                        (REPO / "docs").mkdir(exist_ok=True)
                        shutil.copy(shot, REPO / "docs" / "screenshot_depth.png")
        finally:
            browser.close()
    print("render times (s):", {k: round(v, 2) for k, v in timings.items()})
    assert not errors, errors
