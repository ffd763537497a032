"""Untrusted files: no code path unpickles (checkpoints, traces, caches), `trust_remote_code` is never on by
default, the dashboard listens on 127.0.0.1 only, and its loader reads only the trace folders it was given."""

from __future__ import annotations

import ast
import inspect
import re
import shutil
import sys
from pathlib import Path

import pytest

import drifttool.cli as cli

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(REPO / "drifttool").rglob("*.py"), *(REPO / "app").rglob("*.py")])
PICKLING = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def _name(node: ast.AST) -> str:
    """Dotted name of a call target: torch.load, np.load, pd.read_pickle, ..."""
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _kw(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value.value if isinstance(k.value, ast.Constant) else k.value
    return None


def findings(path: Path) -> list[str]:
    out = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            out += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLING]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLING:
            out.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            fn = _name(node.func)
            last = fn.rsplit(".", 1)[-1]
            if fn.split(".")[0] in PICKLING or last in ("read_pickle", "to_pickle"):
                out.append(f"{where}: {fn}(...)")
            if fn.endswith("torch.load") and _kw(node, "weights_only") is not True:
                out.append(f"{where}: torch.load without weights_only=True")
            if last == "load" and fn.split(".")[0] in ("np", "numpy") and _kw(node, "allow_pickle") is not None:
                out.append(f"{where}: {fn}(allow_pickle=...)")
            if _kw(node, "trust_remote_code") is True:
                out.append(f"{where}: trust_remote_code=True")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            pos = args.posonlyargs + args.args
            pairs = list(zip(pos[len(pos) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for a, d in pairs:
                if a.arg == "trust_remote_code" and not (isinstance(d, ast.Constant) and d.value is False):
                    out.append(f"{where}: {node.name}(trust_remote_code=...) defaults to something other than False")
    return out


def test_sources_are_found():
    names = {p.name for p in SOURCES}
    assert {"checkpoint.py", "target.py", "reader.py", "lib.py", "cli.py"} <= names


def test_no_pickle_no_unsafe_torch_load_no_remote_code():
    bad = [f for p in SOURCES for f in findings(p)]
    assert not bad, bad
    # the plain-text view of the same rules (catches what the AST walk could miss, e.g. aliased imports)
    for p in SOURCES:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            assert not re.search(r"\bimport\s+(c?pickle|dill|cloudpickle)\b|pickle\.loads?\(|read_pickle\(", code), \
                f"{p}:{i}: {line}"
            if "torch.load(" in code:
                assert "weights_only=True" in code, f"{p}:{i}: {line}"
            assert not re.search(r"trust_remote_code\s*[:=]\s*(bool\s*=\s*)?True", code), f"{p}:{i}: {line}"


def test_the_checker_catches_what_it_should(tmp_path):
    """The rules themselves: a file breaking each of them is flagged."""
    f = tmp_path / "bad.py"
    src = ("import pickle\nimport torch\nimport numpy as np\nimport pandas as pd\n"
           "def f(p, trust_remote_code=True):\n    torch.load(p)\n    torch.load(p, weights_only=False)\n"
           "    np.load(p, allow_pickle=True)\n    pd.read_pickle(p)\n    g(p, trust_remote_code=True)\n")
    f.write_text(src)
    got = findings(f)
    assert len(got) == 7, got


def test_trust_remote_code_off_by_default():
    from drifttool.model.target import load_target

    assert inspect.signature(load_target).parameters["trust_remote_code"].default is False


def test_dashboard_binds_localhost_only():
    cmd = cli.dashboard_command(["x.drift"], 8502)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert inspect.signature(cli.dashboard).parameters["host"].default.default == "127.0.0.1"
    for p in SOURCES:  # other interfaces only when asked for with --host (whose help text names 0.0.0.0)
        assert not re.search(r"""address["', =]+0\.0\.0\.0|host\s*=\s*["']0\.0\.0\.0|Option\(\s*["']0\.0\.0\.0""",
                             p.read_text()), p
    for d in (REPO / "app", REPO / "drifttool" / "dashboard"):  # the scripts' folders (Streamlit reads its config there)
        assert not (d / ".streamlit").exists()  # no config file that could override the address


def test_dashboard_reads_only_the_traces_it_was_given(tmp_path, monkeypatch):
    """drifttool.dashboard.lib.confine: the folders named on the command line (resolved), nothing a link inside them points to."""
    pytest.importorskip("streamlit")
    from drifttool.dashboard import lib as dashlib
    from drifttool.errors import DriftError

    given = tmp_path / "a.drift"
    given.mkdir()
    (given / "rounds").mkdir()
    (tmp_path / "secret.txt").write_text("x")
    monkeypatch.setattr(sys, "argv", ["dashboard.py", str(given)])
    assert dashlib.trace_paths() == [given]
    assert dashlib.confine(given) == given.resolve()
    assert dashlib.confine(tmp_path / "b.drift" / ".." / "a.drift") == given.resolve()  # same folder, other spelling
    for other in (tmp_path, tmp_path / "secret.txt", tmp_path / "b.drift", Path("/etc")):
        with pytest.raises(DriftError, match="not one of the trace folders"):
            dashlib.confine(other)
    shutil.copytree(given, tmp_path / "copy.drift")
    with pytest.raises(DriftError, match="copy.drift"):
        dashlib.confine(tmp_path / "copy.drift")
    (given / "rounds" / "part-00000.parquet").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(DriftError, match="outside the trace folder"):
        dashlib.confine(given)
    (given / "rounds" / "part-00000.parquet").unlink()
    (given / "rounds" / "x.json").write_text("{}")
    (given / "rounds" / "part-00000.parquet").symlink_to(given / "rounds" / "x.json")  # a link inside is fine
    assert dashlib.confine(given) == given.resolve()
