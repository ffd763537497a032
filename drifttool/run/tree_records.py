"""A prompt's tree rounds + tree captures shaped into the trace's tables (rounds, tree_nodes, tree_heads; the chain's
per-depth tables stay empty). Shaping only: the maths is run/tree_capture's."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.positions import query_position
from ..trace.schema import HEAD_METRICS, MAGNITUDES
from .attention_stats import HEAD_FIELDS, HIDDEN_FIELDS, head_fields
from .records import prompt_tables
from .tree_capture import TreeRoundCapture
from .tree_loop import TreeRoundRecord

_HIDDEN = MAGNITUDES
_MASSES = HEAD_METRICS
MASSIVE = HIDDEN_FIELDS.index("massive")


def tree_prompt_tables(
    drafter: str,
    prompt_id: str,
    records: list[TreeRoundRecord],
    caps: list[TreeRoundCapture],
    aux_layer_ids: list[int],
    trained_window: int,
    depth: int,
) -> dict[str, pd.DataFrame]:
    """rounds (depth = the tree's depth bound), tree_nodes and tree_heads; depths/heads/aux with no rows."""
    tabs = prompt_tables(drafter, prompt_id, [], [], aux_layer_ids, trained_window)  # typed, zero rows
    rounds = pd.DataFrame(
        {
            "drafter": drafter,
            "prompt_id": prompt_id,
            "round": [r.round for r in records],
            "context_len": [r.context_len for r in records],
            "depth": depth,
            "accepted": [r.accepted for r in records],
            "bonus": [r.bonus for r in records],
            "beyond_window": [query_position(r.context_len, max(r.tree.depths)) >= trained_window for r in records],
            "draft_s": [r.draft_s for r in records],
            "verify_s": [r.verify_s for r in records],
            "tree_nodes": [r.tree.size for r in records],
        }
    ).astype(
        {
            "round": np.int64,
            "context_len": np.int64,
            "depth": np.int64,
            "accepted": np.int64,
            "bonus": np.int64,
            "beyond_window": bool,
            "draft_s": np.float64,
            "verify_s": np.float64,
            "tree_nodes": np.int64,
        }
    )
    nodes, heads = [], []
    for rec, cap in zip(records, caps):
        n_df, h_df = _round_frames(drafter, prompt_id, rec, cap, trained_window)
        nodes.append(n_df)
        heads.append(h_df)
    empty = _round_frames(drafter, prompt_id, None, None, trained_window)
    if records:
        tabs["rounds"] = rounds
    else:
        tabs["rounds"]["tree_nodes"] = pd.Series(dtype=np.int64)
    tabs["tree_nodes"] = pd.concat(nodes, ignore_index=True) if nodes else empty[0]
    tabs["tree_heads"] = pd.concat(heads, ignore_index=True) if heads else empty[1]
    return tabs


# tree_nodes' column types (pandas would keep object / platform-width integers)
_NODE_TYPES = {
    "node": np.int64,
    "parent": np.int64,
    "depth": np.int64,
    "rank": np.int64,
    "draft_id": np.int64,
    "target_id": np.int64,
    "context_len": np.int64,
    "position": np.int64,
    "match": bool,
    "main_path": bool,
    "accepted": bool,
    "fed": bool,
    "massive": bool,
    "beyond_window": bool,
}


def _round_frames(
    drafter: str,
    prompt_id: str,
    rec: TreeRoundRecord | None,
    cap: TreeRoundCapture | None,
    trained_window: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One round's tree_nodes and tree_heads rows; rec None: typed zero-row frames."""
    if rec is None:
        return _empty_frames(drafter, prompt_id, trained_window)
    tree = rec.tree
    nodes = np.arange(1, tree.size + 1)
    row_of = {u: r for r, u in enumerate(cap.rows)}
    prod = np.array([row_of[tree.parents[u]] for u in nodes])  # each node's producer query row (its parent's)
    hd = cap.heads[prod]  # [N, nh, 7]
    hid = cap.hidden[prod]  # [N, 7]
    hf = head_fields(hd)
    masses = {k: hf[k] for k in HEAD_METRICS}
    depth = np.array(tree.depths)[nodes]
    key = {"drafter": drafter, "prompt_id": prompt_id, "round": rec.round}
    node_df = _node_frame(key, rec, nodes, depth, masses, hid, trained_window)
    return node_df, _head_frame(key, nodes, depth, masses, hf, hd.shape[1])


def _empty_frames(drafter: str, prompt_id: str, trained_window: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Zero-row frames with the columns and types a real round gets: one minimal round shaped, then emptied."""
    from .tree import DraftTree

    tree = DraftTree([0, 0], [-1, 0], [0, 1], [0, 0], [0.0, 0.0], [0.0, 0.0])
    rec = TreeRoundRecord(0, 1, tree, [], [-1, 0], 0)
    cap = TreeRoundCapture(0, 1, [0], np.zeros((1, 1, len(HEAD_FIELDS)), np.float32),
                           np.zeros((1, len(HIDDEN_FIELDS)), np.float32))
    frames = _round_frames(drafter, prompt_id, rec, cap, trained_window)
    return tuple(
        f.iloc[:0].astype({c: "string" for c in f.columns if f[c].dtype == object}) for f in frames
    )


def _node_frame(
    key: dict,
    rec: TreeRoundRecord,
    nodes: np.ndarray,
    depth: np.ndarray,
    masses: dict[str, np.ndarray],
    hid: np.ndarray,
    trained_window: int,
) -> pd.DataFrame:
    """A row per drafted node: its place in the tree, tokens, acceptance, and the numbers of the query that
    drafted it (heads' mean masses, hidden magnitudes)."""
    tree, n = rec.tree, rec.context_len
    pos = query_position(n, depth)  # the query that drafted the node (its parent's row), as in a chain
    on_path = set(rec.path)
    main = tree.main_path()
    fed = set(tree.fed)
    return pd.DataFrame(
        {
            **key,
            "node": nodes,
            "parent": np.array(tree.parents)[nodes],
            "depth": depth,
            "rank": np.array(tree.ranks)[nodes],
            "draft_id": np.array(tree.tokens)[nodes],
            "target_id": np.array(rec.target_ids)[nodes],
            "match": np.array(tree.tokens)[nodes] == np.array(rec.target_ids)[nodes],
            "main_path": np.array(main)[nodes],
            "accepted": [int(u) in on_path for u in nodes],
            "fed": [int(u) in fed for u in nodes],
            "logp": np.array(tree.logp)[nodes],
            "score": np.array(tree.score)[nodes],
            "context_len": n,
            "position": pos,
            **{k: v.mean(-1).astype(np.float32) for k, v in masses.items()},
            **{name: hid[:, i] for i, name in enumerate(_HIDDEN)},
            "massive": hid[:, MASSIVE] > 0.5,
            "beyond_window": pos >= trained_window,
        }
    ).astype(_NODE_TYPES)


def _head_frame(
    key: dict,
    nodes: np.ndarray,
    depth: np.ndarray,
    masses: dict[str, np.ndarray],
    hf: dict[str, np.ndarray],
    nh: int,
) -> pd.DataFrame:
    """A row per drafted node x head of the query that drafted it."""
    return pd.DataFrame(
        {
            **key,
            "node": np.repeat(nodes, nh),
            "depth": np.repeat(depth, nh),
            "head": np.tile(np.arange(nh), len(nodes)),
            **{k: v.ravel().astype(np.float32) for k, v in masses.items()},
            "max_prob": hf["max_prob"].ravel().astype(np.float32),
            "top_pos": hf["top_pos"].ravel().astype(np.int32),
        }
    ).astype({"node": np.int64, "depth": np.int64, "head": np.int64})
