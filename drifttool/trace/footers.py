"""Cheap whole-trace check for loaders that read tables lazily: every file the manifest lists exists inside the
folder and opens as Parquet with the columns its table needs, without decoding any rows (footers only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DriftError
from .layout import committed, sources
from .schema import ROWS_INDEX, STORED, SUMMARIES, TREE_TABLES, required


def _columns(f: Path, table: str, need: list[str]) -> None:
    try:
        names = set(pq.read_schema(f).names)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise DriftError(f"{f}: corrupt or truncated Parquet ({str(e).splitlines()[0]})") from None
    lost = [c for c in required(table, need) if c not in names]
    if lost:
        raise DriftError(f"{f}: missing columns {lost} (table {table!r})")


def check_files(root: Path, m: dict[str, Any]) -> None:
    """DriftError naming the first listed file that is missing, links outside, is not Parquet or lacks columns."""
    with_rows = [s["index"] for s in m["shards"] if s.get("rows")]
    plan = [(t, cols, None) for t, cols in STORED.items()] + [("rows_index", ROWS_INDEX, with_rows)]
    if m["capture"].get("tree"):  # draft-tree captures also write per-node tables
        plan += [(t, cols, None) for t, cols in TREE_TABLES.items()]
    summary = sources(root, m, "head_summary")
    if summary and all(s.file.is_file() for s in summary):  # else computed from heads (schema 1)
        plan.append(("head_summary", SUMMARIES["head_summary"], None))
    for table, cols, only in plan:
        for src in sources(root, m, table, only=only):
            if not src.file.is_file():
                what = (
                    f"shard {src.shards[0]}"
                    if src.merged is None
                    else f"merged file of {len(src.shards)} shards"
                )
                raise DriftError(f"{src.file}: missing (table {table!r} of {what}); the trace is damaged")
            _columns(src.file, table, cols)


def read_tokens(root: Path, rel: str) -> dict[int, str]:
    """The token table of a compact trace (id -> text), for hover text and the drill-down."""
    f = committed(root, rel)
    try:
        t = pq.read_table(f, columns=["id", "text"])
    except (pa.ArrowException, OSError, ValueError, KeyError) as e:
        raise DriftError(
            f"{f}: corrupt token table ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    return dict(zip(t.column("id").to_pylist(), t.column("text").to_pylist()))
