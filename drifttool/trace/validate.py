"""Column types and value ranges of every table, checked per shard on read, so a well-formed Parquet file with
wrong types or impossible values (a mass of -5, strings for numbers) is refused with one line instead of
reaching the statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DriftError
from .metric_table import added, by_name, of_kind
from .schema import KEY_COUNTS, LIFTS, MAGNITUDES, MASSES

_MASSES = MASSES
_MAGNITUDES = (*MAGNITUDES, "rms_before", "rms_after")
_INTS = ("round", "depth", "context_len", "position", "input_id", "draft_id", "target_id", "head", "chunk",
         "layer_id", "prompt_len", "n_generated", "n_rounds", "accepted_total", "bonus", "attn_window_start",
         "node", "parent", "rank", *KEY_COUNTS)
_BOOLS = ("match", "reached", "massive", "beyond_window", "main_path", "fed", "full_stats")
_STRINGS = ("drafter", "prompt_id", "tags", "tensor")
_FLOATS = (*_MASSES, *_MAGNITUDES, "entropy", "mean_acceptance_length", "wall_s", "draft_s", "verify_s", "logp", "score",
           "max_prob", "prefill_s", *LIFTS, "entropy_norm")
# floats that must be finite (a NaN mass is no measurement); other float columns may be NaN (e.g. verify_s when
# teacher-forced, entropy / max_prob on rounds without full rows: rounds.full_stats false) and are reported as one
# note by the readers
FINITE = tuple(m for m in _MASSES if m not in added())  # an added mass: NaN in a trace resumed across its addition
# NaN by design where rounds.full_stats is false: no note for these
_SCHEDULED = ("depths.entropy", "heads.entropy", "heads.max_prob")
# NaN by design for a prompt with no drafted round (no acceptance length to average): no note either
_UNDEFINED = ("prompts.mean_acceptance_length", *(f"depths.{c}" for c in (*LIFTS, "entropy_norm")),
              # the recency-matched control: NaN at depth 1 (and on trees) by definition
              *(f"{t}.{m.name}" for t in ("depths", "heads") for m in of_kind("matched")))
# NaN by design on draft trees (chain-only masses): no note either
_TREE_ONLY_NAN = tuple(f"{t}.{m.name}" for t in ("tree_nodes", "tree_heads") for m in of_kind("matched", "window"))
# masses are float32 sums of probabilities: allow their rounding error, nothing more
_TOL = 1e-4


def _kind(table: str, col: str) -> str:
    if col == "accepted":
        return "int" if table == "rounds" else "bool"
    if col in ("slot_tokens", "sink_slots"):
        return "list"
    for kind, cols in (("int", _INTS), ("bool", _BOOLS), ("str", _STRINGS), ("float", _FLOATS)):
        if col in cols:
            return kind
    return "any"


def _type_ok(kind: str, t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return {
        "int": pa.types.is_integer(t),
        "float": pa.types.is_floating(t) or pa.types.is_integer(t),
        "bool": pa.types.is_boolean(t),
        "str": pa.types.is_string(t) or pa.types.is_large_string(t),
        "list": (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type),
        "any": True,
    }[kind]


def _range(table: str, col: str, depth: int | None) -> tuple[float | None, float | None]:
    m = by_name().get(col)
    if m is not None:  # the metric table's valid range, with float32 rounding room
        return (m.lo - _TOL if m.lo is not None else None), (m.hi + _TOL if m.hi is not None else None)
    if col == "depth":
        return 1, depth
    if col == "accepted" and table == "rounds":
        return 0, depth
    if col == "node":
        return 1, None
    if col in _INTS or col in _MAGNITUDES or col in ("wall_s", "draft_s", "verify_s", "prefill_s"):
        return 0, None
    if col == "mean_acceptance_length":
        return 1, None
    if col in ("logp", "score"):  # tree nodes: log-probabilities
        return None, _TOL
    if col == "max_prob":
        return 0, 1 + _TOL
    if col in LIFTS or col == "entropy_norm":
        return -_TOL, None
    return None, None


def check_types(f: Path, table: str, part: pa.Table) -> None:
    """Column types of one shard, and no nulls outside the float columns (checked per file: cheap, schema only)."""
    for c in part.column_names:
        col, kind = part.column(c), _kind(table, c)
        if not _type_ok(kind, col.type):
            raise DriftError(f"{f}: column {c!r} is stored as {col.type}; expected {kind} (table {table!r})")
        if kind != "float" and col.null_count:
            raise DriftError(f"{f}: column {c!r} holds {col.null_count} nulls (table {table!r})")


def check_prompts(f: Path, part: pa.Table, prompts: list[str] | None) -> None:
    """A shard holds rows of the prompts the manifest lists for it only (a file copied over another does not)."""
    if prompts is not None and "prompt_id" in part.column_names and part.num_rows:
        extra = sorted(set(pc.unique(part.column("prompt_id")).to_pylist()) - set(prompts))
        if extra:
            raise DriftError(f"{f}: rows of prompt {extra[0]!r}, which the manifest does not list for this shard "
                             f"(it lists {prompts}); the trace is damaged")


def check_values(f: Path, table: str, tbl: pa.Table, depth: int | None, nonfinite: dict[str, int]) -> None:
    """Value ranges of a (concatenated or single-shard) table; NaN/inf/null of the lenient float columns are
    counted into `nonfinite` (table.column -> count), of the strict ones refused."""
    if not tbl.num_rows:
        return
    for c in tbl.column_names:
        col, kind = tbl.column(c), _kind(table, c)
        if kind not in ("int", "float"):
            continue
        if kind == "float":  # pandas writes NaN as null: both are "no value" here
            bad = col.null_count
            col = col.drop_null()
            if pa.types.is_floating(col.type):
                fin = pc.is_finite(col)
                n_fin = pc.sum(fin).as_py() or 0
                if n_fin < len(col):
                    bad += len(col) - n_fin
                    col = pc.filter(col, fin)
            if bad and c in FINITE:
                raise DriftError(f"{f}: column {c!r} holds {bad} NaN/inf/null values (table {table!r}); "
                                 "the capture produced no valid measurement there; re-capture")
            if bad:
                nonfinite[f"{table}.{c}"] = nonfinite.get(f"{table}.{c}", 0) + bad
            if not len(col):
                continue
        lo, hi = _range(table, c, depth)
        if lo is None and hi is None:
            continue
        mm = pc.min_max(col).as_py()
        if (lo is not None and mm["min"] < lo) or (hi is not None and mm["max"] > hi):
            want = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            raise DriftError(f"{f}: column {c!r} has values in [{mm['min']}, {mm['max']}]; expected {want} "
                             f"(table {table!r})")
    check_counts(f, table, tbl)


def check_counts(f: Path, table: str, tbl: pa.Table) -> None:
    """Key counts that must agree on each row: every key set's count at most n_keys (the keys the query saw), and
    n_keys > 0 on a row that holds a mass (no keys seen, yet attention measured). A lift divides by these: a sink
    count 10x n_keys would read as a lift of 0.02, an n_keys of 0 as 0.0."""
    if "n_keys" not in tbl.column_names or not tbl.num_rows:
        return
    keys = pc.cast(tbl.column("n_keys"), pa.float64())
    masses = [c for c in _MASSES if c in tbl.column_names]
    if masses:
        has_mass = pc.fill_null(pc.is_finite(pc.cast(tbl.column(masses[0]), pa.float64())), False)
        for c in masses[1:]:
            has_mass = pc.or_(has_mass, pc.fill_null(pc.is_finite(pc.cast(tbl.column(c), pa.float64())), False))
        empty = pc.fill_null(pc.and_(pc.equal(keys, 0.0), has_mass), False)
        n = pc.sum(empty).as_py() or 0
        if n:
            raise DriftError(f"{f}: column 'n_keys' is 0 on {n} rows that hold attention masses; expected >= 1 "
                             f"key seen where a mass was measured (table {table!r}); the trace is damaged")
    for c in KEY_COUNTS:
        if c == "n_keys" or c not in tbl.column_names:
            continue
        cnt = pc.cast(tbl.column(c), pa.float64())
        over = pc.fill_null(pc.greater(cnt, keys), False)
        n = pc.sum(over).as_py() or 0
        if n:
            i = pc.index(over, True).as_py()
            raise DriftError(f"{f}: column {c!r} exceeds column 'n_keys' on {n} rows (e.g. {cnt[i].as_py():g} > "
                             f"{keys[i].as_py():g}); expected a key set no larger than the keys seen "
                             f"(table {table!r}); the trace is damaged")


def nonfinite_note(path: Path, counts: dict[str, Any]) -> str | None:
    """One note for every NaN/inf value found in the lenient columns (no per-value warnings)."""
    counts = {k: v for k, v in counts.items()
              if k not in ("rounds.draft_s", "rounds.verify_s", *_SCHEDULED, *_UNDEFINED, *_TREE_ONLY_NAN)}
    if not counts:
        return None
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"{path.name}: non-finite values (NaN/inf/null) in {parts}; statistics over those columns show as empty"
