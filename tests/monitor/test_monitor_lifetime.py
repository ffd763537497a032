"""The replay never outlives the server (issue #63, item 4): a `kill -9` of vLLM's API server leaves its engine core
alive, and so the replay's own parent; the replay watches every process above it that runs the same interpreter and
stops when one is gone. Real processes: an "API server" whose child (the "engine core") starts the replay's watch;
the top one is killed with SIGKILL, the middle one lives on, the watch stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LEAF = """
import sys, threading
from drifttool.monitor.replay_worker import _watch_ancestors, python_ancestors
anc = python_ancestors()
print("ANCESTORS", len(anc), flush=True)
stop = threading.Event()
_watch_ancestors(stop, anc, every=0.1)
print("STOPPED", flush=True)
"""
MID = """
import subprocess, sys, time
out = open(sys.argv[1], "w")
subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdout=out, stderr=subprocess.DEVNULL)
time.sleep(600)
"""
TOP = """
import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
print(p.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_the_replay_stops_when_the_server_above_its_parent_is_killed(tmp_path):
    log = tmp_path / "leaf.txt"
    top = subprocess.Popen([sys.executable, "-c", TOP, MID, str(log), LEAF], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    mid = int(top.stdout.readline())
    try:
        t0 = time.monotonic()
        while "ANCESTORS" not in (log.read_text() if log.exists() else "") and time.monotonic() - t0 < 120:
            time.sleep(0.1)
        n = int(log.read_text().split()[1])
        assert n >= 2  # the "engine core" and the "API server" (and this test's own interpreter), no shell
        assert "STOPPED" not in log.read_text()
        top.send_signal(signal.SIGKILL)  # not reaped yet: a zombie is gone too
        t0 = time.monotonic()
        while "STOPPED" not in log.read_text() and time.monotonic() - t0 < 120:
            time.sleep(0.1)
        assert "STOPPED" in log.read_text()
        os.kill(mid, 0)  # the middle process (the engine core) is still there: only the watch noticed
        top.wait(30)
    finally:
        for pid in (mid, top.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
