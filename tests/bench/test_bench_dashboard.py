"""Smoke test of bench/bench_dashboard.py on the fixture traces and a tiny synthetic trace (no time asserts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_dashboard.py"


def test_bench_dashboard_smoke(dash_traces, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_dashboard", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(dash_traces["a"]), "--rows", "2000", "--heads", "1", "--prompts", "2", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a.drift" in out and "synthetic 2k rows" in out
    assert "summary: dashboard data path" in out
    assert not list(tmp_path.iterdir())  # the synthetic trace is cleaned up
