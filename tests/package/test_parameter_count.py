"""No function of the package outside the CLI takes more than 10 parameters: settings travel as one object
(run.runner.RunSettings, PromptJob, Output; run.loop.Decoding), not as long positional lists. `self` / `cls` do not
count; `*args` and `**kwargs` count one each. cli.py is exempt: typer reads each option from a parameter."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "drifttool"
MAX_PARAMS = 10


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    n = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if names and names[0].arg in ("self", "cls") else 0)


def wide_functions(name: str, text: str, limit: int = MAX_PARAMS) -> list[str]:
    """`file:line name (parameters)` for every function or method above `limit`."""
    return [f"{name}:{n.lineno} {n.name} ({parameter_count(n)})" for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(n) > limit]


def test_no_package_function_outside_the_cli_takes_more_than_ten_parameters():
    wide = [w for p in sorted(PKG.rglob("*.py")) if p.name != "cli.py"
            for w in wide_functions(str(p.relative_to(PKG.parent)), p.read_text())]
    assert not wide, "more than 10 parameters (pass a settings object):\n" + "\n".join(wide)


def test_the_count_sees_keyword_only_and_star_parameters_and_skips_self():
    src = ("def f(a, b, /, c, *args, d, e=1, **kw): pass\n"
           "class C:\n    def m(self, a, b, c, d, e, f, g, h, i, j): pass\n    def w(self, *, a, b, c, d, e, f, g, h, i, j, k): pass\n")
    assert wide_functions("x.py", src, limit=6) == ["x.py:1 f (7)", "x.py:3 m (10)", "x.py:4 w (11)"]
    assert wide_functions("x.py", src) == ["x.py:4 w (11)"]
