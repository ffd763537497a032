"""Validating, lazy trace reader. The tables are plain Parquet: pandas/polars/duckdb read them directly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DriftError
from ..jsonfile import read_json_object
from .schema import KEY, ROWS_INDEX, SCHEMA_VERSION, TABLES, TREE_TABLES
from .validate import check_prompts, check_types, check_values, nonfinite_note


def read_manifest(path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise DriftError(f"{p}: trace not found")
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


def member(root: Path, rel: str) -> Path:
    """`root/rel`, refused when it (or a link on the way) resolves outside the trace folder. Checked at every
    read, so a file swapped for a link after the trace was first opened is refused too."""
    f = root / rel
    if not f.resolve().is_relative_to(root.resolve()):
        raise DriftError(f"{f}: a link to {f.resolve()}, outside the trace folder {root}; refused")
    return f


def shard_file(root: Path, table: str, index: int, ext: str = "parquet") -> Path:
    """A listed shard's file; a commit interrupted before its rename leaves it under its hidden temporary
    name (the manifest is the commit point; --resume completes the rename)."""
    name = f"part-{index:05d}.{ext}"
    f = member(root, f"{table}/{name}")
    if not f.exists():
        tmp = member(root, f"{table}/.{name}.tmp")
        if tmp.is_file():
            return tmp
    return f


def shard_prompts(m: dict[str, Any], shard: dict[str, Any]) -> list[str] | None:
    """The prompt ids a shard's rows may hold: its listed prompts, less the `DRAFTER:` prefix of the vLLM
    engine's shard keys."""
    prompts, engine = shard.get("prompts"), m["capture"].get("vllm")
    if prompts is None or not isinstance(engine, dict) or engine.get("shard_key") != "DRAFTER:PROMPT":
        return prompts
    names = [d["name"] for d in m["drafters"]]
    return [p[len(n) + 1:] for p in prompts for n in names if p.startswith(n + ":")]


def _is(value: Any, typ: type) -> bool:
    return isinstance(value, typ) and not (typ is int and isinstance(value, bool))


# Optional manifest fields the readers (info, compare, check, dashboard, resume) use, and their JSON types.
_OPTIONAL = {"target": dict, "counts": dict, "prompts_done": list, "flags": list}
_CAPTURE = {"depth": int, "mode": str, "probes": dict, "sink": dict}
_DRAFTER = {"flags": dict, "overrides": dict, "assumptions": dict, "rope_scaling": dict, "max_position_embeddings": int,
            "sliding_window": int, "aux_convention": str, "model_type": str}


def _check_fields(mf: Path, m: dict[str, Any]) -> None:
    """Types of the optional fields, so no reader meets e.g. a string or null where it expects an object."""
    def need(d: dict, key: str, typ: type, where: str, nullable: bool = False) -> None:
        if key in d and not _is(d[key], typ) and not (nullable and d[key] is None):
            raise DriftError(f"{mf}: field {where + key!r} is {type(d[key]).__name__}; expected {typ.__name__}")

    if m["status"] not in ("partial", "complete"):
        raise DriftError(f"{mf}: field 'status' is {m['status']!r}; expected 'partial' or 'complete'")
    for key, typ in _OPTIONAL.items():
        need(m, key, typ, "")
    for f in m.get("flags", []):
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in ("key", "check", "message")):
            raise DriftError(f"{mf}: field 'flags' has an entry without string 'key', 'check' and 'message'")
    cap = m["capture"]
    for key, typ in _CAPTURE.items():
        need(cap, key, typ, "capture.")
    if cap.get("depth") is not None and cap["depth"] < 1:
        raise DriftError(f"{mf}: field 'capture.depth' is {cap['depth']}; expected a speculation depth >= 1")
    sink = cap.get("sink", {})
    need(sink, "first_n", int, "capture.sink.")
    for key in ("positions", "token_ids"):
        if key in sink and not (_is(sink[key], list) and all(_is(i, int) for i in sink[key])):
            raise DriftError(f"{mf}: field 'capture.sink.{key}' must be a list of integers")
    names = []
    for i, d in enumerate(m["drafters"]):
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
            raise DriftError(f"{mf}: field 'drafters' entry {i} has no 'name' (expected an object with a string name)")
        for key, typ in _DRAFTER.items():
            need(d, key, typ, f"drafters[{i}].", nullable=True)
        need(d.get("rope_scaling") or {}, "original_max_position_embeddings", int, f"drafters[{i}].rope_scaling.",
             nullable=True)
        names.append(d["name"])
    if len(set(names)) != len(names):
        raise DriftError(f"{mf}: field 'drafters' has duplicate names {names}")


def _read_shard(f: Path, name: str, required: list[str], columns: list[str] | None = None,
                prompts: list[str] | None = None, depth: int | None = None, nonfinite: dict | None = None):
    """One shard as an Arrow table, checked on its own: concatenating shards would silently fill a column that one
    shard lacks (or holds only as nulls) with nulls. Types and ranges: validate.check_shard."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        part = pq.ParquetFile(f).read(columns=columns)  # half the per-file overhead of pq.read_table
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
    if nonfinite is not None:  # a lone shard (rows_index): its values here; tables: once, concatenated
        check_values(f, name, part, depth, nonfinite)
    return part


def read_table(path, name: str, manifest: dict[str, Any] | None = None, columns: list[str] | None = None,
               nonfinite: dict[str, int] | None = None) -> pd.DataFrame:
    """Concatenate the shards the manifest lists for one table (each validated); NaN/inf counts of the lenient
    float columns go to `nonfinite`."""
    import pyarrow as pa

    p = Path(path)
    m = manifest or read_manifest(p)
    tables = {**TABLES, **TREE_TABLES}
    if name not in tables:
        raise DriftError(f"table {name!r}: unknown; expected one of {', '.join(tables)}")
    files = []
    for s in m["shards"]:
        f = shard_file(p, name, s["index"])
        if not f.is_file():
            raise DriftError(f"{f}: missing (table {name!r} of shard {s['index']}); the trace is damaged")
        files.append((f, shard_prompts(m, s)))
    depth = m["capture"].get("depth")
    # many small shards: per-file overhead dominates, and Arrow releases the GIL while decoding
    with ThreadPoolExecutor(max_workers=4) as pool:
        parts = list(pool.map(lambda fp: _read_shard(fp[0], name, columns or tables[name], columns, fp[1]), files))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in (columns or tables[name])})
    try:
        tbl = pa.concat_tables(parts, promote_options="default")
    except (pa.ArrowException, ValueError) as e:
        raise DriftError(f"{p / name}: shards are corrupt or have incompatible columns ({str(e).splitlines()[0]})") from None
    counts: dict[str, int] = {}
    try:
        check_values(p / name, name, tbl, depth, counts)  # once over all shards; on failure, find the shard
    except DriftError:
        for (f, _), part in zip(files, parts):
            check_values(f, name, part, depth, {})
        raise
    if nonfinite is not None:
        for k, v in counts.items():
            nonfinite[k] = nonfinite.get(k, 0) + v
    try:
        df = tbl.to_pandas()
    except (pa.ArrowException, ValueError) as e:
        raise DriftError(f"{p / name}: shards are corrupt or have incompatible columns ({str(e).splitlines()[0]})") from None
    need = [c for c in (columns or tables[name]) if c not in df.columns]
    if need:
        raise DriftError(f"{p / name}: missing columns {need}")
    return df


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

    def table(self, name: str) -> pd.DataFrame:
        return read_table(self.path, name, self.manifest, nonfinite=self.nonfinite)

    @cached_property
    def prompts(self) -> pd.DataFrame:
        return self.table("prompts")

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

    def rows_index(self) -> pd.DataFrame:
        """Sampled attention rows: index of (drafter, prompt, round) -> tensor name in rows/part-*.safetensors."""
        import pyarrow as pa

        parts = []
        for s in self.manifest["shards"]:
            if not s.get("rows"):
                continue
            f = shard_file(self.path, "rows_index", s["index"])
            if not f.is_file():
                raise DriftError(f"{f}: missing (sampled-rows index of shard {s['index']}); the trace is damaged")
            try:
                t = _read_shard(f, "rows_index", ROWS_INDEX, prompts=shard_prompts(self.manifest, s),
                                depth=self.manifest["capture"].get("depth"), nonfinite={}).to_pandas()
            except (pa.ArrowException, ValueError) as e:  # ValueError: e.g. undecodable strings
                raise DriftError(f"{f}: corrupt Parquet ({str(e).splitlines()[0]})") from None
            t["shard"] = s["index"]
            parts.append(t)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            columns=["drafter", "prompt_id", "round", "context_len", "tensor", "slot_tokens", "shard"])

    def check_rows(self) -> int:
        """Every sampled-rows file the index names opens and holds its tensors; returns how many rows."""
        from safetensors import safe_open

        idx = self.rows_index()
        for shard, sub in idx.groupby("shard"):
            f = shard_file(self.path, "rows", int(shard), "safetensors")
            if not f.is_file():
                raise DriftError(f"{f}: missing (sampled rows of shard {shard}); the trace is damaged")
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
        from safetensors.numpy import load_file

        idx = self.rows_index()
        hit = idx[(idx.drafter == drafter) & (idx.prompt_id == prompt_id) & (idx["round"] == round)]
        if hit.empty:
            have = idx[(idx.drafter == drafter) & (idx.prompt_id == prompt_id)]["round"].tolist()
            raise ValueError(f"no sampled attention row for {drafter}/{prompt_id} round {round}; sampled rounds: {have}")
        r = hit.iloc[0]
        f = shard_file(self.path, "rows", int(r.shard), "safetensors")
        try:
            arr = load_file(str(f))[r.tensor]
        except Exception as e:  # noqa: BLE001 - any corruption is a user-facing data error
            raise DriftError(f"{f}: cannot read sampled rows ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        return arr, list(r.slot_tokens)


def read_trace(path) -> TraceData:
    return TraceData(path)
