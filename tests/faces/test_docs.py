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
