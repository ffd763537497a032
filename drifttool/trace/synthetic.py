"""Traces with chosen numbers and no models, written through TraceWriter: for tests, benchmarks and trying the
dashboard or `drifttool check`.

`chain_tables` shapes one drafter's rounds on one prompt into the tables a chain capture writes, from the numbers
the caller chose (accepted drafts and context length per round, per-head masses and entropy, hidden magnitudes,
timings, aux features, the prompt's fields, sampled attention rows); a column no number was chosen for gets a
plain default. The columns are trace/schema's: every stored column of a table (STORED, in its order), an optional
one (OPTIONAL) when a number was chosen for it, the per-head metrics by their schema names. Derived columns are
left to the reader, the per-prompt head summary to the writer. `manifest` holds what the readers need of a
capture's manifest; `write` writes one shard per prompt (each any number of drafters, `join`ed) through
TraceWriter, sharded or merged as a capture ends. `write_trace` is the short form: per-drafter numbers over the
rounds of several prompts, e.g.

    write_trace(Path("try.drift"), {"good": {"accepted": [4, 3, 4, 1]}, "weak": {"accepted": [1, 1, 2, 0]}}, depth=4)

then `drifttool compare try.drift`, `drifttool check try.drift --rule ...` or `drifttool dashboard try.drift`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .key_counts import chain_counts
from .metric_table import acceptance_length
from .positions import query_position
from .schema import DERIVED, DERIVED_MASSES, KEY, KEY_COUNTS, MAGNITUDES, OPTIONAL, ROWS_INDEX, STORED
from .sinks import RECENT, SinkSpec
from .writer import TraceWriter

__all__ = ["Shard", "chain_tables", "join", "manifest", "write", "write_trace"]

# The per-head numbers a capture measures (the schema's head metrics less the derived masses): chosen per head or
# per depth; a depth row holds their mean over the heads.
HEAD_VALUES = [c for c in STORED["heads"] if c not in (*KEY, "depth", "head")]
# Columns the builder computes from the accepted counts, contexts, depth and head values (never chosen directly).
_SHAPE = {
    "rounds": {*KEY, "context_len", "depth", "accepted", "beyond_window"},
    "depths": {*KEY, "depth", "context_len", "position", "reached", "accepted", "beyond_window", *HEAD_VALUES,
               *KEY_COUNTS},
    "heads": {*KEY, "depth", "head"},
    "aux": {*KEY, "chunk", "layer_id"},
    "prompts": {"drafter", "prompt_id", "n_rounds", "accepted_total", "mean_acceptance_length"},
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "rounds": {"bonus": 0},
    "depths": {"input_id": 0, "draft_id": 0, "target_id": 0, "massive": False, **dict.fromkeys(MAGNITUDES, 1.0)},
    "heads": {**dict.fromkeys(HEAD_VALUES, 0.0)},
    "aux": {"rms_before": 1.0, "rms_after": 1.0, "massive": False},
    "prompts": {"tags": "", "wall_s": 0.0},
}


@dataclass
class Shard:
    """One prompt's tables (any number of drafters) and its sampled attention rows, as TraceWriter.add takes them."""

    tables: dict[str, pd.DataFrame]
    rows: dict[str, np.ndarray] = field(default_factory=dict)


def _grid(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A chosen number as an array of `shape`: a scalar, or an array over its leading axes (per round, per round
    x depth, ...), repeated over the rest; arrays of size-1 axes broadcast as numpy does."""
    a = np.asarray(value)
    if a.ndim < len(shape):
        a = a.reshape(a.shape + (1,) * (len(shape) - a.ndim))
    try:
        return np.array(np.broadcast_to(a, shape))
    except ValueError:
        raise ValueError(f"{name}: shape {np.shape(value)} does not fit {shape}") from None


def _columns(table: str, chosen: Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    """The table's columns (stored ones, then the optional ones chosen) and the chosen numbers over the defaults;
    a name the table does not store is refused (a typo would otherwise be a silently default column)."""
    chosen = dict(chosen or {})
    optional = [c for c in OPTIONAL.get(table, []) if c in chosen]
    stored = [c for c in STORED[table] if c not in DERIVED.get(table, {})]
    unknown = [c for c in chosen if c not in stored and c not in optional or c in _SHAPE[table]]
    if unknown:
        raise ValueError(f"table {table!r}: cannot choose {unknown}; chosen columns are among "
                         f"{[c for c in stored + OPTIONAL.get(table, []) if c not in _SHAPE[table]]}")
    return stored + optional, {**_DEFAULTS[table], **chosen}


class _Chain:
    """The axes every table of `chain_tables` is laid out on: one drafter's R rounds at depth K with H heads."""

    def __init__(self, drafter: str, prompt_id: str, accepted: Sequence[int], depth: int, heads: int,
                 window: int | None, context: Sequence[int] | None) -> None:
        self.drafter, self.prompt_id, self.window = drafter, prompt_id, window
        self.acc = acc = np.asarray(accepted, np.int64)
        self.n_r, self.k, self.n_h = len(acc), int(depth), int(heads)
        self.ctx = np.asarray(100 + np.arange(self.n_r) if context is None else context, np.int64)
        self.rnd, self.dep = np.arange(self.n_r), np.arange(1, self.k + 1)
        self.pos = query_position(self.ctx[:, None], self.dep[None, :])  # [R, K]

    def beyond(self, p: Any) -> np.ndarray:
        """Positions at or beyond the trained window (none when no window was given)."""
        return p >= self.window if self.window is not None else np.zeros(np.shape(p), bool)

    def key(self, **cols: Any) -> dict[str, Any]:
        """The drafter / prompt key columns, then `cols` (the table's other computed columns)."""
        return {"drafter": self.drafter, "prompt_id": self.prompt_id, **cols}


def _rounds_table(c: _Chain, round_values: Mapping[str, Any] | None) -> pd.DataFrame:
    """One row per round: its context, depth, accepted drafts, window flag, and the chosen per-round numbers."""
    cols, val = _columns("rounds", round_values)
    shape = c.key(round=c.rnd, context_len=c.ctx, depth=c.k, accepted=c.acc,
                  beyond_window=c.beyond(query_position(c.ctx, c.k)))
    return pd.DataFrame({col: shape[col] if col in shape else _grid(col, val[col], (c.n_r,)) for col in cols})


def _head_numbers(c: _Chain, head_values: Mapping[str, Any] | None
                  ) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The heads table's columns, its numbers per round x depth x head, and HEAD_VALUES per round x depth (a
    depth row holds the mean over its heads when they were chosen per head)."""
    cols_h, val_h = _columns("heads", dict(head_values or {}))
    per_head = {col: _grid(col, val_h[col], (c.n_r, c.k, c.n_h)) for col in cols_h if col not in _SHAPE["heads"]}
    per_depth = {col: np.asarray(val_h[col]).mean(-1) if np.ndim(val_h[col]) == 3
                 else _grid(col, val_h[col], (c.n_r, c.k)) for col in HEAD_VALUES}
    return cols_h, per_head, per_depth


def _window_starts(depth_values: Mapping[str, Any] | None, shape: tuple[int, ...]) -> np.ndarray:
    """attn_window_start per depth row (default 0), flat, for the key counts. A 1-D array broadcasts numpy-style
    (over depth), not over rounds as `_grid` reads it for the stored column."""
    chosen = (depth_values or {}).get("attn_window_start", 0)
    ws = np.broadcast_to(np.asarray(chosen), shape) if np.ndim(chosen) < 2 else np.asarray(chosen)
    return np.broadcast_to(ws.reshape(ws.shape + (1,) * (2 - ws.ndim)), shape).ravel()


def _depths_table(c: _Chain, depth_values: Mapping[str, Any] | None,
                  per_depth: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per round x depth: reached / accepted from the accepted counts, the key counts of the default
    sinks, the heads' mean numbers and the chosen depth numbers (match defaults to the accepted drafts)."""
    dep, acc, k = c.dep, c.acc, c.k
    cols, val = _columns("depths", {"match": dep[None, :] <= acc[:, None], **(depth_values or {})})
    shape = c.key(round=np.repeat(c.rnd, k), depth=np.tile(dep, c.n_r), context_len=np.repeat(c.ctx, k),
                  position=c.pos.ravel(), reached=(dep[None, :] <= acc[:, None] + 1).ravel(),
                  accepted=(dep[None, :] <= acc[:, None]).ravel(), beyond_window=c.beyond(c.pos).ravel())
    ws = _window_starts(depth_values, c.pos.shape)
    # the default sinks and recent window; the contexts hold no real tokens (id -1: no chat template token)
    cnt = chain_counts(shape["context_len"], shape["position"], ws, SinkSpec(), RECENT, lambda n: np.full(n, -1))
    shape.update({col: v.astype(np.int32) for col, v in cnt.items()})
    return pd.DataFrame({col: shape[col] if col in shape else per_depth[col].ravel() if col in per_depth
                         else _grid(col, val[col], (c.n_r, k)).ravel() for col in cols})


def _heads_table(c: _Chain, cols_h: list[str], per_head: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per round x depth x head."""
    n_h, k = c.n_h, c.k
    shape = c.key(round=np.repeat(c.rnd, k * n_h), depth=np.tile(np.repeat(c.dep, n_h), c.n_r),
                  head=np.tile(np.arange(n_h), c.n_r * k))
    return pd.DataFrame({col: shape[col] if col in shape else per_head[col].ravel() for col in cols_h})


def _aux_table(c: _Chain, aux: Mapping[str, Any]) -> pd.DataFrame:
    """One row per round x aux chunk (`layer_id` names the chunks' layers)."""
    cols, val = _columns("aux", {col: v for col, v in aux.items() if col != "layer_id"})
    layers = np.asarray(aux["layer_id"], np.int64)
    n_a = len(layers)
    shape = c.key(round=np.repeat(c.rnd, n_a), chunk=np.tile(np.arange(n_a), c.n_r), layer_id=np.tile(layers, c.n_r))
    return pd.DataFrame({col: shape[col] if col in shape else _grid(col, val[col], (c.n_r, n_a)).ravel()
                         for col in cols})


def _prompts_table(c: _Chain, prompt: Mapping[str, Any]) -> pd.DataFrame:
    """The prompt's one row: totals from the accepted counts, prompt_len / n_generated defaulted from them."""
    acc, n_r = c.acc, c.n_r
    base = {"prompt_len": int(c.ctx[0]) if n_r else 0, "n_generated": int((acc + 1).sum())}
    cols, val = _columns("prompts", {**base, **prompt})
    shape = c.key(n_rounds=n_r, accepted_total=int(acc.sum()), mean_acceptance_length=acceptance_length(acc.sum(), n_r))
    return pd.DataFrame([{col: shape[col] if col in shape else val[col] for col in cols}])


def _rows_index(c: _Chain, rows: Mapping[int, Any], arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """The sampled attention rows (a row, or (row, slot tokens)) put in `arrays` under their tensor names, and
    their index (slot tokens default to 0s; the default sinks' slots)."""
    first = SinkSpec().first_n
    index = []
    for r, given in rows.items():
        row, toks = given if isinstance(given, tuple) else (given, None)
        name = f"{c.drafter}|{c.prompt_id}|{int(r)}"
        arrays[name] = np.asarray(row, np.float32)
        index.append({"drafter": c.drafter, "prompt_id": c.prompt_id, "round": int(r), "context_len": int(c.ctx[r]),
                      "tensor": name, "slot_tokens": [0] * arrays[name].shape[-1] if toks is None else list(toks),
                      "sink_slots": np.arange(min(first, int(c.ctx[r])), dtype=np.int64)})
    return pd.DataFrame(index, columns=[*ROWS_INDEX, "sink_slots"])


def chain_tables(
    drafter: str, prompt_id: str, accepted: Sequence[int], depth: int, *, context: Sequence[int] | None = None,
    heads: int = 1, window: int | None = None, values: Mapping[str, Mapping[str, Any]] | None = None,
    rows: Mapping[int, Any] | None = None,
) -> Shard:
    """One drafter's rounds 0..R-1 on one prompt (`accepted[r]` drafts of `depth` accepted in round r) as a chain
    capture's tables. `context`: context_len per round (default 100, 101, ...); `window`: the trained window
    (rounds and depth rows at or beyond it are flagged beyond_window; None: none is).

    `values`: chosen numbers per table, each a scalar or an array over leading axes (see `_grid`):

    - "heads": HEAD_VALUES (the measured masses, entropy; default 0) per round x depth, or per round x depth x
      head for different heads; the heads' optional max_prob / top_pos likewise (written only when chosen).
    - "depths": the other depth columns (match, default: the accepted drafts; token ids, MAGNITUDES, massive;
      the optional attn_window_start) per round x depth.
    - "rounds": bonus and the optional draft_s / verify_s / full_stats per round.
    - "aux": writes the `aux` table: `layer_id` (one per chunk) and rms_before / rms_after / massive per round x
      chunk. "prompts": writes the `prompts` row: tags, prompt_len (default the first context), n_generated
      (default accepted + 1 per round), wall_s and the optional group / max_new_tokens.

    `rows`: round -> a sampled attention row [depth, slots] (float32), or (row, its slot tokens; default 0s),
    indexed in `rows_index` with the default sinks' slots."""
    values = dict(values or {})
    unknown = sorted(set(values) - {"heads", "depths", "rounds", "aux", "prompts"})
    if unknown:
        raise ValueError(f"chain_tables: values for table {unknown[0]!r}; expected heads, depths, rounds, aux, prompts")
    head_values, depth_values, round_values = values.get("heads"), values.get("depths"), values.get("rounds")
    aux, prompt = values.get("aux"), values.get("prompts")
    c = _Chain(drafter, prompt_id, accepted, depth, heads, window, context)
    tables: dict[str, pd.DataFrame] = {"rounds": _rounds_table(c, round_values)}
    cols_h, per_head, per_depth = _head_numbers(c, head_values)
    tables["depths"] = _depths_table(c, depth_values, per_depth)
    tables["heads"] = _heads_table(c, cols_h, per_head)
    if aux is not None:
        tables["aux"] = _aux_table(c, aux)
    if prompt is not None:
        tables["prompts"] = _prompts_table(c, prompt)
    arrays: dict[str, np.ndarray] = {}
    if rows:
        tables["rows_index"] = _rows_index(c, rows, arrays)
    return Shard(tables, arrays)


def join(parts: Iterable[Shard]) -> Shard:
    """Several drafters' shards of one prompt as one (tables concatenated in order)."""
    parts = list(parts)
    names = list(dict.fromkeys(t for p in parts for t in p.tables))
    tables = {t: pd.concat([p.tables[t] for p in parts if t in p.tables], ignore_index=True) for t in names}
    return Shard(tables, {k: v for p in parts for k, v in p.rows.items()})


def manifest(drafters: Iterable[str], depth: int, *, mode: str = "generate", window: int | None = None,
             rope_scaling: dict | None = None, heads: int | None = None, full_every: int | None = None,
             probes: str = "synthetic") -> dict[str, Any]:
    """What the readers need of a capture's manifest: per drafter its name (also its variant and config hash),
    layout `synthetic`, no flags or overrides, `window` as max_position_embeddings, `rope_scaling`, `heads` as
    num_attention_heads; the capture's depth, mode, default sinks, full_every; stand-in probe and target hashes."""
    from .sinks import SinkSpec

    def entry(name: str) -> dict[str, Any]:
        d: dict[str, Any] = {"name": name, "layout": "synthetic", "variant": name, "flags": {}, "overrides": {},
                             "config_hash": name}
        extra = {"max_position_embeddings": window, "rope_scaling": rope_scaling, "num_attention_heads": heads}
        return {**d, **{k: v for k, v in extra.items() if v is not None}}

    capture = {"depth": int(depth), "mode": mode, "sink": SinkSpec().to_dict(), "recent": RECENT,
               "probes": {"sha256": probes}}
    if full_every is not None:
        capture["full_every"] = int(full_every)
    return {"drafters": [entry(n) for n in drafters], "capture": capture, "target": {"config_hash": "synthetic"}}


def write(path, man: dict[str, Any], shards: Iterable[tuple[str, Shard]], compact: bool = True,
          overwrite: bool = False) -> Path:
    """Write (prompt id, shard) pairs as they come, one shard per prompt, then finish: merged into one file per
    table as a capture ends, or left as shards (`compact=False`: tests that damage a shard file need them)."""
    with TraceWriter(path, man, overwrite=overwrite) as w:
        for prompt_id, s in shards:
            w.add(prompt_id, s.tables, s.rows or None)
        w.finish(compact=compact)
    return Path(path)


def _floats(spec: dict, key: str, default, shape: tuple[int, ...]) -> np.ndarray:
    """write_trace's reading of a number: numpy broadcasting of a float or array to `shape`."""
    return np.broadcast_to(np.asarray(spec.get(key, default), float), shape)


def write_trace(path: Path, drafters: dict[str, dict], depth: int, window: int = 4096,
                rope_scaling: dict | None = None, compact: bool = False, groups: dict[str, str] | None = None,
                mode: str = "generate") -> Path:
    """drafters: name -> {"accepted": [...] per round, "context": [...] (default 100, 101, ... over the drafter's
    rounds), "prompt": [...] (default p0, p1, p0, ...), "self_mass": float or per-round list (default 0.2 at
    depths >= 2, split evenly between its parts), "sink_mass" (default 0.5) / "rms_in" (default the depth) /
    "entropy" (default 1.0): float or [rounds, depth] array, "draft_s" / "verify_s" (per-round lists, default
    NaN)}; a round's number within its prompt is its order there. One head (the depth's numbers, max_prob 0.5 on
    slot 0), one shard per prompt id in sorted order, kept as shards unless `compact`. `groups` (prompt id ->
    group) writes a prompts table that records them."""
    k = depth
    dep = np.arange(1, k + 1)
    per_drafter = {}
    for name, spec in drafters.items():
        acc = np.asarray(spec["accepted"], dtype=np.int64)
        n = len(acc)
        sm = _floats(spec, "self_mass", 0.2, (n,))
        self_mass = np.where(dep[None, :] >= 2, sm[:, None], 0.0)
        parts = DERIVED_MASSES["self_mass"]
        per_drafter[name] = {
            "accepted": acc, "context": np.asarray(spec.get("context", np.arange(100, 100 + n)), dtype=np.int64),
            "prompt": np.asarray(spec.get("prompt", [f"p{i % 2}" for i in range(n)])),
            "heads": {"sink_mass": _floats(spec, "sink_mass", 0.5, (n, k)),
                      **{p: self_mass / len(parts) for p in parts}, "entropy": _floats(spec, "entropy", 1.0, (n, k))},
            "rms_in": _floats(spec, "rms_in", dep.astype(float), (n, k)),
            "rounds": {c: np.asarray(spec.get(c, np.full(n, np.nan)), float) for c in ("draft_s", "verify_s")},
        }

    def shards():
        for p in sorted({str(x) for d in per_drafter.values() for x in d["prompt"]}):
            parts = []
            for name, d in per_drafter.items():
                sel = d["prompt"] == p
                if not sel.any():
                    continue
                values = {"heads": {**{c: v[sel] for c, v in d["heads"].items()}, "max_prob": 0.5, "top_pos": 0},
                          "depths": {"rms_in": d["rms_in"][sel]},
                          "rounds": {c: v[sel] for c, v in d["rounds"].items()}}
                # every shard writes its prompts row (without one, `report` called the trace damaged): the group
                # given, else the probe line's id, as a capture records it (a cut's id is LINE@N)
                values["prompts"] = {"group": groups[p] if groups is not None else re.sub(r"@\d+$", "", p),
                                     "prompt_len": 100}
                values["aux"] = {"layer_id": [1, 2, 3], "rms_before": 1.0, "rms_after": 1.0, "massive": False}
                parts.append(chain_tables(name, p, d["accepted"][sel], k, context=d["context"][sel], window=window,
                                          values=values))
            yield p, join(parts)

    return write(path, manifest(drafters, k, mode=mode, window=window, rope_scaling=rope_scaling), shards(),
                 compact=compact)
