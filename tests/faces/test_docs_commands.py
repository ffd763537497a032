"""Every `drifttool` command in the README's and docs' shell blocks names a command that exists and only options that
command takes (issue #62: lines that fail when pasted). Each command line (continuations joined, trailing comments
dropped) is read with shlex; its subcommand path is looked up in the CLI's own click tree and every `--option` /
`-o` token checked against that command's parameters. Placeholders (`...`, MODEL) are not values to check; an
option name is, wherever it appears."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from drifttool.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)


def _lines(text: str) -> list[str]:
    out = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [ln.strip().removeprefix("$ ") for ln in joined.splitlines()]
    return out


def _commands() -> list[tuple[str, list[str]]]:
    """(where, the tokens after `drifttool`) of every drifttool command line in the docs' shell blocks."""
    found = []
    for doc in DOCS:
        for ln in _lines(doc.read_text()):
            ln = re.split(r"\s#\s|\s#$", ln)[0]  # a trailing comment
            for part in re.split(r"\s(?:&&|\|\||;|\|)\s", ln):
                try:
                    toks = shlex.split(part)
                except ValueError:
                    continue
                for i, t in enumerate(toks):
                    if t == "drifttool" or (t.endswith("/drifttool") and "=" not in t) or (t == "-m" and toks[i + 1:i + 2] ==
                                                                         ["drifttool.cli"]):
                        rest = toks[i + (2 if t == "-m" else 1):]
                        if rest and not rest[0].startswith(("<", "[")):
                            found.append((f"{doc.relative_to(REPO)}: {part[:80]}", rest))
                        break
    return found


def _resolve(root, args: list[str]) -> tuple[object, list[str], str]:
    """The (sub)command `args` name (typer's own click: a group is whatever has `commands`), its other args."""
    cmd, path = root, []
    while getattr(cmd, "commands", None) and args and not args[0].startswith("-"):
        sub = cmd.commands.get(args[0])
        assert sub is not None, f"no command {' '.join([*path, args[0]])!r} (there are {sorted(cmd.commands)})"
        cmd, path, args = sub, [*path, args[0]], args[1:]
    return cmd, args, " ".join(path)


def _options(cmd) -> set[str]:
    names = {"--help"}
    for p in cmd.params:
        names.update(getattr(p, "opts", []))
        names.update(getattr(p, "secondary_opts", []))
    return names


COMMANDS = _commands()


def test_the_docs_have_commands_to_check():
    subs = {args[0] for _, args in COMMANDS}
    assert len(COMMANDS) > 30 and {"capture", "compare", "check", "patch", "conform", "dashboard"} <= subs, subs


@pytest.mark.parametrize("where,args", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_exists_with_its_options(where, args):
    root = typer.main.get_command(app)
    cmd, rest, path = _resolve(root, args)
    known = _options(cmd)
    for tok in rest:
        if tok.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", tok) and tok not in ("-", "--"):
            name = tok.split("=", 1)[0]
            assert name in known, f"{where}: `drifttool {path}` has no option {name} (it takes {sorted(known)})"
