"""Per-node capture of a draft tree: the same taps as `hooks.Capture`, one batched score + softmax per round over
the tree's query rows (the root's and every fed node's) against the round's final drafter cache under the ancestor
mask; no L x L maps, one host transfer.

A node's drafter statistics are those of the query that drafted it: its parent's row (the root's for depth 1), as
a chain's depth-j row is the query that drafted depth j. Its self mass is the mass on its own ancestors' slots (the
self-generated tokens of its path): on the parent's slot (`own`) and on earlier ancestors (`draft`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..errors import DriftError
from ..trace import key_sets
from ..trace.sinks import RECENT, SinkSpec
from . import attention_stats as stats
from .hooks import DrafterAdapter, Observer

# per query row and head: sink / ancestors before the row's own slot / own slot, entropy, largest weight, its slot


@dataclass
class TreeRoundCapture:
    """Host-side results of one round; row 0 is the root's query, row r the query of node `rows[r]`."""

    round: int
    context_len: int
    rows: list[int]  # node of each query row (0 = root, then the fed nodes in tree numbering)
    heads: np.ndarray  # [R, nh, len(HEAD_FIELDS)] (a tree node's query row carries what a chain's depth row does)
    hidden: np.ndarray  # [R, 7] attention_stats.HIDDEN_FIELDS

    def field(self, name: str) -> np.ndarray:
        """One per-head field [R, nh] by its metric-table name (HEAD_FIELDS)."""
        return stats.field(self.heads, name)


def region_masks(parents: list[int], rows: list[int], col: dict[int, int], f: int) -> key_sets.TailSlots:
    """Over the F fed slots (col[u] = the column of fed node u), per query row of node rows[r] (0 = the root, which
    sees no fed slot): its strict ancestors' slots [R, F] and its own slot [R, F]."""
    anc = np.zeros((len(rows), f), dtype=bool)
    own = np.zeros((len(rows), f), dtype=bool)
    for r, u in enumerate(rows):
        if u == 0:
            continue
        own[r, col[u]] = True
        a = parents[u]
        while a > 0:
            anc[r, col[a]] = True
            a = parents[a]
    return key_sets.TailSlots(anc, own)


@dataclass
class TreeCapture(Observer):
    """Observer for `tree_loop.speculate_tree`: attach(), run, then read `.rounds`."""

    drafter: nn.Module
    sink: SinkSpec = field(default_factory=SinkSpec)
    adapter: DrafterAdapter | None = None
    recent: int = RECENT
    template_ids: tuple[int, ...] = ()

    def __post_init__(self):
        self._setup()
        self.rounds: list[TreeRoundCapture] = []
        self._store: dict[str, list[torch.Tensor]] = {k: [] for k in ("q", "in", "pre", "post")}

    def _taps(self, mods: dict[str, nn.Module]) -> list[tuple[str, object]]:
        def keep(key):
            def f(out):  # the round's first call is the refresh: its last slot is the root's query
                store = self._store[key]
                store.append(out[..., -1:, :].clone() if not store else out)

            return f

        return [(getattr(self.adapter, name), keep(key))
                for name, key in (("q", "q"), ("layer_in", "in"), ("pre", "pre"), ("post", "post"))]

    def new_prompt(self) -> None:
        self.rounds = []

    def begin_round(self, drafter, round_idx: int, context_len: int, depth: int, seq: list[int]) -> None:
        self._store = {k: [] for k in self._store}
        self._seq = seq

    def end_round(self, drafter, cache, record) -> None:
        tree, n = record.tree, record.context_len
        st = self._store
        q = torch.cat(st["q"], -2)[0].transpose(0, 1).detach()  # [R_all, nh, hd]: root + every fed node
        keys = cache.keys()[0]  # [nkv, n + F_all, hd]
        # a dynamic tree's fed nodes that the final re-rank dropped keep their slots (their K/V was computed,
        # q row 1 + slot - n) but are nobody's ancestor
        rows = [0, *tree.fed]
        col = {u: tree.slot[u] - n for u in tree.fed}
        keep = torch.tensor([0] + [1 + col[u] for u in tree.fed], device=q.device)
        tail = region_masks(tree.parents, rows, col, keys.shape[1] - n)
        ctx = np.asarray(self._seq[:n], dtype=np.int64)
        sink_pos = self.sink.index(ctx)
        sets = key_sets.context_sets(key_sets.KeyContext(n, lambda: ctx, sink_pos, self.recent, self.template_ids))
        # each row's query at its chain depth (the root 1; a fed node one deeper than the node): the recency-matched
        # control of a node drafted at depth d is the root's mass on its d-1 most recent non-sink keys
        dep = [tree.depths[u] + 1 for u in rows]
        g = stats.Gathered.of(n, sets, tail, key_sets.matched_index(n, max(dep) - 1, sink_pos), depths=dep)
        d = stats.masked_logits(q.index_select(0, keep), keys, n, self.scale, tail=tail)
        p, rws, _ = stats.full_probs(d, g, torch.from_numpy(g.index).to(keys.device))
        x = torch.stack([torch.cat(st[k], -2)[0].detach().index_select(0, keep) for k in ("in", "pre", "post")])
        p, rws, x = stats.to_host(p, rws, x)  # one host transfer
        heads = stats.head_values(p, g, rws)
        hidden = stats.hidden_stats(x)
        if not (np.isfinite(heads[..., list(stats.CHECKED_TREE)]).all() and np.isfinite(hidden).all()):
            raise DriftError(  # (the window mass is NaN on trees by design, the matched mass at the root)
                f"drafter activations: NaN or inf in tree round {record.round} (try --dtype float32)"
            )
        self.rounds.append(TreeRoundCapture(record.round, n, rows, heads, hidden.astype(np.float32)))
