"""The per-round maths of the capture. The device does what touches the key cache: each query row's probabilities
on the few keys the masses read (`lse_probs`: from the fused kernel's log-sum-exp, O(keys read) whatever the
context length; `full_probs`: from the whole row on full rounds, with entropy and the head maxima) and the hidden
states' sums of squares. The host (numpy) turns those into every per-head field of the metric table
(`head_values`), chains and trees alike: each context mass sums its key set's columns, each tail mass weighs the
drafted slots by its `slots` rule over the row's ancestor / own masks (key_sets.TailSlots), the matched control and
the window mass come from the chain's depth-1 row and recent set. `hooks.Capture` and `tree_capture.TreeCapture`
call these once per round; what counts as a sink is `SinkSpec`'s alone.

Cost (bench/bench_overhead.py): this runs every round, so on the cheap path it is a handful of torch ops (a gather
of the keys read, one batched matmul, one exp) and one host transfer; everything per metric is numpy on arrays of
K x heads x (keys read) values. On full rounds the K x heads x L scores take one pass each for max, exp, sum and
the entropy's product (never L x L)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..trace import metric_table
from ..trace.key_sets import TailSlots, tail_counts

# The per-head fields in the capture's packed order (trace/metric_table.head_fields): the context masses (sink,
# recent, template, ...: each a key set of the metric table), the tail masses over this chain's (tree path's)
# drafted slots, entropy, max_prob = the head's largest attention weight and top_pos = the key slot it sits on
# (slot t holds token t+1's pair at position t), the matched and window masses. Read them by name (`field`).
HEAD_FIELDS = metric_table.head_fields()
HIDDEN_FIELDS = ("rms_in", "l2_in", "rms_pre", "l2_pre", "rms_post", "l2_post", "massive")
MASS_FIELDS = metric_table.measured_masses()  # every round (lse); the others on full rounds only (NaN / NaN / -1)
MASS_IDX = tuple(HEAD_FIELDS.index(m) for m in MASS_FIELDS)
# per depth: the keys the query saw and how many of them each mass's key set holds (the uniform share's terms)
COUNT_FIELDS = metric_table.key_counts()
ROW_FIELDS = (*(m.name for m in metric_table.of_kind("row")), *metric_table.ROW_EXTRAS)  # full rounds only
_CONTEXT = metric_table.context_masses()
_TAIL = tuple(m.name for m in metric_table.of_kind("tail"))
_MATCHED = tuple(m.name for m in metric_table.of_kind("matched"))  # from the depth-1 row, stored at depth k
_WINDOW = tuple(m.name for m in metric_table.of_kind("window"))  # the last R keys: own drafted slots + newest context
_RECENT = _CONTEXT.index("recent_mass")  # the context set whose newest slots the window mass keeps
# the fields that must be finite (the capture's overflow check): every field on full rounds, the masses on lse
# rounds; the matched masses are NaN by design at depth 1 (and on trees)
# (lists: numpy takes a list as a fancy index); the lse-round fields are the masses, each at most 1
CHECKED_FULL = [i for i, f in enumerate(HEAD_FIELDS) if f not in _MATCHED]
CHECKED_LSE = [i for i in MASS_IDX if HEAD_FIELDS[i] not in _MATCHED]
CHECKED_TREE = [i for i in CHECKED_FULL if HEAD_FIELDS[i] not in _WINDOW]  # trees: no window mass either


def field(heads: np.ndarray, name: str) -> np.ndarray:
    """One per-head field [...] of a packed array [..., len(HEAD_FIELDS)], by name."""
    return heads[..., HEAD_FIELDS.index(name)]


def head_fields(heads) -> dict:
    """HEAD_FIELDS [..., len(HEAD_FIELDS)] as named arrays [...], with the derived masses of the metric table (self
    = draft + own, prompt = the rest). Chains and trees shape their tables from this one reading."""
    f = {name: heads[..., i] for i, name in enumerate(HEAD_FIELDS)}
    for m in metric_table.of_kind("derived"):
        total = sum(f[p] for p in m.parts)
        f[m.name] = 1.0 - total if m.complement else total
    return f


def window_start(n: int, j: int, window: int | None) -> int:
    """First slot depth j (0-based, query slot n-1+j) can attend under a sliding window (None: slot 0)."""
    return max(0, n + j - window) if window is not None else 0


# -- which keys a round reads -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gathered:
    """The keys a round's masses read, in one index: each context set's slots (`sizes`, metric-table order), the F
    drafted tail slots n..n+F-1, then the matched control's m slots (chains). `lo` [R]: each row's first visible slot
    (a sliding window), `tail`: the rows' ancestor / own masks."""

    index: np.ndarray  # [G] int64
    sizes: tuple[int, ...]
    n: int
    f: int
    m: int
    tail: TailSlots
    lo: np.ndarray  # [R] int64
    chain: bool  # depth rows of a chain (the matched control and the window mass apply); False: a tree's nodes
    recent: int = 0  # --recent R (the window mass's R); 0: the recent set's size
    depths: tuple[int, ...] | None = None  # a tree's rows' chain depths (root 1): their matched control, from the root

    @classmethod
    def of(cls, n: int, sets: list[np.ndarray], tail: TailSlots, matched: np.ndarray | None = None,
           lo: np.ndarray | None = None, recent: int = 0, depths: list[int] | None = None) -> Gathered:
        """`matched` without `depths`: a chain's rows (depth j+1 at row j); with `depths`: a tree's rows, each
        node's query at its chain depth (the root 1), the matched control read off the root's row."""
        f = tail.anc.shape[1]
        mi = matched if matched is not None else np.zeros(0, np.int64)
        index = np.concatenate([*sets, np.arange(n, n + f, dtype=np.int64), mi])
        r = tail.anc.shape[0]
        return cls(index, tuple(len(s) for s in sets), n, f, len(mi), tail,
                   np.zeros(r, np.int64) if lo is None else np.asarray(lo, np.int64),
                   matched is not None and depths is None, recent, None if depths is None else tuple(depths))

    @property
    def windowed(self) -> bool:
        return bool(self.lo.any())

    @property
    def visible(self) -> np.ndarray:
        """[R, G] bool: the row's query attended that key (inside its window; a drafted slot only on its path)."""
        vis = self.index[None, :] >= self.lo[:, None]
        s = sum(self.sizes)
        vis[:, s:s + self.f] &= self.tail.path
        return vis

    def hidden(self) -> np.ndarray:
        """[R, G] bool: the gathered keys each row did not see (masked before the exp)."""
        if self.chain and not self.windowed:
            return _chain_hidden(self.sizes, self.tail.anc.shape[0], self.m)
        return ~self.visible

    def weights(self) -> np.ndarray:
        """[R, G, len(HEAD_FIELDS)]: per row, which gathered keys each mass sums (context sets, tail rules, the
        window mass; zero columns for the fields computed otherwise). Cached for a chain's layout."""
        if self.chain:
            size = self.sizes[_RECENT]
            if not self.recent or size == self.recent:  # the recent set is the last R slots: one layout per shape
                return _chain_weights(self.sizes, self.tail.anc.shape[0], self.m)
            rs = sum(self.sizes[:_RECENT])  # a sink inside the last R slots: which context slots stay, by position
            return _weights(self.sizes, self.tail, self.m, True, self.recent, self.index[rs:rs + size] - self.n)
        return _weights(self.sizes, self.tail, self.m, False)


def chain_lo(n: int, k_: int, window: int | None) -> np.ndarray:
    """[K] first visible slot of each depth row of a chain (all 0 without a sliding window)."""
    return np.array([window_start(n, j, window) for j in range(k_)], dtype=np.int64)


_COL = {name: i for i, name in enumerate(HEAD_FIELDS)}
_ROW_COLS = [_COL[f] for f in ROW_FIELDS]


def _weights(sizes: tuple[int, ...], tail: TailSlots, m: int, chain: bool, recent: int = 0,
             dist: np.ndarray | None = None) -> np.ndarray:
    """[R, G, fields] (Gathered.weights). The window mass of a chain's row j (0-based: j own drafted slots seen) is
    the last R keys whatever they are, sinks excluded: its newest min(j, R) own slots, then the context slots among
    the last R - min(j, R) (`dist`: the recent set's slots as offsets from n, -R..-1; without it the recent set is
    the last R slots, contiguous)."""
    r, f = tail.anc.shape
    s = sum(sizes)
    w = np.zeros((r, s + f + m, len(HEAD_FIELDS)))
    o = 0
    for name, size in zip(_CONTEXT, sizes):
        w[:, o:o + size, _COL[name]] = 1
        o += size
    for name, tw in zip(_TAIL, tail.weights):
        w[:, s:s + f, _COL[name]] = tw
    if chain:
        rs, size = sum(sizes[:_RECENT]), sizes[_RECENT]
        big_r = recent or size
        for j in range(r):
            own = min(j, big_r)
            path = np.flatnonzero(tail.path[j])[::-1][:own]  # the row's own drafted slots, newest first
            ctx = np.arange(size)[dist >= -(big_r - own)] if dist is not None else np.arange(own, size) if own < size \
                else np.zeros(0, np.int64)
            for name in _WINDOW:
                w[j, s + path, _COL[name]] = 1
                w[j, rs + ctx, _COL[name]] = 1
    return w


@lru_cache(maxsize=64)
def _chain_weights(sizes: tuple[int, ...], k_: int, m: int) -> np.ndarray:
    return _weights(sizes, TailSlots.chain(k_), m, True)


@lru_cache(maxsize=64)
def _chain_hidden(sizes: tuple[int, ...], k_: int, m: int) -> np.ndarray:
    g = Gathered.of(0, [np.zeros(x, np.int64) for x in sizes], TailSlots.chain(k_), np.zeros(m, np.int64))
    return ~g.visible


@lru_cache(maxsize=64)
def _matched_weights(m: int, k_: int) -> tuple[np.ndarray, np.ndarray]:
    """[m, K]: depth j (0-based) sums the last j of the matched control's m slots (ascending); [K] bool: the depths
    with no value (depth 1, and j > m)."""
    w = np.zeros((m, k_))
    for j in range(1, min(m, k_ - 1) + 1):
        w[m - j:, j] = 1
    return w, (np.arange(k_) == 0) | (np.arange(k_) > m)


# -- device side ------------------------------------------------------------------------------------------------------
def _grouped(q: torch.Tensor, nkv: int) -> torch.Tensor:
    """[R, nh, hd] -> [nkv, R * rep, hd]: GQA, query head h = g * rep + r reads kv head g."""
    r, nh, hd = q.shape
    return q.reshape(r, nkv, nh // nkv, hd).transpose(0, 1).reshape(nkv, r * (nh // nkv), hd)


def to_host(*tensors: torch.Tensor | None) -> list[np.ndarray | None]:
    """Each tensor as a float32 host array (None stays None), in one device-to-host transfer: on CUDA one copy of a
    few hundred KiB and one sync per round; on CPU the views are free but for one copy of the small pieces."""
    parts = [t for t in tensors if t is not None]
    if not parts:
        return [None] * len(tensors)
    flat = torch.cat([t.reshape(-1).float() for t in parts]).cpu().numpy()
    out, o = [], 0
    for t in tensors:
        if t is None:
            out.append(None)
            continue
        out.append(flat[o:o + t.numel()].reshape(t.shape))
        o += t.numel()
    return out


def lse_probs(qh: np.ndarray, kg: np.ndarray, lse: np.ndarray, scale: float, hidden: np.ndarray | None = None,
              shift: np.ndarray | None = None) -> np.ndarray:
    """[nh, R, G] float32: each query row's attention weight exp(q.k * scale - lse) on the G gathered keys kg
    [nkv, G, hd], from the R query rows qh [nh, R, hd] (head-major, as the hooks stack them; head h = g * rep + r
    reads kv head g) and each row's log-sum-exp lse [nh, R] over the keys it attended; 0 where `hidden` [R, G] (keys
    the row did not see). Host arrays: the keys were gathered on the device before the fp32 upcast (a bf16 cache
    is never copied whole), and a handful of numpy ops on K x heads x G values cost microseconds. A weight that
    would overflow (a score far above its row's log-sum-exp: the kernel's lse and these scores disagree) is kept
    finite but far above 1, which the capture's mass check refuses. `shift` [nh, R, G]: what a patch attention
    site added to those scores (gathered_shift)."""
    nh, r, hd = qh.shape
    nkv = kg.shape[0]
    s = np.matmul(qh.reshape(nkv, -1, hd), kg.transpose(0, 2, 1)).reshape(nh, r, -1)
    s *= scale
    s -= lse[..., None]
    if shift is not None:
        s += shift
    if hidden is not None:
        s[:, hidden] = -np.inf
    return np.exp(np.minimum(s, 80.0, out=s), out=s)


def gathered_shift(shifts: tuple[np.ndarray, np.ndarray], g: Gathered, sink_pos: np.ndarray) -> np.ndarray:
    """[nh, R, G]: the score shift of a patch attention site (attention_edits: sink [R, nh], own [R, nh]) on each
    gathered key: the sink shift on sink slots, the own shift on drafted slots (>= n), 0 elsewhere."""
    sink, own = shifts
    is_sink = np.isin(g.index, sink_pos).astype(np.float64)
    is_own = (g.index >= g.n).astype(np.float64)
    return (sink.T[..., None] * is_sink + own.T[..., None] * is_own).astype(np.float32)


def shift_logits(d: torch.Tensor, shifts: tuple[np.ndarray, np.ndarray], sink_pos: np.ndarray, n: int) -> None:
    """Masked logits d [nkv, R, rep, L] with a patch attention site's shifts added in place (gathered_shift's
    rule on every slot; hidden slots stay -inf)."""
    nkv, r, rep, _ = d.shape
    sink, own = (torch.as_tensor(a, dtype=d.dtype, device=d.device).reshape(r, nkv, rep).transpose(0, 1)[..., None]
                 for a in shifts)
    if len(sink_pos):
        idx = torch.as_tensor(np.asarray(sink_pos), dtype=torch.long, device=d.device)
        d[..., idx] += sink
    d[..., n:] += own


def masked_logits(q: torch.Tensor, keys: torch.Tensor, n: int, scale: float | None = None,
                  window: int | None = None, tail: TailSlots | None = None) -> torch.Tensor:
    """Masked scaled scores [nkv, R, rep, L] (fp32) of R query rows q [R, nh, hd] (head h = g * rep + r uses kv
    head g) over keys [nkv, L, hd]. Context slots 0..n-1 are visible to every row (but for a sliding window's
    oldest); drafted slots n..L-1 only on the row's path (tail; default: the chain's, row j at slot n-1+j)."""
    r, nh, hd = q.shape
    nkv, length, _ = keys.shape
    s = torch.matmul(_grouped(q.float(), nkv), keys.float().transpose(1, 2)).view(nkv, r, nh // nkv, length)
    s.mul_(scale or 1.0 / math.sqrt(hd))
    path = (tail or TailSlots.chain(r)).path  # [R, L - n]: a row's drafted slots are visible only on its path
    s[..., n:].masked_fill_(_hidden_mask(path.tobytes(), path.shape, str(s.device)), float("-inf"))
    for j in range(r):  # a sliding window hides slots <= n-1+j-W from depth j (sinks included: zero mass)
        lo = window_start(n, j, window)
        if lo > 0:
            s[:, j, :, :lo] = float("-inf")
    return s


@lru_cache(maxsize=64)
def _hidden_mask(path: bytes, shape: tuple[int, int], device: str) -> torch.Tensor:
    """[1, R, 1, F] bool on `device`: the drafted slots a row does not see (cached per tail layout)."""
    p = np.frombuffer(path, dtype=bool).reshape(shape)
    return torch.from_numpy(~p).to(device)[None, :, None, :]


def probabilities(q: torch.Tensor, keys: torch.Tensor, n: int, scale: float | None = None,
                  window: int | None = None) -> torch.Tensor:
    """Attention probabilities [K, nh, L] of K draft-step queries [K, nh, hd] over keys [nkv, L, hd] (fp32)."""
    p = masked_logits(q, keys, n, scale, window).softmax(-1)
    return p.permute(1, 0, 2, 3).reshape(p.shape[1], -1, p.shape[-1])


def full_probs(d: torch.Tensor, g: Gathered, index: torch.Tensor, keep_row: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """From masked logits d [nkv, R, rep, L] (consumed in place): the gathered keys' probabilities [nh, R, G] (as
    lse_probs gives them), the row fields [nh, R, 3] (entropy, max_prob, top_pos: ROW_FIELDS) and, when keep_row,
    the head-mean rows [R, L].

    Softmax by hand, so the pieces serve every statistic: d = s - rowmax, e = exp(d), z = sum e, p = e / z,
    entropy = log z - sum(e * d) / z, max_prob = 1 / z (the top key's weight is exp(0)). Full-length passes: max,
    sub, exp, sum, mul, sum."""
    mx, top = d.max(-1)  # the max pass the softmax needs anyway also names the most-attended slot
    d.sub_(mx.unsqueeze(-1))
    e = d.exp()
    z = e.sum(-1)
    p = e.index_select(-1, index) / z[..., None]
    row = (e / z[..., None]).mean((0, 2)) if keep_row else None
    ed = e.mul_(d)
    ed[..., g.n:].nan_to_num_(0.0)  # hidden draft slots: 0 * -inf
    lo = int(g.lo.max()) if g.lo.size else 0
    if lo > 0:
        ed[..., :lo].nan_to_num_(0.0)  # slots before the sliding window
    rows = torch.stack([z.log() - ed.sum(-1) / z, z.reciprocal(), top.to(z.dtype)], -1)  # slot ids < 2^24: exact
    nkv, r, rep, _ = d.shape
    return (p.transpose(1, 2).reshape(nkv * rep, r, -1), rows.transpose(1, 2).reshape(nkv * rep, r, -1), row)


def massive(x) -> np.ndarray:
    """Massive-activation flag per row of x [..., H] (a host array or a tensor): some |x| > 100 and >= 1000x the
    row's median |x|. The median is taken only where some |x| > 100 (the rule's first condition; rare): the flag
    holds iff the row's largest |x| passes both."""
    a = x.float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float32)
    top = np.maximum(a.max(-1), -a.min(-1))  # the largest |x| without an |x| copy
    big = top > 100
    if not big.any():
        return big
    out = np.zeros(top.shape, dtype=bool)
    out[big] = top[big] >= 1000 * np.median(np.abs(a[big]), axis=-1)
    return out


# -- host side --------------------------------------------------------------------------------------------------------
def head_values(p: np.ndarray, g: Gathered, rows: np.ndarray | None = None) -> np.ndarray:
    """HEAD_FIELDS [R, nh, F] (float32) from the gathered probabilities p [nh, R, G] (host copy of lse_probs or
    full_probs: zero on keys a row did not see) and, on full rounds, the row fields [nh, R, 3] (else entropy /
    max_prob NaN, top_pos -1). Every mass of the metric table in one batched product with the layout's
    weights (context sets, tail slot rules, the window mass), plus the matched control from the chain's depth-1 row."""
    r = p.shape[1]
    p = p.transpose(1, 0, 2).astype(np.float64)  # [R, nh, G]
    out = np.matmul(p, g.weights())
    out[..., _ROW_COLS] = _NOT_COMPUTED if rows is None else rows.transpose(1, 0, 2)
    if g.chain and _MATCHED:
        w, nan = _matched_weights(g.m, r)
        col = (p[0, :, p.shape[-1] - g.m:] @ w).T  # [K, nh]: depth j's mass on the depth-1 row's last j slots
        col[nan] = np.nan
        out[..., _COL[_MATCHED[0]]] = col
    elif not g.chain:
        out[..., [_COL[f] for f in (*_MATCHED, *_WINDOW)]] = np.nan
        if g.depths is not None and _MATCHED:  # a tree: a node's query at depth d, the root's last d-1 keys
            d = np.asarray(g.depths, np.int64)
            w, nan = _matched_weights(g.m, int(d.max()))
            root = p[0, :, p.shape[-1] - g.m:] @ w  # [nh, Dmax]: the root row's mass on its last j keys
            col = root[:, d - 1].T  # [R, nh]
            col[nan[d - 1]] = np.nan
            out[..., _COL[_MATCHED[0]]] = col
    return out.astype(np.float32)


_NOT_COMPUTED = np.array([*(np.nan,) * (len(ROW_FIELDS) - 1), -1.0])


def key_counts(g: Gathered) -> np.ndarray:
    """COUNT_FIELDS [R, C] (int64) of a chain's (or tree's) R query rows: keys seen (after the sliding window), and
    among them each context mass's slots and each tail or derived mass's drafted slots. Uniform attention over the
    seen keys puts count / n_keys on each set: the lifts' denominator."""
    if g.chain and not g.windowed:  # a chain's counts depend on n only through n_keys (column 0)
        c = _chain_counts(g.sizes, g.tail.anc.shape[0]).copy()
        c[:, 0] += g.n
        return c
    return _counts(g)


@lru_cache(maxsize=64)
def _chain_counts(sizes: tuple[int, ...], k_: int) -> np.ndarray:
    return _counts(Gathered.of(0, [np.zeros(x, np.int64) for x in sizes], TailSlots.chain(k_), np.zeros(0, np.int64)))


def _counts(g: Gathered) -> np.ndarray:
    r = g.tail.anc.shape[0]
    s = sum(g.sizes)
    if g.windowed:
        vis = g.visible
        seen_tail = vis[:, s:s + g.f]
        starts = np.cumsum((0, *g.sizes))
        ctx = np.stack([vis[:, a:b].sum(1) for a, b in zip(starts[:-1], starts[1:])], -1)
        n_ctx = np.maximum(g.n - g.lo, 0)
    else:
        seen_tail, ctx, n_ctx = g.tail.path, np.broadcast_to(np.array(g.sizes), (r, len(g.sizes))), np.full(r, g.n)
    out = {"n_keys": n_ctx + seen_tail.sum(1)}
    out.update({m.count: ctx[:, i] for i, m in enumerate(metric_table.of_kind("context")) if m.count})
    out.update(tail_counts(g.tail, seen_tail))
    return np.stack([out[c] for c in COUNT_FIELDS], -1).astype(np.int64)


def hidden_stats(x: np.ndarray) -> np.ndarray:
    """HIDDEN_FIELDS [K, 7] from the layer input, pre and post hidden states x [3, K, H] (float32 host arrays): rms
    and L2 of each, and whether the input or pre state holds a massive activation."""
    l2 = np.sqrt((x * x).sum(-1))  # [3, K] (numpy's pairwise sum)
    out = np.empty((x.shape[1], 7))
    out[:, 1:6:2] = l2.T
    out[:, 0:6:2] = l2.T / math.sqrt(x.shape[-1])  # rms = l2 / sqrt(H)
    out[:, 6] = massive(x[:2]).any(0)
    return out


def aux_stats(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per aux chunk [A, 3]: rms before and after fc_norm, and the massive flag of the input (float32 [A, Ht])."""
    return np.stack([np.sqrt((before * before).mean(-1)), np.sqrt((after * after).mean(-1)), massive(before)], -1)
