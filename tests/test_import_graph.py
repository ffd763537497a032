"""The package's import graph (issue 16): no cycles between drifttool's modules, and no module imports another
module's private (underscore) names. Imports under `if TYPE_CHECKING:` are annotations only and do not count;
imports inside functions do (a lazy import still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "drifttool"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, f: Path, mods: dict[str, Path]):
    """(imported module, imported name or None) for every runtime import of module `name`."""
    tree = ast.parse(f.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for b in node.body for n in ast.walk(b)}
    base = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            src = ".".join(base[: len(base) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module or ""
            for a in node.names:
                sub = f"{src}.{a.name}"
                yield (sub, None) if sub in mods else (src, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for m, f in mods.items():
        for dest, what in _imports(m, f, mods):
            if dest in mods and dest != m:
                edges[m].add(dest)
                if what and what.startswith("_") and not what.startswith("__"):
                    private.append(f"{m} imports {dest}.{what}")
    return edges, private


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state and (c := visit(v)):
                return c
        path.pop()
        state[u] = 2
        return None

    for m in sorted(edges):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_cycles():
    edges, _ = _graph()
    assert len(edges) > 30 and edges["drifttool.run.engines.hf"]  # the graph was read
    c = _cycle(edges)
    assert c is None, " -> ".join(c)


def test_no_private_cross_module_imports():
    _, private = _graph()
    assert not private, private


def test_the_checker_sees_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
