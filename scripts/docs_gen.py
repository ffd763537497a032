"""Generate the documentation pages that come from the code: the CLI reference (docs/cli.md, every command's
--help) and the metric table (the block of docs/metrics.md between its markers, from trace/metric_table.py).

`--check` writes nothing and exits 1 naming each page that differs from what the code generates (the test command
runs it, so a page edited by hand or left behind by a code change fails there)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- metric-table:begin (scripts/docs_gen.py) -->", "<!-- metric-table:end -->"


def cli_page() -> str:
    """Every command's --help as the CLI prints it (plain text, 100 columns)."""
    import typer
    from typer.testing import CliRunner

    from drifttool.cli import app

    runner = CliRunner()
    env = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
    root = typer.main.get_command(app)
    parts = ["# CLI reference", "",
             "Generated from the command-line app (`scripts/docs_gen.py`); `drifttool COMMAND --help` prints the same.",
             ""]
    for name in ["", *root.list_commands(None)]:
        r = runner.invoke(app, [*([name] if name else []), "--help"], env=env, prog_name="drifttool")
        parts += [f"## drifttool {name}".rstrip(), "", "```text", _plain(r.output), "```", ""]
    return "\n".join(parts).rstrip() + "\n"


def _plain(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return "\n".join(ln.rstrip() for ln in text.splitlines()).strip("\n")


def metric_block() -> str:
    from drifttool.trace.metric_table import describe

    rows = describe()
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(out)


def with_block(text: str, block: str) -> str:
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:a] + "\n" + block + "\n" + text[b:]


def pages() -> dict[Path, str]:
    metrics = ROOT / "docs" / "metrics.md"
    return {ROOT / "docs" / "cli.md": cli_page(), metrics: with_block(metrics.read_text(), metric_block())}


def main(argv: list[str]) -> int:
    stale = []
    for path, text in pages().items():
        if path.is_file() and path.read_text() == text:
            continue
        if "--check" in argv:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"docs_gen: {', '.join(stale)} differ from what the code generates; run python scripts/docs_gen.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
