"""Bad files under the tools' own inputs are one line, not a traceback (#66): a truncated bench results file read by
scripts/docs_gen.py, and DRIFTTOOL_CACHE under a path whose parent is a file (`zoo fetch`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from drifttool.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _docs_gen():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "scripts" / "docs_gen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_truncated_bench_results_file_is_one_line(tmp_path):
    dg = _docs_gen()
    f = tmp_path / "monitor_overhead.json"
    f.write_text((ROOT / "bench" / "results" / "monitor_overhead.json").read_text()[:100])
    with pytest.raises(dg.MarkerError, match="monitor_overhead.json: not valid JSON"):
        dg._load(f)
    f.write_text("[1, 2]")
    with pytest.raises(dg.MarkerError, match="expected a JSON object, got list"):
        dg._load(f)


def test_a_cache_under_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("DRIFTTOOL_CACHE", str(tmp_path / "file" / "sub"))
    assert main(["zoo", "fetch", "smollm2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'file'} is a file" in err


def test_the_synthetic_trace_of_its_docstring_reports(tmp_path, capsys):
    """trace/synthetic.write_trace's own example writes a trace every verb reads (report called it damaged: no
    prompts or aux table)."""
    from drifttool.trace.synthetic import write_trace

    t = write_trace(tmp_path / "try.drift", {"good": {"accepted": [4, 3, 4, 1]}, "weak": {"accepted": [1, 1, 2, 0]}},
                    depth=4)
    assert main(["report", str(t), "-o", str(tmp_path / "r.html")]) == 0
    assert "report written" in capsys.readouterr().out
