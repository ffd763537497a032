"""`.ci/run` (scripts/test.sh) output tells what happened: pytest run with this repository's configuration and
test.sh's own arguments prints the "N passed, N skipped" counts line and every skip reason."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pytest_args(script: Path) -> list[str]:
    """The pytest arguments of the script's first pytest line, its worker options (W=(...)) expanded as bash does
    (test_vllm.sh gets test.sh's)."""
    text = (REPO / "scripts" / "test.sh").read_text()
    text = text.replace("${DRIFTTOOL_TEST_WORKERS:-2}", "2")
    w = re.search(r"^W=\((.*)\)$", text, re.M).group(1)
    line = next(ln for ln in script.read_text().splitlines() if "-m pytest" in ln and not ln.lstrip().startswith("#"))
    args = shlex.split(line.split("-m pytest", 1)[1], comments=True)
    if script.name == "test_vllm.sh":  # the options test.sh passes on
        args += shlex.split(re.search(r"test_vllm\.sh (.*)$", text, re.M).group(1))
    out = []
    for a in args:
        out += shlex.split(w) if a == "${W[@]}" else [] if a in ('"$@"', "$@") or a.startswith("tests/") else [a]
    return out


def test_ci_pytest_prints_counts_and_skip_reasons(tmp_path):
    (tmp_path / "test_demo.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\n"
        "@pytest.mark.skip(reason='needs the moon')\ndef test_skipped():\n    pass\n")
    for script in ("test.sh", "test_vllm.sh"):
        args = _pytest_args(REPO / "scripts" / script)
        out = subprocess.run([sys.executable, "-m", "pytest", *args, "-c", str(REPO / "pyproject.toml"),
                              "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path / "test_demo.py")],
                             capture_output=True, text=True, timeout=1800, cwd=tmp_path).stdout
        last = out.strip().splitlines()[-1]
        assert re.search(r"\b1 passed, 1 skipped\b", last), (script, out)  # the counts line ends the output
        assert "SKIPPED" in out and "needs the moon" in out, (script, out)
