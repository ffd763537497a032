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


def test_capture_seed_panel_refuses_a_seed_that_never_trained(tmp_path):
    """It waited forever (a `sleep 30` loop) for runs/seeds/sS/done of a seed no training was running for."""
    import os
    import shutil
    import subprocess

    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "capture_seed_panel.sh", tmp_path / "scripts")
    calls = tmp_path / "calls.txt"
    dt = tmp_path / "dt"
    dt.write_text(f"#!/usr/bin/env bash\necho \"$@\" >> {calls}\necho {tmp_path}/target\n")
    dt.chmod(0o755)
    (tmp_path / "runs" / "seeds" / "s0").mkdir(parents=True)
    (tmp_path / "runs" / "seeds" / "s0" / "done").touch()  # seed 0 trained; seed 7 never was
    env = {**os.environ, "DT": str(dt), "SEEDS": "0 7"}
    r = subprocess.run(["bash", str(tmp_path / "scripts" / "capture_seed_panel.sh")], env=env, capture_output=True,
                       text=True, timeout=1800)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "seed 7" in lines[0] and "never trained" in lines[0], r.stderr
    assert "runs/seeds/s7/done" in lines[0]
    assert not calls.exists() or "capture" not in calls.read_text()  # refused before anything was captured
