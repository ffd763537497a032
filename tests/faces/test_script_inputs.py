"""The scripts a user runs by hand take bad input as the CLI does (issue #51, item 7): one line naming the file and
what was expected, exit 2, no traceback, and nothing loaded or fetched before the input is checked."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support.capture import REPO


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("lines,fragment", [
    ([{"id": "a", "messages": [{"role": "user", "content": "hi"}]}, {"id": "b", "token_ids": [1, 2]}],
     "probe 'b' has no chat messages"),
    (['{"id": "a", "messages": [{"role": "user"'], "suite.jsonl:1"),
    ([], "empty"),
])
def test_template_perturbation_bad_suite_is_one_line_exit_2(tmp_path, capsys, monkeypatch, lines, fragment):
    mod = _script("template_perturbation")
    monkeypatch.setattr(mod, "load_target", lambda *a, **k: pytest.fail("the target loaded before the suite was checked"))
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    out = tmp_path / "out.jsonl"
    assert mod.main(["--suite", str(suite), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    got = [ln for ln in err.splitlines() if ln.strip()]
    assert len(got) == 1 and "Traceback" not in err and fragment in got[0] and "suite.jsonl" in got[0], err
    assert not out.exists()
