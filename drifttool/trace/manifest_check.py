"""The manifest's checks: a trace folder's manifest.json read and validated (schema version, shard list, the
types and smallest meaningful values of the fields the readers use) before any table is read. Tables:
trace/tables.py; the loaded trace: trace/reader.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DriftError
from ..jsonfile import read_json_object
from .schema import SCHEMA_VERSION

__all__ = ["read_manifest"]


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
