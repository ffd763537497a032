"""The README's results tables are what scripts/real_results.py prints from the shipped sample traces: every
line it prints is in the README verbatim (a change of traces, metrics or formatting without the README fails
here; the script itself broke once on compact traces' categorical keys with nobody noticing)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.capture import REPO, child_env


def test_every_result_line_is_in_the_readme():
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "real_results.py")], capture_output=True, text=True,
                       cwd=REPO, env=child_env(), timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert sum(ln.startswith("| ") for ln in lines) > 30, r.stdout  # the tables were printed
    docs = (REPO / "docs" / "results.md").read_text() + (REPO / "docs" / "draft_trees.md").read_text()
    missing = [ln for ln in lines if ln not in docs]
    assert not missing, "docs/results.md lacks these lines of scripts/real_results.py:\n" + "\n".join(missing)


def test_the_readme_answer_is_generated():
    """The README's answer in words is scripts/real_results.py's landing block, verbatim."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location("real_results", REPO / "scripts" / "real_results.py")
    rr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rr)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rr.landing(REPO / "sample_traces")
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    assert len(lines) >= 2 and all(ln in (REPO / "README.md").read_text() for ln in lines), lines

