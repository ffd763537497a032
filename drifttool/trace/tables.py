"""Reading a trace's tables: the Parquet files the manifest lists for one table, each checked on its own (columns,
nulls, types, prompt ids: validate.py), concatenated, derived columns computed, values checked once, and returned
as a DataFrame with sorted key categories. Older schemas' gaps are filled by trace/migrate.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DriftError
from .key_counts import fill_added
from .layout import Source, add_derived, keys_categorical, sources, stored_columns
from .manifest_check import read_manifest
from .migrate import SUMMARY_ROUNDS, has_summary, summary_from_heads, with_added
from .schema import ADDED, DICT_COLUMNS, KEY, STORED, SUMMARIES, TABLES, TREE_TABLES
from .validate import check_prompts, check_types, check_values

__all__ = ["read_part", "read_table", "sorted_categories"]


def read_part(f: Path, name: str, required: list[str], columns: list[str] | None = None,
              prompts: list[str] | None = None, depth: int | None = None, nonfinite: dict | None = None):
    """One file (a shard's or a merged one) as an Arrow table, checked on its own: concatenating files would
    silently fill a column that one lacks (or holds only as nulls) with nulls. Types and ranges: validate.py."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)  # half the per-file overhead of pq.read_table
        have = set(pf.schema_arrow.names)
        part = pf.read(columns=None if columns is None else [c for c in columns if c in have])
    except (pa.ArrowException, OSError, ValueError) as e:
        raise DriftError(f"{f}: corrupt or truncated Parquet ({str(e).splitlines()[0]})") from None
    need = [c for c in required if c not in part.column_names]
    if need:
        raise DriftError(f"{f}: missing columns {need} (table {name!r})")
    nulls = [c for c in required if part.num_rows and (pa.types.is_null(part.schema.field(c).type)
                                                       or c in KEY and part.column(c).null_count)]
    if nulls:
        raise DriftError(f"{f}: columns {nulls} hold nulls (table {name!r})")
    check_types(f, name, part)
    check_prompts(f, part, prompts)
    if nonfinite is not None:  # a lone file (rows_index): its values here; tables: once, concatenated
        check_values(f, name, part, depth, nonfinite)
    return keys_categorical(part)


def _required(name: str, columns: list[str] | None) -> list[str]:
    """Stored columns a file must hold for the requested (or all) columns of a table."""
    cols = columns or TABLES.get(name) or TREE_TABLES.get(name) or SUMMARIES[name]
    added = ADDED.get(name, ())
    if name not in TABLES:
        return [c for c in cols if c not in added]
    return [c for c in stored_columns(name, list(cols))
            if (c in STORED[name] or c not in TABLES[name]) and c not in added and c != "attn_window_start"]


def _all_columns(name: str) -> list[str]:
    """Every column a table (or summary) has, derived ones included."""
    return {**TABLES, **TREE_TABLES}.get(name) or SUMMARIES[name]


def _check_present(srcs: list[Source], name: str) -> None:
    """Every file the manifest lists for the table exists (a missing one is damage, not an empty table)."""
    for src in srcs:
        if not src.file.is_file():
            what = f"shard {src.shards[0]}" if src.merged is None else f"merged file of {len(src.shards)} shards"
            raise DriftError(f"{src.file}: missing (table {name!r} of {what}); the trace is damaged")


def _read_parts(srcs: list[Source], name: str, required: list[str], read: list[str] | None) -> list:
    """Each file as an Arrow table, checked on its own; many small shards: per-file overhead dominates, and
    Arrow releases the GIL while decoding, so they are read on a few threads."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda src: read_part(src.file, name, required, read, src.prompts), srcs))


def _concat_parts(p: Path, name: str, parts: list):
    """The parts as one Arrow table; a resumed trace's shards before and after an added column are aligned."""
    import pyarrow as pa

    if len({tuple(x.column_names) for x in parts}) > 1:
        parts = [with_added(name, x, parts) for x in parts]
    try:
        return pa.concat_tables(parts, promote_options="default")
    except (pa.ArrowException, ValueError) as e:
        raise DriftError(f"{p / name}: shards are corrupt or have incompatible columns ({str(e).splitlines()[0]})") from None


def _checked_values(p: Path, name: str, tbl, srcs: list[Source], parts: list, columns: list[str] | None,
                    depth: int | None) -> dict[str, int]:
    """Value checks once over all files (NaN/inf counts returned); on failure, file by file to name the file."""
    counts: dict[str, int] = {}
    try:
        check_values(p / name, name, tbl, depth, counts)
    except DriftError:
        for src, part in zip(srcs, parts):
            check_values(src.file, name, add_derived(name, part, columns), depth, {})
        raise
    return counts


def _to_frame(p: Path, name: str, tbl, columns: list[str] | None) -> pd.DataFrame:
    """The requested (or all) columns as a DataFrame, each one present, key categories sorted."""
    import pyarrow as pa

    if columns is not None:
        tbl = tbl.select([c for c in columns if c in tbl.column_names])
    try:
        df = tbl.to_pandas()
    except (pa.ArrowException, ValueError) as e:
        raise DriftError(f"{p / name}: shards are corrupt or have incompatible columns ({str(e).splitlines()[0]})") from None
    need = [c for c in (columns or _all_columns(name)) if c not in df.columns]
    if need:
        raise DriftError(f"{p / name}: missing columns {need}")
    return sorted_categories(df)


def read_table(path, name: str, manifest: dict[str, Any] | None = None, columns: list[str] | None = None,
               nonfinite: dict[str, int] | None = None, shards: list[int] | None = None) -> pd.DataFrame:
    """Concatenate the files the manifest lists for one table (each validated); NaN/inf counts of the lenient
    float columns go to `nonfinite`. Derived columns (schema.DERIVED) are computed when not stored;
    `shards`: only these shard indexes' rows (a merged file is read whole)."""
    p = Path(path)
    m = manifest or read_manifest(p)
    tables = {**TABLES, **TREE_TABLES}
    if name not in tables and name not in SUMMARIES:
        raise DriftError(f"table {name!r}: unknown; expected one of {', '.join(tables)}")
    if name in SUMMARIES and not has_summary(p, m, shards):  # schema-1 trace: migrated on read
        return summary_from_heads(read_table(p, "heads", m, nonfinite=nonfinite, shards=shards),
                                  read_table(p, "rounds", m, SUMMARY_ROUNDS, shards=shards))
    srcs = sources(p, m, name, only=shards)
    _check_present(srcs, name)
    depth = m["capture"].get("depth")
    required = _required(name, columns)
    parts = _read_parts(srcs, name, required, None if columns is None else stored_columns(name, list(columns)))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in (columns or _all_columns(name))})
    tbl = add_derived(name, _concat_parts(p, name, parts), columns)
    counts = _checked_values(p, name, tbl, srcs, parts, columns, depth)
    # columns added after the trace was written: derived where it allows, else NaN (not checked: no measurement)
    tbl = add_derived(name, fill_added(name, tbl, m, None if columns is None else stored_columns(name, columns)),
                      columns)
    if nonfinite is not None:
        for k, v in counts.items():
            nonfinite[k] = nonfinite.get(k, 0) + v
    return _to_frame(p, name, tbl, columns)


def sorted_categories(df: pd.DataFrame) -> pd.DataFrame:
    """Key categoricals with their categories in sorted order, so grouping by them orders groups as plain
    strings would (the bootstrap's prompt order, hence its intervals, stay those of a string column)."""
    for c in DICT_COLUMNS:
        if c in df.columns and isinstance(df[c].dtype, pd.CategoricalDtype):
            cats = df[c].cat.categories
            if not cats.is_monotonic_increasing:
                df[c] = df[c].cat.reorder_categories(sorted(cats))
    return df
