"""The documentation cannot go stale: the pages generated from the code (CLI reference, metric table) are
current, an edit by hand to a generated figure is caught, and the README stays a landing page."""

from __future__ import annotations

import importlib.util
import shutil

from tests.support.capture import REPO


def _docs_gen():
    spec = importlib.util.spec_from_file_location("docs_gen", REPO / "scripts" / "docs_gen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_pages_are_current_and_a_hand_edit_fails(tmp_path, monkeypatch):
    gen = _docs_gen()
    assert gen.main(["--check"]) == 0
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "bench" / "results", tmp_path / "bench" / "results")
    page = tmp_path / "docs" / "metrics.md"
    text = page.read_text()
    assert "| [0.0, 1.0] |" in text
    page.write_text(text.replace("| [0.0, 1.0] |", "| [0.0, 1.5] |", 1))  # a range typed by hand
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1


def test_readme_is_a_landing_page():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "bash scripts/setup.sh && .venv/bin/drifttool demo" in readme and "bash ./scripts/test.sh" in readme
    assert (REPO / ".ci" / "run").read_text().count("bash ./scripts/test.sh") == 1


def test_the_two_commands_times_come_from_the_bench_and_a_hand_edit_fails(tmp_path, monkeypatch):
    """The README's and getting started's times are bench/bench_first_hour.py's results, never typed."""
    import json
    import re

    gen = _docs_gen()
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    runs = [{"command": "setup", "load": 0, "seconds": 401, "stages": {"torch installed": 95, "venv ready": 3}},
            {"command": "demo", "load": 0, "seconds": 47}, {"command": "demo", "load": 2, "seconds": 188},
            {"command": "tests", "load": 0, "seconds": 1642, "passed": [1267, 65, 4, 29]}]
    (tmp_path / "bench" / "results" / "first_hour.json").write_text(json.dumps(
        {"machine": {"cores": 2}, "runs": [dict(r, date="2026-12-04", commit="abc") for r in runs]}))
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    readme = (tmp_path / "README.md").read_text()
    want = ("`scripts/setup.sh` 6 min 41 s (longest stage: torch installed, 1 min 35 s); `drifttool demo` 47 s idle, "
            "3 min 08 s with every core busy; the test command 27 min 22 s idle (1267 + 65 + 4 + 29 tests passed: the "
            "main suite, pandas 2.2, the speculators and the vLLM environments).")
    assert want in readme and want in (tmp_path / "docs" / "getting_started.md").read_text()
    (tmp_path / "README.md").write_text(re.sub(r"47 s idle", "40 s idle", readme))  # a time typed by hand
    assert gen.main(["--check"]) == 1


def test_swapped_or_missing_markers_are_one_line_and_nothing_written(tmp_path, monkeypatch, capsys):
    """A page whose begin/end markers are swapped was rewritten with its block duplicated (exit 0); one without its
    end marker raised a traceback (issue #51): both refused in one line naming the page and the marker."""
    gen = _docs_gen()
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "bench" / "results", tmp_path / "bench" / "results")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    readme = tmp_path / "README.md"
    text = readme.read_text()
    begin, end = gen.TIMES
    assert text.count(begin) == 1 and text.count(end) == 1
    swapped = text.replace(begin, "\0").replace(end, begin).replace("\0", end)
    for broken, why in ((swapped, "before"), (text.replace(end, ""), "missing"), (text + begin, "twice")):
        readme.write_text(broken)
        for argv in ([], ["--check"]):
            assert gen.main(argv) == 2, (why, argv)
            err = capsys.readouterr().err
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and "README.md" in lines[0] and why in lines[0], err
            assert readme.read_text() == broken  # nothing rewritten
