"""Turn a prompt's round records + captures into the trace's tables (one stage: shaping, no math)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.metric_table import acceptance_length
from ..trace.positions import query_position
from ..trace.schema import HEAD_METRICS, KEY_COUNTS, MAGNITUDES
from .attention_stats import HEAD_FIELDS, HIDDEN_FIELDS, head_fields
from .hooks import RoundCapture
from .loop import RoundRecord


def prompt_tables(
    drafter: str, prompt_id: str, records: list[RoundRecord], caps: list[RoundCapture], aux_layer_ids: list[int],
    trained_window: int, attn_window: int | None = None,
) -> dict[str, pd.DataFrame]:
    """aux_layer_ids as read (input convention); attn_window: the drafter's sliding window, if any."""
    if not records:  # e.g. max_new_tokens 1: no drafting round, but the shard still needs every table
        return _empty_tables(drafter, prompt_id, aux_layer_ids, trained_window, attn_window)
    k_ = len(records[0].draft_ids)
    rnd = np.array([r.round for r in records])
    ctx = np.array([r.context_len for r in records])
    pos = query_position(ctx[:, None], np.arange(1, k_ + 1)[None, :])
    hf = head_fields(np.stack([c.heads for c in caps]))  # [R, K, nh] per attention_stats.HEAD_FIELDS name
    key = {"drafter": drafter, "prompt_id": prompt_id}
    depths = _depth_frame(key, records, caps, rnd, ctx, pos, hf, trained_window, attn_window)
    heads_df = _head_frame(key, rnd, k_, caps[0].heads.shape[1], hf)
    for df in (depths, heads_df):
        for c in HEAD_METRICS:
            df[c] = df[c].astype(np.float32)
    return {"rounds": _round_frame(key, records, caps, rnd, ctx, pos, trained_window), "depths": depths,
            "heads": heads_df, "aux": _aux_frame(key, caps, rnd, aux_layer_ids)}


def _round_frame(key: dict, records, caps, rnd, ctx, pos, trained_window: int) -> pd.DataFrame:
    """One row per round (a drafted chain + its verification)."""
    return pd.DataFrame({
        **key, "round": rnd, "context_len": ctx, "depth": len(records[0].draft_ids),
        "accepted": np.array([r.accepted for r in records]), "bonus": [r.bonus for r in records],
        "beyond_window": pos.max(1) >= trained_window,
        "draft_s": [r.draft_s for r in records], "verify_s": [r.verify_s for r in records],
        "full_stats": [c.full for c in caps],  # entropy / max_prob / top_pos computed (else NaN / NaN / -1)
    })


def _depth_frame(key: dict, records, caps, rnd, ctx, pos, hf: dict, trained_window: int,
                 attn_window: int | None) -> pd.DataFrame:
    """One row per round x depth: head-mean metrics, hidden magnitudes, acceptance and the key counts."""
    k_, nr = len(records[0].draft_ids), len(records)
    depth = np.arange(1, k_ + 1)
    acc = np.array([r.accepted for r in records])
    counts = np.stack([c.counts if c.counts is not None else np.zeros((k_, len(KEY_COUNTS)), np.int64) for c in caps])
    hidden = np.stack([c.hidden for c in caps])  # [R, K, 7]
    rep = lambda a: np.repeat(a, k_)  # noqa: E731
    return pd.DataFrame({
        **key, "round": rep(rnd), "depth": np.tile(depth, nr), "context_len": rep(ctx), "position": pos.ravel(),
        "input_id": np.array([r.input_ids for r in records]).ravel(),
        "draft_id": np.array([r.draft_ids for r in records]).ravel(),
        "target_id": np.array([r.target_ids for r in records]).ravel(),
        "match": np.array([r.match for r in records]).ravel(), "reached": (depth[None, :] <= acc[:, None] + 1).ravel(),
        "accepted": (depth[None, :] <= acc[:, None]).ravel(),
        **{m: hf[m].mean(-1).ravel() for m in HEAD_METRICS},
        **{name: hidden[..., i].ravel() for i, name in enumerate(MAGNITUDES)},
        "massive": hidden[..., HIDDEN_FIELDS.index("massive")].ravel() > 0.5,
        "beyond_window": pos.ravel() >= trained_window,
        # first slot the query can attend (its sliding window); earlier slots, sinks included, get zero mass
        "attn_window_start": (np.maximum(pos - attn_window + 1, 0) if attn_window else np.zeros_like(pos)).ravel(),
        # the keys the query saw and the size of each mass's key set: the uniform share is count / n_keys
        **{name: counts[..., i].ravel().astype(np.int32) for i, name in enumerate(KEY_COUNTS)},
    })


def _head_frame(key: dict, rnd, k_: int, nh: int, hf: dict) -> pd.DataFrame:
    """One row per round x depth x head; where the head looks hardest: its largest weight and its key slot."""
    return pd.DataFrame({
        **key, "round": np.repeat(rnd, k_ * nh), "depth": np.tile(np.repeat(np.arange(1, k_ + 1), nh), len(rnd)),
        "head": np.tile(np.arange(nh), len(rnd) * k_), **{m: hf[m].ravel() for m in HEAD_METRICS},
        "max_prob": hf["max_prob"].ravel().astype(np.float32), "top_pos": hf["top_pos"].ravel().astype(np.int32),
    })


def _aux_frame(key: dict, caps, rnd, aux_layer_ids: list[int]) -> pd.DataFrame:
    """One row per round x aux chunk: the depth-1 slot's captured target feature before / after fc_norm."""
    aux = np.stack([c.aux for c in caps])  # [R, A, 3]
    na = aux.shape[1]
    return pd.DataFrame({
        **key, "round": np.repeat(rnd, na), "chunk": np.tile(np.arange(na), len(rnd)),
        "layer_id": np.tile(np.array(aux_layer_ids[:na], dtype=np.int64), len(rnd)),
        "rms_before": aux[..., 0].ravel(), "rms_after": aux[..., 1].ravel(), "massive": aux[..., 2].ravel() > 0.5,
    })


def _empty_tables(drafter: str, prompt_id: str, aux_layer_ids: list[int], trained_window: int,
                  attn_window: int | None = None) -> dict[str, pd.DataFrame]:
    """Zero-row tables with the columns and dtypes of a non-empty shard: the writer needs the schema columns,
    and Parquet folder readers (pandas/pyarrow) take the first shard's schema, so no column may be untyped."""
    rec = RoundRecord(round=0, context_len=1, draft_ids=[0], target_ids=[0], accepted=0, match=[False], bonus=0,
                      input_ids=[0])
    cap = RoundCapture(round=0, context_len=1, heads=np.zeros((1, 1, len(HEAD_FIELDS)), np.float32),
                       hidden=np.zeros((1, 7), np.float32), aux=np.zeros((len(aux_layer_ids), 3), np.float32))
    tabs = prompt_tables(drafter, prompt_id, [rec], [cap], aux_layer_ids, trained_window, attn_window)
    return {k: v.iloc[:0].astype({c: "string" for c in v.columns if v[c].dtype == object}) for k, v in tabs.items()}


def prompt_row(drafter: str, probe, prompt_len: int, n_generated: int, records: list[RoundRecord], wall: float,
               **extra) -> pd.DataFrame:
    """The `prompts` table's row of one drafter on one probe (engine-specific columns in `extra`). A prompt with
    no drafted round has no acceptance length: NaN, not 1.0 (which would read as every draft rejected)."""
    acc = sum(r.accepted for r in records)
    return pd.DataFrame([{
        "drafter": drafter, "prompt_id": probe.id, "tags": ",".join(probe.tags), "group": str(probe.group or probe.id),
        "prompt_len": prompt_len,
        "n_generated": n_generated, "n_rounds": len(records), "accepted_total": acc,
        "mean_acceptance_length": acceptance_length(acc, len(records)), "wall_s": wall, **extra,
    }])


def add_rows(tabs: dict[str, pd.DataFrame], drafter: str, prompt_id: str, caps: list[RoundCapture]) -> dict:
    """Put the sampled rows' index into `tabs` (when any round was sampled); returns the row arrays."""
    idx, rows = row_samples(drafter, prompt_id, caps)
    if len(idx):
        tabs["rows_index"] = idx
    return rows


def row_samples(drafter: str, prompt_id: str, caps: list[RoundCapture]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Sampled attention rows as safetensors arrays + an index table."""
    idx, arrays = [], {}
    for c in caps:
        if c.row is None:
            continue
        name = f"{drafter}|{prompt_id}|{c.round}"
        arrays[name] = c.row
        idx.append({"drafter": drafter, "prompt_id": prompt_id, "round": c.round, "context_len": c.context_len,
                    "tensor": name, "slot_tokens": [int(t) for t in c.slot_tokens],
                    # int64 arrays: an empty list would be stored as list<null>
                    "sink_slots": np.array(c.sink_slots or [], dtype=np.int64)})
    return pd.DataFrame(idx), arrays
