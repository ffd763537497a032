"""Columns added after schema 3 was first written, for traces that lack them: the key counts of the uniform share
counted by the capture's own rules (trace/key_sets.py) from what the trace does record (context length, query
position, window start and the manifest's sink rule and recent window), everything else NaN. New captures store
the counts the capture itself summed over; this reproduces them exactly wherever the rule needs positions only (a
test compares both) and leaves them NaN where it needs the context's tokens (a token-id sink rule, the chat
template). The synthetic traces count with the same function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DriftError
from .key_sets import KeyContext, NeedsTokens, TailSlots, rule, tail_counts
from .metric_table import of_kind
from .schema import ADDED, KEY_COUNTS
from .sinks import RECENT, SinkSpec

_POS = ("context_len", "position", "attn_window_start")
# what a missing added column is computed from (read alongside it: layout.stored_columns)
FILL_INPUTS: dict[str, dict[str, tuple[str, ...]]] = {"depths": {c: _POS for c in KEY_COUNTS}}


def chain_counts(ctx, pos, ws, sink: SinkSpec, recent: int = RECENT,
                 ids: Callable[[int], np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every key-count column (metric_table.key_counts()) of chain depth rows, each counted by the rule the capture
    resolves (trace/key_sets.py) over the keys the query at slot `pos` sees: slots ws..pos, context slots < ctx and
    this chain's drafted slots ctx..pos. `ids(n)` gives a context's token ids when they are known (the synthetic
    traces: no real tokens); without them (a trace stores no context tokens) a count whose rule reads tokens (a
    token-id sink rule, the chat template) is NaN (float64 arrays)."""
    ctx, pos, ws = (np.asarray(a, dtype=np.int64).reshape(-1) for a in (ctx, pos, ws))
    out: dict[str, np.ndarray] = {"n_keys": (pos - ws + 1).astype(np.float64)}
    out.update(_context_counts(ctx, ws, sink, recent, ids))
    depth = pos - ctx + 2  # depth 1 queries from the last context slot
    k_ = int(depth.max()) if len(depth) else 1
    chain = TailSlots.chain(max(k_, 2))
    rows = np.clip(depth - 1, 0, chain.anc.shape[0] - 1)
    cols = np.arange(chain.anc.shape[1])
    seen = chain.path[rows] & (ctx[:, None] + cols[None, :] >= ws[:, None])
    out.update({c: v.astype(np.float64) for c, v in tail_counts(TailSlots(chain.anc[rows], chain.own[rows]),
                                                                seen).items()})
    return {c: out[c] for c in KEY_COUNTS}


def _context_counts(ctx: np.ndarray, ws: np.ndarray, sink: SinkSpec, recent: int,
                    ids: Callable[[int], np.ndarray] | None) -> dict[str, np.ndarray]:
    """Each context mass's count per row: its rule's set at the row's context length, among the slots at or after
    the window start; evaluated once per distinct (context length, window start)."""
    ctxm = [m for m in of_kind("context") if m.count]
    pairs, inv = np.unique(np.stack([ctx, ws], 1), axis=0, return_inverse=True)
    got = np.full((len(pairs), len(ctxm)), np.nan)
    for i, (n, lo) in enumerate(pairs.tolist()):
        tokens = (lambda n=n: ids(n)) if ids is not None else _unknown
        try:
            kc = KeyContext(n, tokens, sink.index(tokens() if sink.token_ids else np.full(n, -1)), recent, ())
        except (NeedsTokens, DriftError):  # a token-id sink rule without tokens, or one never resolved
            continue
        for j, m in enumerate(ctxm):
            try:
                idx = np.asarray(rule(m)(kc), dtype=np.int64).reshape(-1)
            except NeedsTokens:
                continue
            got[i, j] = float((idx >= lo).sum())
    return {m.count: got[inv.reshape(-1), j] for j, m in enumerate(ctxm)}


def _unknown() -> np.ndarray:
    raise NeedsTokens


def fill_added(table: str, tbl: pa.Table, manifest: dict[str, Any], wanted: list[str] | None) -> pa.Table:
    """The added columns `tbl` lacks (and that are wanted): key counts derived where the trace allows, else NaN."""
    missing = [c for c in ADDED.get(table, ()) if c not in tbl.column_names and (wanted is None or c in wanted)]
    if not missing:
        return tbl
    derived: dict[str, np.ndarray] = {}
    if table == "depths" and all(c in tbl.column_names for c in _POS[:2]) and any(c in KEY_COUNTS for c in missing):
        ws = (tbl.column("attn_window_start").to_numpy(zero_copy_only=False)
              if "attn_window_start" in tbl.column_names else np.zeros(tbl.num_rows, np.int64))
        cap = manifest.get("capture") or {}
        derived = chain_counts(tbl.column("context_len").to_numpy(zero_copy_only=False),
                               tbl.column("position").to_numpy(zero_copy_only=False), ws,
                               SinkSpec.from_dict(cap.get("sink")), int(cap.get("recent") or RECENT))
    from .metric_table import measured_masses

    masses = set(measured_masses())
    for c in missing:  # a mass as the capture stores it (float32): tables of old and new traces concatenate alike
        kind = pa.float32() if c in masses and c not in derived else pa.float64()
        tbl = tbl.append_column(c, pa.array(derived.get(c, np.full(tbl.num_rows, np.nan)), kind))
    return tbl
