"""`bench/run_all.py --smoke` runs every benchmark end to end at toy sizes: exit 0 and every summary line
printed (no timing asserts: the numbers of a smoke run mean nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.capture import child_env

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)  # a few CPU seconds; wall time depends on what else the machine runs


def test_run_all_smoke():
    p = subprocess.run([sys.executable, str(REPO / "bench" / "run_all.py"), "--smoke"], capture_output=True,
                       text=True, timeout=1800, env=child_env(), cwd=REPO)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    lines = p.stdout.splitlines()
    for name in ("overhead", "e2e", "trace_io", "memory", "study"):
        assert sum(line.startswith(f"SUMMARY {name}:") for line in lines) == 2, name  # in place + recap
    assert lines[-1].startswith("SUMMARY all: 5 benchmarks")
    assert "x" in next(line for line in lines if line.startswith("SUMMARY overhead:"))  # the ratios
