"""Compact a trace: merge its shards into one file per table (one row group per shard), as a capture finishes
or on demand (`drifttool compact OLD.drift`, which also migrates a schema-1 trace to the current form).

Crash safety: every merged file is first written under a hidden name (`TABLE/.merged-GGG.parquet.tmp`);
the manifest rewrite that points the shards at generation G is the commit point; then the replaced files are
deleted and the merged ones renamed into place. A crash before the commit leaves the old trace (hidden files
are ignored, and deleted by the next writer); after it, readers take the hidden names until the next writer
or `drifttool compact` finishes the renames (writer.settle). The token table replaces the 3.5 MB
tokenizer.json copy: only the ids the trace holds, with their text, plus the tokenizer's sha256."""

from __future__ import annotations

import copy
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DriftError
from .files import lock_trace, settle, write_json_atomic
from .layout import add_derived, generation, merged_name, parquet_options, sources, to_stored
from .manifest_check import read_manifest
from .schema import DERIVED, ROWS_INDEX, SCHEMA_VERSION, STORED, SUMMARIES, TREE_TABLES, required
from .summary import head_summary
from .tables import read_part
from .validate import check_values

_TABLES = [*STORED, *TREE_TABLES, "head_summary", "rows_index"]
_ST_DTYPES = {
    "float32": "F32",
    "float16": "F16",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
}


# id columns whose text the dashboard shows (drill-down rows, draft-tree node labels)
_TOKEN_COLUMNS = {"depths": ("input_id", "draft_id", "target_id"), "tree_nodes": ("draft_id", "target_id")}


def _units(path: Path, m: dict, table: str, only: list[int] | None):
    """(file, row group or None, shard indexes, prompts) per unit of rows: a part file, or one row group of a
    previously merged file (one per shard)."""
    for src in sources(path, m, table, only=only):
        if src.merged is None:
            yield src.file, None, src.shards, src.prompts
        else:
            n = pq.ParquetFile(src.file).num_row_groups if src.file.is_file() else 0
            for i in range(n):
                yield src.file, i, src.shards, src.prompts


def _read_unit(f: Path, rg: int | None, table: str, prompts, depth) -> pa.Table:
    need = required(table, SUMMARIES.get(table) or (
        ROWS_INDEX if table == "rows_index" else STORED.get(table) or TREE_TABLES[table]
    ))
    if not f.is_file():
        raise DriftError(f"{f}: missing (table {table!r}); the trace is damaged; nothing was changed")
    if rg is None:
        t = read_part(f, table, need, prompts=prompts, depth=depth, nonfinite={})
    else:
        try:
            t = pq.ParquetFile(f).read_row_group(rg)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise DriftError(f"{f}: corrupt or truncated Parquet ({str(e).splitlines()[0]})") from None
        check_values(f, table, t, depth, {})
    if table in DERIVED:  # schema 1 stored them: refuse values that disagree with their definition
        import pyarrow.compute as pc

        had = [c for c in DERIVED[table] if c in t.column_names]
        again = add_derived(table, t.drop_columns(had), None)
        check_values(f, table, again, depth, {})
        for c in had:
            d = pc.max(
                pc.abs(
                    pc.subtract(pc.cast(t.column(c), pa.float64()), pc.cast(again.column(c), pa.float64()))
                )
            )
            if d.as_py() is not None and d.as_py() > 1e-4:
                raise DriftError(
                    f"{f}: column {c!r} differs from its definition by up to {d.as_py():.3g} "
                    f"(table {table!r}); the trace is damaged; nothing was changed"
                )
    return to_stored(table, t)


def _summary_unit(path: Path, m: dict, shard: int, depth) -> pa.Table | None:
    """The head summary of one shard of a schema-1 trace (computed from its heads and rounds)."""
    ((hf, _, _, prompts),) = _units(path, m, "heads", [shard])
    ((rf, _, _, _),) = _units(path, m, "rounds", [shard])
    heads = _read_unit(hf, None, "heads", prompts, depth).to_pandas()
    rounds = _read_unit(rf, None, "rounds", prompts, depth).to_pandas()
    return to_stored("head_summary", pa.Table.from_pandas(head_summary(heads, rounds), preserve_index=False))


class _TableMerge:
    """One table's units of rows on their way into one merged file: which units, each one's rows and schema
    (a schema-1 head summary is computed once, in the schema pass, and kept for the write pass)."""

    def __init__(self, path: Path, m: dict, table: str) -> None:
        self.path, self.m, self.table = path, m, table
        self.depth = m["capture"].get("depth")
        self.computed: dict[int, pa.Table] = {}

    def units(self, only: list[int] | None) -> list[tuple]:
        """The units to merge; none when no shard wrote the table (e.g. hand-made traces without prompts).
        A schema-1 head summary is one computed unit per shard (from heads and rounds)."""
        path, m, table = self.path, self.m, self.table
        units = list(_units(path, m, table, only))
        have = [f.is_file() for f, *_ in units]
        if table == "head_summary" and not all(have):
            if not all(f.is_file() for f, *_ in _units(path, m, "heads", None)):
                return []
            return [(None, None, [s["index"]], None) for s in m["shards"]]
        return units if any(have) else []

    def load(self, u: tuple) -> pa.Table:
        """A unit's rows in the stored form (rows_index part files gain their shard column)."""
        f, rg, shards, prompts = u
        if f is None:
            return _summary_unit(self.path, self.m, shards[0], self.depth)
        t = _read_unit(f, rg, self.table, prompts, self.depth)
        if self.table == "rows_index" and rg is None:
            t = t.append_column("shard", pa.array(np.full(t.num_rows, shards[0], np.int64)))
        return t

    def schema(self, i: int, u: tuple) -> pa.Schema:
        """A unit's stored schema, read from the Parquet footer without its rows where it can be."""
        f, rg, shards, _ = u
        if f is None:  # a computed head summary (small): kept for the write pass
            self.computed[i] = self.load(u)
            return self.computed[i].schema
        try:
            s = pq.ParquetFile(f).schema_arrow if f.is_file() else self.load(u).schema  # missing: load raises
        except (pa.ArrowException, OSError, ValueError) as e:
            raise DriftError(f"{f}: corrupt or truncated Parquet ({str(e).splitlines()[0]})") from None
        t = to_stored(self.table, s.empty_table())
        if self.table == "rows_index" and rg is None:
            t = t.append_column("shard", pa.array([], pa.int64()))
        return t.schema

    def rows(self, i: int, u: tuple) -> pa.Table:
        """Unit i's rows (computed in the schema pass, or read now)."""
        return self.computed.pop(i) if i in self.computed else self.load(u)


def _to_schema(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """`t` in the unified schema: columns it lacks as nulls, all in the schema's order and types."""
    for fld in schema:
        if fld.name not in t.column_names:
            t = t.append_column(fld.name, pa.nulls(t.num_rows, fld.type))
    return t.select(schema.names).cast(schema)


def _note_token_ids(table: str, t: pa.Table, ids: set[int]) -> None:
    """Add to `ids` every token id a dashboard page may show from `t` (the token table keeps their text)."""
    for c in _TOKEN_COLUMNS.get(table, ()):
        ids.update(v for v in np.unique(t.column(c).to_numpy()).tolist() if v >= 0)
    if table == "rows_index":
        for v in t.column("slot_tokens").to_pylist():
            ids.update(v or [])


def _merge_table(path: Path, m: dict, table: str, out: Path, ids: set[int]) -> bool:
    """Write `table`'s rows, one row group per unit, to `out` (all units first cast to one unified schema)."""
    only = [s["index"] for s in m["shards"] if s.get("rows")] if table == "rows_index" else None
    merge = _TableMerge(path, m, table)
    units = merge.units(only)
    if not units:
        return False
    schema = pa.unify_schemas([merge.schema(i, u) for i, u in enumerate(units)], promote_options="permissive")
    w = pq.ParquetWriter(out, schema, compression_level=9, **parquet_options(schema))  # written once: smaller
    try:
        for i, u in enumerate(units):
            t = _to_schema(merge.rows(i, u), schema)
            _note_token_ids(table, t, ids)
            w.write_table(t, row_group_size=max(1, t.num_rows))
    finally:
        w.close()
    return True


def _merge_rows(path: Path, m: dict, out: Path) -> bool:
    """Stream every sampled-rows tensor into one safetensors file (one tensor in memory at a time)."""
    from safetensors import safe_open

    files = [
        s.file
        for s in sources(
            path, m, "rows", "safetensors", only=[s["index"] for s in m["shards"] if s.get("rows")]
        )
    ]
    if not files:
        return False
    header: dict[str, Any] = {}
    where: list[tuple[Path, str]] = []
    off = 0
    for f in files:
        try:
            with safe_open(str(f), "np") as st:
                for k in st.keys():
                    if k in header:
                        raise DriftError(
                            f"{f}: sampled row {k!r} appears in two shards; the trace is damaged"
                        )
                    a = st.get_tensor(k)
                    dt = _ST_DTYPES.get(str(a.dtype))
                    if dt is None:
                        raise DriftError(f"{f}: sampled row {k!r} has dtype {a.dtype}; cannot merge it")
                    header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
                    off += a.nbytes
                    where.append((f, k))
        except DriftError:
            raise
        except Exception as e:  # noqa: BLE001 - any corruption is a user-facing data error
            raise DriftError(
                f"{f}: corrupt sampled rows ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
            ) from None
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(out, "wb") as o:
        o.write(struct.pack("<Q", len(head)))
        o.write(head)
        for f, k in where:
            with safe_open(str(f), "np") as st:
                o.write(np.ascontiguousarray(st.get_tensor(k)).tobytes())
    return True


def _tokens(path: Path, ids: set[int], out: Path) -> dict | None:
    """The trace's token ids with their text, from the tokenizer.json capture copied in; None without one."""
    f = path / "tokenizer.json"
    if not f.is_file() or f.is_symlink():
        return None
    from tokenizers import Tokenizer

    data = f.read_bytes()
    try:
        tok = Tokenizer.from_str(data.decode())
    except Exception as e:  # noqa: BLE001 - a broken copy: keep it, merge the rest
        raise DriftError(f"{f}: not a tokenizers JSON file ({str(e).splitlines()[0]})") from None
    keep = sorted(i for i in ids if 0 <= i < tok.get_vocab_size(with_added_tokens=True))
    text = [tok.decode([i], skip_special_tokens=False) for i in keep]
    pq.write_table(
        pa.table({"id": pa.array(keep, pa.int64()), "text": pa.array(text, pa.string())}),
        out,
        compression="zstd",
    )
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "tokens": "tokens.parquet",
        "n_tokens": len(keep),
    }


def merge_shards(path: Path, m: dict[str, Any]) -> dict[str, Any]:
    """Merge every shard of the trace at `path` (manifest `m`, lock held by the caller) into generation G+1;
    returns the committed manifest. A DriftError leaves the trace as it was."""
    path = Path(path)
    if not m["shards"]:
        return m
    gen = generation(m) + 1
    staged: list[Path] = []
    ids: set[int] = set()
    try:
        for table in _TABLES:
            (path / table).mkdir(exist_ok=True)
            out = path / table / f".{merged_name(gen)}.tmp"
            staged.append(out)
            if not _merge_table(path, m, table, out, ids):
                out.unlink(missing_ok=True)
                staged.pop()
        (path / "rows").mkdir(exist_ok=True)
        staged.append(path / "rows" / f".{merged_name(gen, 'safetensors')}.tmp")
        if not _merge_rows(path, m, staged[-1]):
            staged.pop().unlink(missing_ok=True)
        staged.append(path / ".tokens.parquet.tmp")
        tok = _tokens(path, ids, staged[-1])
        if tok is None:
            staged.pop().unlink(missing_ok=True)
    except BaseException:
        for p in staged:
            p.unlink(missing_ok=True)
        raise
    new = copy.deepcopy(m)
    for s in new["shards"]:
        s["merged"] = gen
    new["schema_version"] = SCHEMA_VERSION
    if tok is not None:
        new["tokenizer"] = tok
    try:
        write_json_atomic(path / "manifest.json", new)  # the commit point
    except BaseException as e:
        if _committed(path, gen):  # e.g. Ctrl-C right after the rename: go on to settle
            pass
        else:
            for p in staged:
                p.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise DriftError(
                    f"{path / 'manifest.json'}: cannot write ({e.strerror}); the trace is unchanged"
                ) from None
            raise
    settle(path, new)  # delete what the merge replaced, then rename the merged files into place
    for d in path.iterdir():
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return new


def _committed(path: Path, gen: int) -> bool:
    try:
        return generation(json.loads((path / "manifest.json").read_text())) == gen
    except (OSError, ValueError, KeyError, TypeError):
        return False


def folder_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) of a trace folder."""
    files = [p for p in Path(path).rglob("*") if p.is_file() and p.name != ".lock"]
    return sum(p.stat().st_size for p in files), len(files)


def compact_trace(path) -> dict[str, Any]:
    """`drifttool compact`: settle, then merge a trace in place (schema 1 is migrated); returns sizes."""
    p = Path(path)
    m = read_manifest(p)
    before = folder_bytes(p)
    lock = lock_trace(p)
    try:
        settle(p, m)
        m = merge_shards(p, m)
    finally:
        lock.release()
    after = folder_bytes(p)
    return {
        "path": str(p),
        "bytes_before": before[0],
        "files_before": before[1],
        "bytes_after": after[0],
        "files_after": after[1],
        "schema_version": m["schema_version"],
        "shards": len(m["shards"]),
    }
