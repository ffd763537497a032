"""Validating, lazy trace reader. The tables are plain Parquet: pandas/polars/duckdb read them directly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DriftError
from ..jsonfile import read_json_object
from .key_counts import fill_added
from .layout import (
    Source,
    add_derived,
    keys_categorical,
    member,
    shard_file,
    shard_prompts,
    sources,
    stored_columns,
)
from .schema import (
    ADDED,
    DICT_COLUMNS,
    KEY,
    ROWS_INDEX,
    SCHEMA_VERSION,
    STORED,
    SUMMARIES,
    TABLES,
    TREE_TABLES,
)
from .validate import check_prompts, check_types, check_values, nonfinite_note

__all__ = ["TraceData", "member", "read_manifest", "read_table", "read_trace", "shard_file", "shard_prompts"]


def read_manifest(path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        from ..suggest import path_hint

        raise DriftError(f"{p}: trace not found{path_hint(p)}")
    if not p.is_dir():
        raise DriftError(f"{p}: not a trace folder (expected NAME.drift/ with manifest.json)")
    mf = p / "manifest.json"
    m = read_json_object(mf, "not a drifttool trace, or the capture never started")
    v = m.get("schema_version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise DriftError(f"{mf}: field 'schema_version' missing or not an integer")
    if v > SCHEMA_VERSION:
        raise DriftError(
            f"{mf}: schema_version {v} is newer than this drifttool understands ({SCHEMA_VERSION}); upgrade drifttool"
        )
    if v < 1:
        raise DriftError(f"{mf}: schema_version {v} is invalid (expected 1..{SCHEMA_VERSION})")
    for key, typ in (("shards", list), ("drafters", list), ("capture", dict), ("status", str)):
        if not isinstance(m.get(key), typ):
            raise DriftError(f"{mf}: field {key!r} missing or not a {typ.__name__}")
    _check_shards(mf, m["shards"])
    _check_fields(mf, m)
    return m


def _check_shards(mf: Path, shards: list) -> None:
    """Each shard listed once, each prompt in one shard: a duplicate entry would count its rounds twice."""
    seen: dict[str, int] = {}
    for s in shards:
        if not isinstance(s, dict) or not _is(s.get("index"), int) or s["index"] < 0:
            raise DriftError(f"{mf}: field 'shards' has an entry without a non-negative integer 'index'")
        prompts = s.get("prompts", [])
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise DriftError(f"{mf}: field 'shards' entry {s['index']}: 'prompts' must be a list of prompt ids")
        for p in [f"#{s['index']}", *prompts]:
            if p in seen:
                what = f"shard {s['index']}" if p.startswith("#") else f"prompt {p!r}"
                raise DriftError(f"{mf}: field 'shards' lists {what} twice; its rounds would be counted twice")
            seen[p] = s["index"]


def _is(value: Any, typ: type) -> bool:
    return isinstance(value, typ) and not (typ is int and isinstance(value, bool))


# Optional manifest fields the readers (info, compare, check, dashboard, resume) use, and their JSON types.
_OPTIONAL = {"target": dict, "counts": dict, "prompts_done": list, "flags": list}
_CAPTURE = {"depth": int, "mode": str, "probes": dict, "sink": dict, "full_every": int, "keep_rows": int,
            "seed": int, "max_new_tokens": int}
_DRAFTER = {"flags": dict, "overrides": dict, "assumptions": dict, "rope_scaling": dict, "max_position_embeddings": int,
            "sliding_window": int, "aux_convention": str, "model_type": str, "trained_window": int}
# integer fields the analyses divide or compare by: their smallest meaningful value
_MIN = {"capture.full_every": 0, "capture.keep_rows": 0, "capture.max_new_tokens": 1, "trained_window": 1,
        "max_position_embeddings": 1, "sliding_window": 1, "rope_scaling.original_max_position_embeddings": 1}


def _need(mf: Path, d: dict, key: str, typ: type, where: str, nullable: bool = False) -> None:
    """`d[key]`, when present, is of JSON type `typ` (or null where `nullable`)."""
    if key in d and not _is(d[key], typ) and not (nullable and d[key] is None):
        raise DriftError(f"{mf}: field {where + key!r} is {type(d[key]).__name__}; expected {typ.__name__}")


def _check_flags(mf: Path, flags: list) -> None:
    """Each recorded flag names its key, check and message (the readers print all three)."""
    for f in flags:
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("key", "check", "message")):
            raise DriftError(f"{mf}: field 'flags' has an entry without string 'key', 'check' and 'message'")


def _check_capture(mf: Path, cap: dict[str, Any]) -> None:
    """The capture settings' types, the smallest meaningful counts and depth, and the sink's fields."""
    for key, typ in _CAPTURE.items():
        _need(mf, cap, key, typ, "capture.", nullable=key == "max_new_tokens")
    for key in ("full_every", "keep_rows", "max_new_tokens"):
        if _is(cap.get(key), int) and cap[key] < _MIN[f"capture.{key}"]:
            raise DriftError(f"{mf}: field 'capture.{key}' is {cap[key]}; expected an integer >= {_MIN['capture.' + key]}")
    if cap.get("depth") is not None and cap["depth"] < 1:
        raise DriftError(f"{mf}: field 'capture.depth' is {cap['depth']}; expected a speculation depth >= 1")
    sink = cap.get("sink", {})
    _need(mf, sink, "first_n", int, "capture.sink.")
    for key in ("positions", "token_ids"):
        if key in sink and not (_is(sink[key], list) and all(_is(i, int) for i in sink[key])):
            raise DriftError(f"{mf}: field 'capture.sink.{key}' must be a list of integers")


def _check_drafter(mf: Path, i: int, d: Any) -> str:
    """Drafter entry i: a non-empty name (returned), typed optional fields, lengths no smaller than meaningful."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
        raise DriftError(f"{mf}: field 'drafters' entry {i} has no 'name' (expected an object with a string name)")
    for key, typ in _DRAFTER.items():
        _need(mf, d, key, typ, f"drafters[{i}].", nullable=True)
    _need(mf, d.get("rope_scaling") or {}, "original_max_position_embeddings", int, f"drafters[{i}].rope_scaling.",
          nullable=True)
    for key in ("trained_window", "max_position_embeddings", "sliding_window",
                "rope_scaling.original_max_position_embeddings"):
        holder, leaf = (d.get("rope_scaling") or {}, key.split(".")[1]) if "." in key else (d, key)
        v = holder.get(leaf)
        if _is(v, int) and v < _MIN[key]:
            raise DriftError(f"{mf}: field 'drafters[{i}].{key}' is {v}; expected a length >= {_MIN[key]}")
    return d["name"]


def _check_fields(mf: Path, m: dict[str, Any]) -> None:
    """Types of the optional fields, so no reader meets e.g. a string or null where it expects an object."""
    if m["status"] not in ("partial", "complete"):
        raise DriftError(f"{mf}: field 'status' is {m['status']!r}; expected 'partial' or 'complete'")
    for key, typ in _OPTIONAL.items():
        _need(mf, m, key, typ, "")
    _check_flags(mf, m.get("flags", []))
    _check_capture(mf, m["capture"])
    names = [_check_drafter(mf, i, d) for i, d in enumerate(m["drafters"])]
    if len(set(names)) != len(names):
        raise DriftError(f"{mf}: field 'drafters' has duplicate names {names}")


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


def _summary_from_heads(p: Path, m: dict[str, Any], nonfinite: dict[str, int] | None,
                        shards: list[int] | None) -> pd.DataFrame:
    """A schema-1 trace's head summary, computed on read from its heads and rounds tables."""
    from .summary import head_summary

    return head_summary(read_table(p, "heads", m, nonfinite=nonfinite, shards=shards),
                        read_table(p, "rounds", m, ["drafter", "prompt_id", "round", "context_len"], shards=shards))


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
        parts = [_with_added(name, x, parts) for x in parts]
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
    if name in SUMMARIES and not _has_summary(p, m, shards):  # schema-1 trace: migrated on read
        return _summary_from_heads(p, m, nonfinite, shards)
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


def _with_added(name: str, part, parts):
    """A part without an added column another part has: that column as NaN (else concatenation fills nulls)."""
    import pyarrow as pa

    for c in ADDED.get(name, ()):
        if c not in part.column_names and any(c in x.column_names for x in parts):
            part = part.append_column(c, pa.array([float("nan")] * part.num_rows, pa.float64()))
    return part


def sorted_categories(df: pd.DataFrame) -> pd.DataFrame:
    """Key categoricals with their categories in sorted order, so grouping by them orders groups as plain
    strings would (the bootstrap's prompt order, hence its intervals, stay those of a string column)."""
    for c in DICT_COLUMNS:
        if c in df.columns and isinstance(df[c].dtype, pd.CategoricalDtype):
            cats = df[c].cat.categories
            if not cats.is_monotonic_increasing:
                df[c] = df[c].cat.reorder_categories(sorted(cats))
    return df


def _has_summary(p: Path, m: dict[str, Any], shards: list[int] | None) -> bool:
    """Every listed file of the head summary exists (schema 3), else it is computed from the heads table."""
    srcs = sources(p, m, "head_summary", only=shards)
    return bool(srcs) and all(s.file.is_file() for s in srcs)


def group_of_id(ids: pd.Series) -> pd.Series:
    """The group of prompts in a trace that records none: the probe line's id (a cut probe's id is LINE@N)."""
    return ids.astype(str).str.replace(r"@\d+$", "", regex=True)


class TraceData:
    """A loaded trace; tables are read on first access."""

    def __init__(self, path):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.nonfinite: dict[str, int] = {}  # table.column -> NaN/inf count, filled as tables are read

    @property
    def notes(self) -> list[str]:
        """One note on non-finite values in the tables read so far (none: empty)."""
        n = nonfinite_note(self.path, self.nonfinite)
        return [n] if n else []

    @property
    def name(self) -> str:
        return self.path.name.removesuffix(".drift")

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        """One table (`columns`: only those, derived ones computed); NaN/inf counts go to `nonfinite`."""
        counts: dict[str, int] = {}
        df = read_table(self.path, name, self.manifest, columns=columns, nonfinite=counts)
        self.nonfinite.update(counts)  # per column: reading a table again (once per drafter) must not add up
        return df

    @cached_property
    def prompts(self) -> pd.DataFrame:
        return self.table("prompts")

    @cached_property
    def groups(self) -> dict[str, str]:
        """prompt id -> group (source document), the statistical unit. Traces that record no `group` column
        (captured before groups existed) get the probe line's id: the prompt id without a cut's `@N` suffix."""
        try:
            p = self.table("prompts")
        except DriftError:  # a damaged prompts table: the other tables still carry prompt ids
            return {}
        ids = p["prompt_id"].astype(str)
        g = p["group"].astype(str) if "group" in p.columns else group_of_id(ids)
        return dict(zip(ids, g))

    @property
    def groups_recorded(self) -> bool:
        try:
            return "group" in self.table("prompts").columns
        except DriftError:
            return False

    @cached_property
    def rounds(self) -> pd.DataFrame:
        return self.table("rounds")

    @cached_property
    def depths(self) -> pd.DataFrame:
        return self.table("depths")

    @cached_property
    def heads(self) -> pd.DataFrame:
        return self.table("heads")

    @cached_property
    def aux(self) -> pd.DataFrame:
        return self.table("aux")

    @property
    def is_tree(self) -> bool:
        """Captured with draft trees (`capture --tree`): per-node tables instead of per-depth ones."""
        return bool(self.manifest["capture"].get("tree"))

    def _tree_table(self, name: str) -> pd.DataFrame:
        if not self.is_tree:
            raise DriftError(f"{self.path}: a chain trace (captured without --tree); it has no {name} table")
        return self.table(name)

    @cached_property
    def tree_nodes(self) -> pd.DataFrame:
        return self._tree_table("tree_nodes")

    @cached_property
    def tree_heads(self) -> pd.DataFrame:
        return self._tree_table("tree_heads")

    @cached_property
    def head_summary(self) -> pd.DataFrame:
        """Per (drafter, prompt, depth, head) sums (schema.HEAD_SUMMARY); computed from heads for old traces."""
        return self.table("head_summary")

    def _rows_sources(self) -> list[Source]:
        return sources(self.path, self.manifest, "rows_index",
                       only=[s["index"] for s in self.manifest["shards"] if s.get("rows")])

    def rows_index(self) -> pd.DataFrame:
        """Sampled attention rows: index of (drafter, prompt, round) -> tensor name in the rows/ file of `shard`."""
        import pyarrow as pa

        parts = []
        for src in self._rows_sources():
            f = src.file
            if not f.is_file():
                raise DriftError(f"{f}: missing (sampled-rows index of shard {src.shards[0]}); the trace is damaged")
            try:
                t = read_part(f, "rows_index", ROWS_INDEX, prompts=src.prompts,
                              depth=self.manifest["capture"].get("depth"), nonfinite={}).to_pandas()
            except (pa.ArrowException, ValueError) as e:  # ValueError: e.g. undecodable strings
                raise DriftError(f"{f}: corrupt Parquet ({str(e).splitlines()[0]})") from None
            if src.merged is None:
                t["shard"] = src.shards[0]
            elif "shard" not in t or not set(t["shard"].astype(int)) <= set(src.shards):
                raise DriftError(f"{f}: column 'shard' missing or naming shards the manifest does not merge there")
            parts.append(t)
        cols = ["drafter", "prompt_id", "round", "context_len", "tensor", "slot_tokens", "shard"]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)

    def rows_file(self, shard: int) -> Path:
        """The safetensors file holding a shard's sampled rows (its own, or the merged one)."""
        s = next((x for x in self.manifest["shards"] if x["index"] == shard), None)
        if s is None:
            raise DriftError(f"{self.path}: sampled rows name shard {shard}, which the manifest does not list")
        return sources(self.path, self.manifest, "rows", "safetensors", only=[shard])[0].file

    def check_rows(self) -> int:
        """Every sampled-rows file the index names opens and holds its tensors; returns how many rows."""
        from safetensors import safe_open

        idx = self.rows_index()
        for f, sub in idx.groupby(idx["shard"].map(lambda s: self.rows_file(int(s)))):
            if not f.is_file():
                raise DriftError(f"{f}: missing (sampled rows of shard {int(sub['shard'].iloc[0])}); "
                                 "the trace is damaged")
            try:
                with safe_open(str(f), "np") as st:
                    keys = set(st.keys())
            except Exception as e:  # noqa: BLE001 - any corruption is a user-facing data error
                raise DriftError(f"{f}: corrupt sampled rows ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
            lost = sorted(set(sub["tensor"]) - keys)
            if lost:
                raise DriftError(f"{f}: lacks the sampled row {lost[0]!r} that rows_index lists")
        return len(idx)

    def attention_row(self, drafter: str, prompt_id: str, round: int):
        """[K, L] head-mean attention rows for a sampled round, and the token id held by each slot."""
        from safetensors import safe_open

        idx = self.rows_index()
        hit = idx[(idx.drafter == drafter) & (idx.prompt_id == prompt_id) & (idx["round"] == round)]
        if hit.empty:
            have = idx[(idx.drafter == drafter) & (idx.prompt_id == prompt_id)]["round"].tolist()
            raise ValueError(f"no sampled attention row for {drafter}/{prompt_id} round {round}; sampled rounds: {have}")
        r = hit.iloc[0]
        f = self.rows_file(int(r.shard))
        try:
            with safe_open(str(f), "np") as st:  # one tensor, not the whole (merged) file
                arr = st.get_tensor(r.tensor)
        except Exception as e:  # noqa: BLE001 - any corruption is a user-facing data error
            raise DriftError(f"{f}: cannot read sampled rows ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        return arr, list(r.slot_tokens)


def read_trace(path) -> TraceData:
    return TraceData(path)
