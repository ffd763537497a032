"""Reading traces written by older schemas: what a reader fills in or computes for data an older capture did not
store. A schema-1 trace has no head summary (computed on read from its heads and rounds tables); a resumed trace's
shards before and after an added column are aligned (the column as NaN where missing); a trace captured before
groups existed gets each prompt's group from its id. Columns added to a table since (schema.ADDED) are filled by
trace/key_counts.fill_added."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from .layout import sources
from .schema import ADDED

__all__ = ["group_of_id", "has_summary", "summary_from_heads", "with_added"]

SUMMARY_ROUNDS = ["drafter", "prompt_id", "round", "context_len"]  # the rounds columns a computed summary needs


def has_summary(p: Path, m: dict[str, Any], shards: list[int] | None) -> bool:
    """Every listed file of the head summary exists (schema 3), else it is computed from the heads table."""
    srcs = sources(p, m, "head_summary", only=shards)
    return bool(srcs) and all(s.file.is_file() for s in srcs)


def summary_from_heads(heads: pd.DataFrame, rounds: pd.DataFrame) -> pd.DataFrame:
    """A schema-1 trace's head summary, computed on read from its heads table and its rounds' SUMMARY_ROUNDS."""
    from .summary import head_summary

    return head_summary(heads, rounds)


def with_added(name: str, part, parts):
    """A part without an added column another part has: that column in the other part's type, NaN for a float
    (else concatenation fills nulls), nulls otherwise. In the other part's type: a float64 NaN column beside the
    float32 shards a resumed capture wrote made the whole trace unreadable ("incompatible types")."""
    import pyarrow as pa

    for c in ADDED.get(name, ()):
        if c in part.column_names:
            continue
        typ = next((x.schema.field(c).type for x in parts if c in x.column_names), None)
        if typ is None:
            continue
        col = (pa.array([float("nan")] * part.num_rows, typ) if pa.types.is_floating(typ)
               else pa.nulls(part.num_rows, typ))
        part = part.append_column(pa.field(c, typ), col)
    return part


def group_of_id(ids: pd.Series) -> pd.Series:
    """The group of prompts in a trace that records none: the probe line's id (a cut probe's id is LINE@N)."""
    return ids.astype(str).str.replace(r"@\d+$", "", regex=True)
