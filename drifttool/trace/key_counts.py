"""Columns added after schema 3 was first written, for traces that lack them: the key counts of the uniform share
derived from what the trace does record (context length, query position, window start and the manifest's sink
rule), everything else NaN. New captures store the counts the capture itself summed over; this reproduces them
exactly for first-N and explicit-position sinks (a test compares both) and leaves them NaN for token-id sinks,
whose positions only the tokens tell."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from .schema import ADDED
from .sinks import SinkSpec

_POS = ("context_len", "position", "attn_window_start")
# what a missing added column is computed from (read alongside it: layout.stored_columns)
FILL_INPUTS: dict[str, dict[str, tuple[str, ...]]] = {
    "depths": {"n_keys": _POS, "n_sink": _POS, "n_self": _POS},
}


def derived_counts(ctx: np.ndarray, pos: np.ndarray, ws: np.ndarray, sink: SinkSpec) -> dict[str, np.ndarray]:
    """n_keys / n_sink / n_self of chain depth rows (n_sink NaN for a token-id sink rule). The query at slot `pos`
    sees slots ws..pos; slots < ctx are context, slots ctx..pos this chain's draft slots (self)."""
    ctx, pos, ws = (np.asarray(a, dtype=np.int64) for a in (ctx, pos, ws))
    out: dict[str, np.ndarray] = {"n_keys": (pos - ws + 1).astype(np.float64),
                                  "n_self": np.maximum(pos - np.maximum(ctx, ws) + 1, 0).astype(np.float64)}
    if sink.token_ids:
        out["n_sink"] = np.full(len(ctx), np.nan)
        return out
    first = np.minimum(sink.first_n, ctx)
    n_sink = np.maximum(first - ws, 0)
    for p in sorted(set(sink.positions)):
        if p >= sink.first_n:  # not already among the first N
            n_sink = n_sink + ((p >= ws) & (p < ctx))
    out["n_sink"] = n_sink.astype(np.float64)
    return out


def recent_counts(ctx, ws, sink: SinkSpec, recent: int) -> np.ndarray:
    """n_recent of depth rows: context slots max(0, ctx - recent) .. ctx - 1, not sinks, at or after the window
    start ws (first-N / explicit-position sinks; the capture counts token-id sinks itself)."""
    ctx, ws = np.asarray(ctx, np.int64), np.asarray(ws, np.int64)
    lo = np.maximum(np.maximum(ctx - recent, 0), ws)
    n = np.maximum(ctx - lo, 0)
    n = n - np.clip(np.minimum(sink.first_n, ctx) - lo, 0, None)  # first-N sinks inside [lo, ctx)
    for p in sorted(set(sink.positions)):
        if p >= sink.first_n:
            n = n - ((p >= lo) & (p < ctx))
    return n


def fill_added(table: str, tbl: pa.Table, manifest: dict[str, Any], wanted: list[str] | None) -> pa.Table:
    """The added columns `tbl` lacks (and that are wanted): key counts derived where the trace allows, else NaN."""
    missing = [c for c in ADDED.get(table, ()) if c not in tbl.column_names and (wanted is None or c in wanted)]
    if not missing:
        return tbl
    derived: dict[str, np.ndarray] = {}
    if table == "depths" and all(c in tbl.column_names for c in _POS[:2]):
        ws = (tbl.column("attn_window_start").to_numpy(zero_copy_only=False)
              if "attn_window_start" in tbl.column_names else np.zeros(tbl.num_rows, np.int64))
        derived = derived_counts(tbl.column("context_len").to_numpy(zero_copy_only=False),
                                 tbl.column("position").to_numpy(zero_copy_only=False), ws,
                                 SinkSpec.from_dict((manifest.get("capture") or {}).get("sink")))
    from .metric_table import measured_masses

    masses = set(measured_masses())
    for c in missing:  # a mass as the capture stores it (float32): tables of old and new traces concatenate alike
        kind = pa.float32() if c in masses and c not in derived else pa.float64()
        tbl = tbl.append_column(c, pa.array(derived.get(c, np.full(tbl.num_rows, np.nan)), kind))
    return tbl
