"""Dashboard cold start in a real browser: `drifttool dashboard` on the sample traces, a fresh server and a fresh
headless Chromium each repetition, and the same for a four-line Streamlit app that draws one plotly bar chart
(what any page with a plotly chart costs on this machine: Streamlit's front end plus plotly's bundle).

    python bench/bench_browser.py [--reps 3] [TRACE.drift ...]

Per repetition: launch -> server healthy; page opened -> first title, tables (or the floor app's chart), page
done (script idle); then the Depth page opened from the sidebar, timed from the click to its charts drawn (the
session's first plotly page). Prints each, then medians and min-max. Needs playwright and Chromium
($DRIFTTOOL_CHROMIUM, default /usr/bin/chromium)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("DRIFTTOOL_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
FLOOR_APP = """import plotly.graph_objects as go
import streamlit as st
st.title("Overview")
st.plotly_chart(go.Figure(go.Bar(x=["EAGLE-3", "EAGLE-3.1"], y=[1.3, 1.4])))
"""
IDLE = """() => { const a = document.querySelector('[data-testid="stApp"]');
    return a && a.getAttribute('data-test-script-state') === 'notRunning'
      && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0; }"""
GRIDS = """(n) => [...document.querySelectorAll('[data-testid="stDataFrame"]')].filter(e => e.querySelector('canvas'))
    .length >= n"""
CHARTS = """(n) => [...document.querySelectorAll('.js-plotly-plot')].filter(e => e.querySelector('.main-svg')).length >= n"""
# per app: (mark, js, arg) in order; the dashboard's "done" = Overview drawn (3 data grids, script idle), then
# "depth" = the Depth page opened from the sidebar and its 4 charts drawn (the first plotly page of a session)
MARKS = {
    "dashboard": [("title", "() => document.querySelectorAll('h1').length > 0", None), ("tables", GRIDS, 3),
                  ("done", IDLE, None), ("depth", CHARTS, 4)],
    "floor": [("title", "() => document.querySelectorAll('h1').length > 0", None), ("chart", CHARTS, 1),
              ("done", IDLE, None)],
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(cmd: list[str], port: int, browser_type, marks: list) -> dict[str, float]:
    """Start the server, open one fresh browser on it, time the marks; always stops both."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO,
                            start_new_session=True)
    out = {}
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{' '.join(cmd[:4])}: server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                time.sleep(0.05)
        out["healthy"] = time.perf_counter() - t0
        browser = browser_type.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1700})
            t1 = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}", wait_until="domcontentloaded")
            for name, js, arg in marks:
                if name == "depth":  # a second page, opened as a user does: timed from the click
                    t1 = time.perf_counter()
                    page.get_by_test_id("stSidebarNavLink").filter(has_text="Depth").first.click()
                page.wait_for_function(js, arg=arg, timeout=120_000)
                out[name] = time.perf_counter() - t1
        finally:
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    return out


def summarize(label: str, runs: list[dict[str, float]]) -> None:
    cells = []
    for k in runs[0]:
        vals = [r[k] for r in runs]
        cells.append(f"{k} {statistics.median(vals):.2f} s [{min(vals):.2f}-{max(vals):.2f}]")
    print(f"{label:<10} " + "; ".join(cells), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="trace folders (default: the sample traces)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    drifttool = [sys.executable, "-m", "drifttool.cli", "dashboard", *a.traces]
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        floor_app = Path(tmp) / "floor.py"
        floor_app.write_text(FLOOR_APP)
        results: dict[str, list] = {"dashboard": [], "floor": []}
        for rep in range(a.reps):  # interleaved, so a slow spell of the machine hits both
            for label in results:
                port = _port()
                cmd = ([*drifttool, "--port", str(port)] if label == "dashboard" else
                       [sys.executable, "-m", "streamlit", "run", str(floor_app), "--server.headless", "true",
                        "--server.port", str(port), "--server.fileWatcherType", "none",
                        "--browser.gatherUsageStats", "false"])
                r = one_start(cmd, port, p.chromium, MARKS[label])
                results[label].append(r)
                print(f"rep {rep} {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    print("times: launch -> healthy; page opened -> title / tables or chart / page done; dashboard: Depth page "
          "(first plotly page) from the click (median [min-max])")
    for label, runs in results.items():
        summarize(label, runs)
    med = {k: statistics.median(r["done"] for r in v) for k, v in results.items()}
    depth = statistics.median(r["depth"] for r in results["dashboard"])
    print(f"SUMMARY browser: sample traces' first page drawn {med['dashboard']:.2f} s cold (bar < 3 s); Depth page "
          f"{depth:.2f} s from the click; a one-chart Streamlit page {med['floor']:.2f} s on the same machine")


if __name__ == "__main__":
    main()
