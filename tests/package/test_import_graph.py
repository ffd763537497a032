"""The package's stages import only downward and no module imports itself back through others: every import
statement counts, deferred (inside a function) and TYPE_CHECKING ones included, read from the source with ast.

Stages, lowest first: base (errors, jsonfile, dtypes, version, styles, suggest) -> model -> zoo | trace -> run | analysis
-> plots -> dashboard -> faces (api, cli, demo, the package's public names). Stages on one level are siblings and
do not import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "drifttool"
LEVEL = {"base": 0, "model": 1, "zoo": 2, "trace": 2, "run": 3, "analysis": 3, "plots": 4, "monitor": 4,
         "dashboard": 5,
         "faces": 6}
TOP = {"errors": "base", "jsonfile": "base", "dtypes": "base", "version": "base", "styles": "base", "suggest": "base",
       "api": "faces", "live_api": "faces", "cli": "faces", "demo": "faces", "train_log": "faces", "train_speculators": "faces",
       "": "faces"}


def modules(pkg: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def stage(mod: str) -> str:
    part = mod.split(".")[1] if "." in mod else ""
    return TOP.get(part, part)


def imports(mod: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported drifttool module, line) for every import statement in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "drifttool"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                pkg = ".".join(base + ([node.module] if node.module else []))
            else:
                pkg = node.module or ""
            if pkg.split(".")[0] != "drifttool":
                continue
            for a in node.names:  # `from pkg import submodule` is an import of the submodule, not of pkg
                out.append((f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in known else pkg, node.lineno))
    return out


def graph(pkg: Path = PKG) -> dict[str, list[tuple[str, int]]]:
    known = modules(pkg)
    return {m: sorted({(t, ln) for t, ln in imports(m, p, known) if t != m}) for m, p in known.items()}


def upward(g: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for m, edges in g.items():
        for t, ln in edges:
            a, b = stage(m), stage(t)
            if b not in LEVEL:
                bad.append(f"{m}:{ln} imports {t}, no module of the package")
            elif a != b and LEVEL[b] >= LEVEL[a]:
                bad.append(f"{m}:{ln} imports {t} ({a} -> {b})")
    return bad


def cycles(g: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in g.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_stage():
    assert {stage(m) for m in modules()} <= set(LEVEL)


def test_stages_import_only_downward():
    assert upward(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


@pytest.fixture
def toy(tmp_path):
    """A package with an upward import (trace -> run, deferred) and a circle (two analysis modules)."""
    pkg = tmp_path / "drifttool"
    for d in ("trace", "run", "analysis"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "run" / "hooks.py").write_text("X = 1\n")
    (pkg / "trace" / "records.py").write_text("def f():\n    from ..run.hooks import X\n    return X\n")
    (pkg / "analysis" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n")
    (pkg / "analysis" / "b.py").write_text("def g():\n    from .a import h\n")
    return pkg


def test_the_check_catches_deferred_upward_imports_and_hidden_circles(toy):
    g = graph(toy)
    assert upward(g) == ["drifttool.trace.records:2 imports drifttool.run.hooks (trace -> run)"]
    assert cycles(g) == [["drifttool.analysis.a", "drifttool.analysis.b"]]
