"""docs/architecture.md names every module of the package: each drifttool/**/*.py (package __init__ files aside) by
its path relative to drifttool/ (`trace/reader.py`, `monitor/replay_worker.py`, `errors.py`), so a module added
without a line saying what it holds and why fails here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "drifttool"
DOC = REPO / "docs" / "architecture.md"


def modules(pkg: Path = PKG) -> list[str]:
    """Every Python module of the package as its path under drifttool/, package __init__ files left out (package
    data, e.g. zoo/models/ or _probes/, holds no .py files; any that did would be listed like the rest)."""
    return sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def named(path: str, doc: str) -> bool:
    """`path` written whole in the doc: not as the tail of a longer path (`model/mtp.py` is not
    `run/engines/vllm/mtp.py`) nor followed by more of a name."""
    return re.search(r"(?<![\w/.-])" + re.escape(path) + r"(?![\w])", doc) is not None


def test_every_module_is_named_in_the_architecture_doc():
    doc = DOC.read_text()
    mods = modules()
    assert len(mods) > 100 and "trace/reader.py" in mods and "errors.py" in mods  # the walk found the package
    missing = [m for m in mods if not named(m, doc)]
    assert not missing, ("docs/architecture.md does not name these modules (add one line each under 'Modules': "
                         "what it holds and why):\n" + "\n".join(missing))


def test_a_path_counts_only_written_whole():
    doc = "- `run/engines/vllm/mtp.py`: x\n- `trace/reader.py`: y; `errors.py`, `analysis/report.py`"
    assert named("run/engines/vllm/mtp.py", doc) and named("trace/reader.py", doc) and named("errors.py", doc)
    assert not named("mtp.py", doc) and not named("vllm/mtp.py", doc) and not named("model/mtp.py", doc)
    assert not named("reader.py", doc) and not named("analysis/report_stats.py", doc)
    assert not named("report.py", doc)  # the tail of analysis/report.py
