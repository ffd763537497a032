"""SLOW (minutes; marked `wheel`): the wheel as a user gets it. Build it, install it with the [app] extra into a
fresh venv (torch pinned to the CPU 2.13 build on this disk, never a CUDA wheel), check the dashboard and the
probe suites came with it, then run `drifttool dashboard` from outside the checkout and load a page in
headless Chromium. DRIFTTOOL_SKIP_WHEEL=1 skips it (quick local runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from tests.support.capture import REPO

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(1500),
              pytest.mark.skipif(os.environ.get("DRIFTTOOL_SKIP_WHEEL") == "1", reason="DRIFTTOOL_SKIP_WHEEL=1")]
TORCH = "torch==2.13.0"  # the CPU build on this machine's disk (setup.sh pins the same)


# the venv sees only what is installed in it: no PYTHONPATH into the checkout
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} -> {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def _clean_source(dst):
    """The checkout's files as a fresh clone has them (tracked + new, not ignored; no sample traces), so no
    stale build/ of an earlier build slips into the wheel."""
    import shutil

    try:
        files = subprocess.run(["git", "-C", REPO, "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True,
                               check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        return REPO  # not a git checkout: build it as it is
    for f in filter(None, files):
        if f.startswith("sample_traces/") or not (REPO / f).is_file():
            continue
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, dst / f)
    return dst


def test_wheel_installs_and_serves_the_dashboard(tmp_path, dash_traces):
    from tests.dashboard.test_dashboard_browser import (
        ARGS,
        CHROMIUM,
        READY,
        _free_port,
        _require_browser,
        _wait_healthy,
    )

    # build (no isolation: the dev venv's setuptools, no index needed)
    src = _clean_source(tmp_path / "src")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist",
          src], cwd=tmp_path)
    whl = next((tmp_path / "dist").glob("drifttool-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    for need in ("drifttool/dashboard/app.py", "drifttool/dashboard/app_pages/depth.py", "drifttool/_probes/quick.jsonl",
                 "drifttool/_probes/real/long_code.jsonl", "drifttool/zoo/models/sink/eagle3/config.json"):
        assert need in names, need
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith("drifttool/_app/") for n in names)  # the dashboard is a package, not a copy
    meta = zipfile.ZipFile(whl).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta

    # install into a fresh venv: CPU torch first, then the wheel with its dashboard extra
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    (tmp_path / "pin.txt").write_text(TORCH + "\n")
    _run([py, "-m", "pip", "install", "-q", TORCH])
    _run([py, "-m", "pip", "install", "-q", "-c", tmp_path / "pin.txt", f"{whl}[app]"])
    out = _run([py, "-c", "import drifttool, drifttool.demo as d, drifttool.cli as c, torch; "
                "print(drifttool.__file__); print(d.probes_dir()); print(c.dashboard_script()); print(torch.__version__)"],
               cwd=tmp_path)
    file_, probes, script, torch_v = out.split()
    assert "site-packages" in file_ and str(REPO) not in file_
    assert probes.endswith("drifttool/_probes") and script.endswith("drifttool/dashboard/app.py")
    assert torch_v.startswith("2.13.0") and "+cu" not in torch_v

    # the installed dashboard, started from outside the checkout, serves a page
    _require_browser()
    port = _free_port()
    log = tmp_path / "dash.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([venv / "bin" / "drifttool", "dashboard", str(dash_traces["a"]), "--port", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path, env=ENV, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log, timeout=1800)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1200})
                t0 = time.perf_counter()
                page.goto(url, wait_until="domcontentloaded")
                page.wait_for_function(READY, arg=["Overview", 0, 2], timeout=120_000)  # tables only (two unfolded)
                assert page.locator("[data-testid='stException']").count() == 0
                # the tables draw on canvases (no DOM text); the sidebar names the trace it read
                assert "showing 1 trace(s): a" in page.inner_text("body")
                print(f"installed dashboard: Overview drawn in {time.perf_counter() - t0:.1f} s")
            finally:
                browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
