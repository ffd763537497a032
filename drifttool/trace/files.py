"""Trace-folder file operations shared by the writer and the compactor: the writer lock, atomic JSON, and
`settle` (make the folder match its manifest after a crash)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import DriftError
from .layout import generation

LOCK = ".lock"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def lock_trace(path: Path, hint: str = "wait for it to finish"):
    """Hold the trace folder's writer lock (released by the OS when the process dies); DriftError if held."""
    from filelock import FileLock, Timeout

    try:
        path.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path / LOCK, timeout=0)
        lock.acquire()
    except Timeout:
        raise DriftError(
            f"{path}: another capture is writing this trace (lock {LOCK} held); {hint}"
        ) from None
    except OSError as e:
        raise DriftError(f"{path}: cannot create the trace folder ({e.strerror})") from None
    return lock


def _committed_tokens(m: dict[str, Any]) -> Any:
    """The token table file manifest `m` lists (None until a merge commits one)."""
    return (m.get("tokenizer") or {}).get("tokens")


def _settle_top_file(path: Path, p: Path, m: dict[str, Any], tmp: bool, name: str) -> Path | None:
    """A file at the trace's top level: a committed token table still under its hidden name is to be renamed
    (its destination returned); other hidden files and a tokenizer.json copy the token table replaced are deleted."""
    if name == "tokens.parquet" and tmp and _committed_tokens(m) == name and not (path / name).exists():
        return path / name
    if tmp:  # e.g. an interrupted manifest write, or a merge's uncommitted token table
        p.unlink()
    elif name == "tokenizer.json" and _committed_tokens(m):
        p.unlink()  # a merge committed its token table; the copy was left by a crash
    return None


def _settle_table_file(p: Path, name: str, tmp: bool, listed: dict[int, dict[str, Any]], gen: int) -> Path | None:
    """A file in a table folder: a shard part the manifest lists unmerged, or the merged file of its generation,
    is kept (renamed into place when hidden: its destination returned); any other part or merged file is deleted.
    Files not named as ours are left alone (hidden .tmp ones deleted)."""
    kind, _, rest = name.partition("-")
    idx = rest.split(".")[0]
    if kind not in ("part", "merged") or not idx.isdigit():  # not ours (e.g. "part-00001 (copy).parquet")
        if p.name.endswith(".tmp"):
            p.unlink()
        return None
    if kind == "part":
        keep = int(idx) in listed and not isinstance(listed[int(idx)].get("merged"), int)
    else:
        keep = int(idx) == gen
    if not keep:
        p.unlink()
        return None
    return p.with_name(name) if tmp else None


def settle(path: Path, m: dict[str, Any]) -> None:
    """Make the folder match manifest `m`: everything of ours it does not list (uncommitted shards, shard files a
    merge replaced, older merged files) is deleted first, then the hidden files it lists are renamed into place
    (in that order, so a plain Parquet folder reader never sees a prompt twice)."""
    listed = {s["index"]: s for s in m["shards"]}
    gen = generation(m)
    renames: list[tuple[Path, Path]] = []
    for p in list(path.rglob("*")):
        if not p.is_file():
            continue
        tmp = p.name.startswith(".") and p.name.endswith(".tmp")
        name = p.name[1:-4] if tmp else p.name
        if p.parent == path:
            dst = _settle_top_file(path, p, m, tmp, name)
        else:
            dst = _settle_table_file(p, name, tmp, listed, gen)
        if dst is not None:
            renames.append((p, dst))
    for src, dst in renames:
        os.replace(src, dst)
