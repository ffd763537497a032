"""Adding a metric with a uniform share touches the metric table and the generated docs only (issue #66, item 3):
in a copy of the checkout, a context mass is added the way a developer adds one (a `Metric` row typed into
drifttool/trace/metric_table.py, then `python scripts/docs_gen.py`), and the copy's own synthetic-trace, capture,
check and old-trace tests run against it, and the new mass reaches the terminal `compare`, the Depth page's default
curves, the HTML report's per-depth table and /metrics. Before the count rules were shared, the synthetic traces
named every key-count column by hand (59 trace tests failed without an edit there) and compare / report / plots
kept their own metric lists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROW = '''    Metric("first_key_mass", "first-key mass", MASS, "attention on the first context slot after the sinks",
           "context", keys=lambda c: np.setdiff1d(np.arange(min(c.n, c.sink.size + 1)), c.sink)[:1],
           count="n_first_key", better=-1, added=True, live=("lift",)),
'''
# the copy's tests that exercise every key count: synthetic traces (fuzzed, compacted, gated), the capture against
# eager attention (uniform attention: every lift 1, the old-trace fill equal to the capture's counts), old traces
TESTS = ["tests/trace/test_fuzzed_trace_and_probe_files.py", "tests/trace/test_compact_trace.py",
         "tests/analysis/test_check.py", "tests/run/test_capture_attention.py",
         "tests/trace/test_key_counts_old_traces.py", "tests/package/test_metric_names.py"]
REACH = r'''
import contextlib, io, sys
from pathlib import Path
import drifttool as dt
from drifttool import plots
from drifttool.cli import main
from drifttool.monitor.metrics import per_depth
from drifttool.trace.synthetic import write_trace

assert Path(dt.__file__).resolve().is_relative_to(Path.cwd().resolve()), dt.__file__
p = write_trace(Path(sys.argv[1]) / "s.drift", {"e3": {"accepted": [1, 2, 0, 3] * 6}}, depth=4)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    assert main(["compare", str(p)]) == 0
print("TERMINAL", "first_key" in buf.getvalue())
pd_ = dt.load(p).per_depth()
titles = lambda fig: " ".join(a.text for a in fig.layout.annotations)
print("CURVES", "first-key" in titles(plots.depth_curves(pd_)) and "first-key" in titles(plots.lift_curves(pd_)))
assert main(["report", str(p), "-o", str(Path(sys.argv[1]) / "r.html")]) == 0
html = (Path(sys.argv[1]) / "r.html").read_text()
print("REPORT", html.count("first-key lift") >= 2)
print("METRICS", "first_key_lift" in per_depth())
'''


def _copy(dst: Path) -> None:
    """The checkout's files as git sees them (tracked and untracked, not ignored); large ones linked."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    dst.mkdir(parents=True)
    (dst / "sample_traces").symlink_to(ROOT / "sample_traces", target_is_directory=True)  # read only, as shipped
    for name in names:
        src = ROOT / name
        if not src.is_file() or name.startswith("sample_traces/"):
            continue
        out = dst / name
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.stat().st_size > 1_000_000:
            out.symlink_to(src)
        else:
            shutil.copy2(src, out)


def _changed(copy: Path) -> list[str]:
    out = []
    for p in copy.rglob("*"):
        rel = p.relative_to(copy)
        if p.is_symlink() or not p.is_file() or "__pycache__" in rel.parts or rel.parts[0].startswith("."):
            continue
        src = ROOT / rel
        if not src.is_file() or src.read_bytes() != p.read_bytes():
            out.append(str(rel))
    return sorted(out)


def test_a_metric_typed_into_the_table_needs_nothing_else(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    copy = tmp_path / "repo"
    _copy(copy)
    table = copy / "drifttool" / "trace" / "metric_table.py"
    text = table.read_text()
    m = re.search(r"\nMETRICS: tuple\[Metric, \.\.\.\] = \(\n.*?\n\)\n", text, re.S)
    assert m, "METRICS = (...) not found in metric_table.py"
    table.write_text(text[:m.end() - 2] + ROW + text[m.end() - 2:])
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    gen = subprocess.run([sys.executable, "scripts/docs_gen.py"], cwd=copy, env=env, capture_output=True, text=True,
                         timeout=1800)
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert _changed(copy) == ["docs/metrics.md", "docs/monitor.md", "drifttool/trace/metric_table.py"]
    assert "first_key_mass" in (copy / "docs" / "metrics.md").read_text()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider",
                          *TESTS], cwd=copy, env=env, capture_output=True, text=True, timeout=3000)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    reach = subprocess.run([sys.executable, "-c", REACH, str(tmp_path)], cwd=copy, env=env, capture_output=True,
                           text=True, timeout=1800)
    assert reach.returncode == 0, reach.stderr[-3000:]
    said = dict(ln.split() for ln in reach.stdout.splitlines() if ln.split()[:1] in (["TERMINAL"], ["CURVES"],
                                                                                    ["REPORT"], ["METRICS"]))
    assert said == {"TERMINAL": "True", "CURVES": "True", "REPORT": "True", "METRICS": "True"}, reach.stdout
    assert _changed(copy) == ["docs/metrics.md", "docs/monitor.md", "drifttool/trace/metric_table.py"]
