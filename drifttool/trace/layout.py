"""Where a table's rows live on disk, and the stored <-> read form of a table.

A shard entry of the manifest without `merged` lives in `TABLE/part-NNNNN.parquet` (one file per completed
prompt, written while a capture runs); one with `merged: G` lives in `TABLE/merged-GGG.parquet`, one row group
per shard (compact.py writes it when a capture finishes). A file listed by a committed manifest whose rename
was interrupted is taken under its hidden temporary name (`.NAME.tmp`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DriftError
from . import metric_table
from .schema import DERIVED, DICT_COLUMNS


def member(root: Path, rel: str) -> Path:
    """`root/rel`, refused when it (or a link on the way) resolves outside the trace folder. Checked at every
    read, so a file swapped for a link after the trace was first opened is refused too."""
    f = root / rel
    if not f.resolve().is_relative_to(root.resolve()):
        raise DriftError(f"{f}: a link to {f.resolve()}, outside the trace folder {root}; refused")
    return f


def committed(root: Path, rel: str) -> Path:
    """A listed file; under its hidden temporary name when a commit was interrupted before its rename."""
    f = member(root, rel)
    if not f.exists():
        folder, _, name = rel.rpartition("/")
        tmp = member(root, f"{folder}/.{name}.tmp" if folder else f".{name}.tmp")
        if tmp.is_file():
            return tmp
    return f


def part_name(index: int, ext: str = "parquet") -> str:
    return f"part-{index:05d}.{ext}"


def merged_name(gen: int, ext: str = "parquet") -> str:
    return f"merged-{gen:03d}.{ext}"


def shard_file(root: Path, table: str, index: int, ext: str = "parquet") -> Path:
    """A listed (unmerged) shard's file."""
    return committed(root, f"{table}/{part_name(index, ext)}")


def shard_prompts(m: dict[str, Any], shard: dict[str, Any]) -> list[str] | None:
    """The prompt ids a shard's rows may hold: its listed prompts, less the `DRAFTER:` prefix where the capture's
    `shard_key` says shards are keyed DRAFTER:PROMPT (an engine that runs drafters one by one). Traces written
    before the key was generic keep it in their engine's block (capture.vllm.shard_key)."""
    prompts, cap = shard.get("prompts"), m["capture"]
    legacy = cap.get("vllm") if isinstance(cap.get("vllm"), dict) else {}
    key = cap.get("shard_key") or legacy.get("shard_key")
    if prompts is None or key != "DRAFTER:PROMPT":
        return prompts
    names = [d["name"] for d in m["drafters"]]
    return [p[len(n) + 1 :] for p in prompts for n in names if p.startswith(n + ":")]


@dataclass
class Source:
    """One file holding a table's rows for some shards: a shard's part file or a merged file."""

    file: Path
    shards: list[int]
    prompts: list[str] | None
    merged: int | None = None
    entries: list[dict] = field(default_factory=list)


def generation(m: dict[str, Any]) -> int:
    """The merged-file generation the manifest lists (0: none merged)."""
    return max((int(s["merged"]) for s in m["shards"] if isinstance(s.get("merged"), int)), default=0)


def sources(
    root: Path, m: dict[str, Any], table: str, ext: str = "parquet", only: list[int] | None = None
) -> list[Source]:
    """The files holding `table`'s rows, in shard order (`only`: those of these shard indexes)."""
    out: list[Source] = []
    merged: dict[int, Source] = {}
    for s in m["shards"]:
        if only is not None and s["index"] not in only:
            continue
        prompts = shard_prompts(m, s)
        g = s.get("merged")
        if isinstance(g, int) and not isinstance(g, bool):
            if g not in merged:
                merged[g] = Source(committed(root, f"{table}/{merged_name(g, ext)}"), [], [], g)
                out.append(merged[g])
            src = merged[g]
            src.shards.append(s["index"])
            src.entries.append(s)
            if src.prompts is not None and prompts is not None:
                src.prompts.extend(prompts)
            else:
                src.prompts = None
        else:
            out.append(Source(shard_file(root, table, s["index"], ext), [s["index"]], prompts, None, [s]))
    return out


def stored_columns(table: str, columns: list[str]) -> list[str]:
    """The columns to read for `columns`: derived ones replaced by their inputs, recursively (kept too: a trace may
    store them), and the inputs a missing added column is filled from (trace/key_counts.py)."""
    from .key_counts import FILL_INPUTS

    out = list(columns)
    i = 0
    while i < len(out):
        c = out[i]
        for need in (*DERIVED.get(table, {}).get(c, ()), *FILL_INPUTS.get(table, {}).get(c, ())):
            if need not in out:
                out.append(need)
        i += 1
    return out


def add_derived(table: str, tbl: pa.Table, wanted: list[str] | None) -> pa.Table:
    """Compute the derived columns a table lacks (float32, in the capture's order of operations; a derived input of
    another derived column comes first in DERIVED)."""
    want = None if wanted is None else set(stored_columns(table, list(wanted)))
    for c, ins in DERIVED.get(table, {}).items():
        if c in tbl.column_names or (want is not None and c not in want):
            continue
        if not all(i in tbl.column_names for i in ins):
            continue
        tbl = tbl.append_column(c, _formula(c, [tbl.column(i) for i in ins]))
    return _schema_order(table, tbl)


def _formula(c: str, cols: list) -> pa.Array:
    """The derived columns' definitions (trace/schema.py DERIVED says which inputs)."""
    f32 = [pc.cast(x, pa.float32()) for x in cols]
    m = metric_table.by_name().get(c)
    if m is not None and m.kind == "derived":  # a sum of masses, or 1 - the sum (float32, in the table's order)
        if m.complement:
            out = pa.scalar(1.0, pa.float32())
            for x in f32:
                out = pc.subtract(out, x)
            return out
        out = f32[0]
        for x in f32[1:]:
            out = pc.add(out, x)
        return out
    nan = pa.scalar(float("nan"), pa.float64())
    f64 = [pc.cast(x, pa.float64()) for x in cols]
    if c == "entropy_norm":  # entropy / log(n_keys); NaN with fewer than 2 keys
        return pc.if_else(pc.greater(f64[1], 1.0), pc.divide(f64[0], pc.ln(f64[1])), nan)
    # a lift: mass / (count / n_keys), NaN where the key set is empty (or its count unknown)
    mass, count, keys = f64
    return pc.if_else(pc.greater(count, 0.0), pc.divide(pc.multiply(mass, keys), count), nan)


def _schema_order(table: str, tbl: pa.Table) -> pa.Table:
    """Derived columns where the schema lists them (after the column before them there), not at the end."""
    from .schema import TABLES

    order = [c for c in tbl.column_names if c not in DERIVED.get(table, {})]
    for c in DERIVED.get(table, {}):
        if c not in tbl.column_names:
            continue
        cols = TABLES[table]
        before = next((b for b in reversed(cols[: cols.index(c)]) if b in order), None)
        order.insert(order.index(before) + 1 if before else len(order), c)
    return tbl.select(order)


def to_stored(table: str, tbl: pa.Table) -> pa.Table:
    """The stored form: derived columns dropped, key strings dictionary-encoded, no pandas metadata."""
    drop = [c for c in DERIVED.get(table, {}) if c in tbl.column_names]
    tbl = tbl.drop_columns(drop) if drop else tbl
    return keys_categorical(tbl).replace_schema_metadata(None)


_DICT = pa.dictionary(pa.int32(), pa.string())


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """Encodings for a stored table: dictionaries for the key strings only (a dictionary of unique floats costs
    more than the floats), byte-stream-split for floats (their exponent bytes then compress)."""
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    return {
        "use_dictionary": [c for c in DICT_COLUMNS if c in schema.names],
        "column_encoding": {c: "BYTE_STREAM_SPLIT" for c in floats} or None,
        "compression": "zstd",
    }


def keys_categorical(tbl: pa.Table) -> pa.Table:
    """Key strings as dictionary<int32, string> (pandas categoricals): one copy of each name instead of one per
    row, and one type whatever index width the file's writer chose (files concatenate)."""
    for i, name in enumerate(tbl.column_names):
        t = tbl.schema.field(i).type
        if name not in DICT_COLUMNS or t == _DICT:
            continue
        if pa.types.is_dictionary(t) and pa.types.is_string(t.value_type):
            tbl = tbl.set_column(i, pa.field(name, _DICT), pc.cast(tbl.column(i), _DICT))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            tbl = tbl.set_column(
                i, pa.field(name, _DICT), pc.dictionary_encode(pc.cast(tbl.column(i), pa.string()))
            )
    return tbl
