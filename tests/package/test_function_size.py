"""No function in the package is too branchy or too long to read in one go: cyclomatic complexity (radon) at most
20 (rank C; D and worse fail), and at most 60 lines from `def` to its last line unless the line directly above
the `def` (or above its first decorator) is a comment starting `# long:` that says why."""

from __future__ import annotations

import ast
from pathlib import Path

from radon.complexity import cc_visit

PKG = Path(__file__).resolve().parents[2] / "drifttool"
MAX_COMPLEXITY = 20  # radon's rank C ends at 20
MAX_LINES = 60
EXEMPT = "# long:"


def sources() -> dict[str, str]:
    """Every module of the package: its path (from the repository root) -> its source."""
    return {str(p.relative_to(PKG.parent)): p.read_text() for p in sorted(PKG.rglob("*.py"))}


def complex_blocks(name: str, text: str, limit: int = MAX_COMPLEXITY) -> list[str]:
    """`file:line name (complexity)` for every function, method or class above `limit`."""
    return [f"{name}:{b.lineno} {b.fullname} ({b.complexity})" for b in cc_visit(text) if b.complexity > limit]


def exempt(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A `# long:` comment on the line directly above the `def`, or directly above its first decorator."""
    above = [node.lineno - 1] + ([node.decorator_list[0].lineno - 1] if node.decorator_list else [])
    return any(n >= 1 and lines[n - 1].strip().startswith(EXEMPT) for n in above)


def long_functions(name: str, text: str, limit: int = MAX_LINES) -> list[str]:
    """`file:line name (lines)` for every function or method over `limit` lines (`def` to its last line) that is
    not exempt."""
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit and not exempt(lines, node):
                out.append(f"{name}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_the_package_is_found():
    assert len(sources()) > 50, PKG


def test_no_block_above_complexity_c():
    bad = [b for name, text in sources().items() for b in complex_blocks(name, text)]
    assert not bad, (f"cyclomatic complexity over {MAX_COMPLEXITY} (radon rank D or worse); split into helpers:\n"
                     + "\n".join(bad))


def test_no_function_over_60_lines_without_a_reason():
    bad = [f for name, text in sources().items() for f in long_functions(name, text)]
    assert not bad, (f"functions over {MAX_LINES} lines; split them, or say why on the line directly above the "
                     f"def ('{EXEMPT} ...'):\n" + "\n".join(bad))


def test_the_rules_bite():
    """A 21-way branch is over the limit (a 19-way one is not); a 61-line function is flagged unless `# long:`
    is on the line directly above its def or its first decorator (a plain comment, or one further up, is not)."""
    def branchy(n: int) -> str:
        return "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(n)) + "    return -1\n"

    assert complex_blocks("m.py", branchy(21)) == ["m.py:1 f (22)"]
    assert complex_blocks("m.py", branchy(19)) == []
    body = "".join(f"    y{i} = x + {i}\n" for i in range(59))
    for above, flagged in {
        "": True,
        "# long: a table of cases\n": False,
        "@staticmethod\n# long: a table of cases\n": False,
        "# long: a table of cases\n@staticmethod\n": False,
        "# a plain comment\n": True,
        "# long: a table of cases\n\n": True,
    }.items():
        text = f"{above}def g(x):\n{body}    return x\n"
        assert bool(long_functions("m.py", text)) is flagged, repr(above)
    assert long_functions("m.py", f"def g(x):\n{body[:-len(body.splitlines(True)[-1])]}    return x\n") == []
