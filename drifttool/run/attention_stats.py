"""The per-round maths of the capture, pure functions of tensors: masked draft-query scores, region masses
(sink / earlier draft steps / own slot), entropy, the head's largest weight and its slot, hidden-state
magnitudes and the massive-activation flag. `hooks.Capture` collects the tensors and calls these once per
round; what counts as a sink is `SinkSpec`'s alone (the caller passes the sink positions).

Cost: this runs once per round over K x heads x L scores, so every full-length pass counts (with K=8, 8 heads
and 16k context one pass reads and writes 4 MiB; see bench/bench_overhead.py). Hence: scores in the
[nkv, K, rep, L] layout one matmul writes; the chain mask only on the K-1 draft slots at the tail (the context
is visible to every depth); one exp shared by masses and entropy (no entr); sink mass gathered from the few
sink columns.

`lse_masses` is the cheap path: with each query row's log-sum-exp from the fused attention kernel, the sink
and chain masses are exp(q.k * scale - lse) over the S sink keys and K-1 draft keys alone, O(K (S+K) heads)
per round whatever the context length; prompt mass is the rest. Entropy and the head maxima need the full row
and come only from `head_stats`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
from einops import rearrange

from ..trace import metric_table
from .key_sets import matched_index

# The per-head fields in the capture's packed order (trace/metric_table.head_fields): the context masses (sink,
# recent, template, ...: each a key set of the metric table), the draft / own masses over this chain's draft slots,
# entropy, max_prob = the head's largest attention weight (1/z: after subtracting the row max the top key's weight is
# exp(0)) and top_pos = the key slot it sits on (slot t holds token t+1's pair at position t).
HEAD_FIELDS = metric_table.head_fields()
HIDDEN_FIELDS = ("rms_in", "l2_in", "rms_pre", "l2_pre", "rms_post", "l2_post", "massive")
MASS_FIELDS = metric_table.measured_masses()  # every round (lse); the others on full rounds only (NaN / NaN / -1)
MASS_IDX = tuple(HEAD_FIELDS.index(m) for m in MASS_FIELDS)
# per depth: the keys the query saw and how many of them each mass's key set holds (the uniform share's terms)
COUNT_FIELDS = metric_table.key_counts()
_CONTEXT = metric_table.context_masses()
_TAIL = ("draft_mass", "own_mass")  # computed here from the chain's (or tree's) draft-slot masks
_MATCHED = tuple(m.name for m in metric_table.of_kind("matched"))  # from the depth-1 row, stored at depth k
_WINDOW = tuple(m.name for m in metric_table.of_kind("window"))  # the last R keys: own drafted slots + newest context
_RECENT = _CONTEXT.index("recent_mass")  # the context set whose newest slots the window mass keeps
# the fields that must be finite (the capture's overflow check): every field on full rounds, the masses on lse
# rounds; the matched masses are NaN by design at depth 1 (and on trees)
CHECKED_FULL = tuple(i for i, f in enumerate(HEAD_FIELDS) if f not in _MATCHED)
CHECKED_LSE = tuple(i for i in MASS_IDX if HEAD_FIELDS[i] not in _MATCHED)
CHECKED_TREE = tuple(i for i in CHECKED_FULL if HEAD_FIELDS[i] not in _WINDOW)  # trees: no window mass either


def head_fields(heads) -> dict:
    """HEAD_FIELDS [..., len(HEAD_FIELDS)] as named arrays [...], with the derived masses of the metric table (self
    = draft + own, prompt = the rest). Chains and trees shape their tables from this one reading."""
    f = {name: heads[..., i] for i, name in enumerate(HEAD_FIELDS)}
    for m in metric_table.of_kind("derived"):
        total = sum(f[p] for p in m.parts)
        f[m.name] = 1.0 - total if m.complement else total
    return f


def key_counts(n: int, k_: int, sets, window: int | None = None, n_self=None):
    """COUNT_FIELDS [K, C] (int64, numpy) of a chain's K depth queries: keys seen (after the sliding window), and
    among them each context mass's slots (`sets`, in the metric table's order) and the self slots (earlier draft
    steps + own slot: k - 1 at depth k). Uniform attention over the seen keys puts count / n_keys on each set: the
    lifts' denominator. n_self: per-row self counts for a tree's rows (default: the chain's)."""
    import numpy as np

    lo = np.array([window_start(n, j, window) for j in range(k_)])
    j = np.arange(k_)
    # depth j sees slots lo..n-1+j; its self slots n..n-1+j, those a sliding window still shows
    out = {"n_keys": n + j - lo,
           "n_self": j - np.clip(lo - n, 0, None) if n_self is None else np.asarray(n_self)}
    for m, s in zip(metric_table.of_kind("context"), sets):
        idx = np.asarray(s.cpu() if hasattr(s, "cpu") else s).reshape(-1)
        out[m.count] = (idx[None, :] >= lo[:, None]).sum(1)
    return np.stack([out[c] for c in COUNT_FIELDS], -1).astype(np.int64)


def massive(x: torch.Tensor) -> torch.Tensor:
    """Massive-activation flag per row: some |x| > 100 and >= 1000x the row's median |x|."""
    a = x.abs().float()
    big = a > 100
    if a.device.type == "cpu" and not bool(big.any()):  # nothing above 100: no row qualifies, skip the median
        return torch.zeros(a.shape[:-1], dtype=torch.bool)  # (on CPU the test costs no device sync)
    med = a.median(dim=-1, keepdim=True).values
    return (big & (a >= 1000 * med)).any(-1)


def rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean(-1).sqrt()


def window_start(n: int, j: int, window: int | None) -> int:
    """First slot depth j (0-based, query slot n-1+j) can attend under a sliding window (None: slot 0)."""
    return max(0, n + j - window) if window is not None else 0


@lru_cache(maxsize=32)
def chain_masks(k_: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Over the K-1 draft slots at the tail (col c = slot n+c = the input of depth c+2), per depth j
    (0-based): hidden [1, K, 1, K-1] (c >= j), earlier draft steps [K, 1, K-1] (c < j-1) and own slot
    (c == j-1). Built once per (K, device)."""
    ones = torch.ones(k_, k_ - 1, device=device)
    seen, draft = ones.tril(-1), ones.tril(-2)
    return (seen == 0)[None, :, None, :], draft[:, None], (seen - draft)[:, None]


@dataclass(frozen=True)
class Tail:
    """Per query row, the tail slots (after the n context slots) it cannot see, and among those it sees which are
    earlier draft steps of its own path and which is its own input slot. A chain is a tree of width one: its
    tail is `chain_tail`; a draft tree's comes from its ancestor masks (`tree_tail`). Everything else about
    the statistics is shared."""

    hidden: torch.Tensor  # [1, R, 1, F] bool, in masked_logits' [nkv, R, rep, L] layout
    draft: torch.Tensor  # [R, 1, F] float weights
    own: torch.Tensor  # [R, 1, F] float weights


def chain_tail(k_: int, device: str) -> Tail:
    """The chain's K rows over its K-1 draft slots (chain_masks)."""
    return Tail(*chain_masks(k_, device))


def tree_tail(anc: torch.Tensor, own: torch.Tensor) -> Tail:
    """R query rows over F fed slots from bool masks [R, F]: strict ancestors' slots and the row's own slot."""
    return Tail((~(anc | own))[None, :, None, :], anc.float()[:, None], own.float()[:, None])


def masked_logits(q: torch.Tensor, keys: torch.Tensor, n: int, scale: float | None = None,
                  window: int | None = None, tail: Tail | None = None) -> torch.Tensor:
    """Masked scaled scores [nkv, K, rep, L] (fp32) of the K draft-step queries q [K, nh, hd] (head
    h = g * rep + r uses kv head g) over keys [nkv, L, hd]. Depth j (0-based) sits at slot n-1+j and
    sees slots <= n-1+j: only draft slots n..L-1 can be hidden (and, under a window, the oldest slots).
    tail: which draft slots each row sees (default: the chain's; a tree's from tree_tail)."""
    k_, nh, hd = q.shape
    nkv, length, _ = keys.shape
    qg = rearrange(q.float(), "k (g r) d -> g (k r) d", g=nkv)  # GQA: kv head g serves query heads g*rep..
    s = torch.matmul(qg, keys.float().transpose(1, 2)).view(nkv, k_, nh // nkv, length)
    s.mul_(scale or 1.0 / math.sqrt(hd))
    s[..., n:].masked_fill_((tail or chain_tail(k_, str(q.device))).hidden.to(s.device), float("-inf"))
    for j in range(k_):  # a sliding window hides slots <= n-1+j-W from depth j (sinks included: zero mass)
        lo = window_start(n, j, window)
        if lo > 0:
            s[:, j, :, :lo] = float("-inf")
    return s


def probabilities(q: torch.Tensor, keys: torch.Tensor, n: int, scale: float | None = None,
                  window: int | None = None) -> torch.Tensor:
    """Attention probabilities [K, nh, L] of K draft-step queries [K, nh, hd] over keys [nkv, L, hd] (fp32)."""
    p = masked_logits(q, keys, n, scale, window).softmax(-1)
    return rearrange(p, "g k r l -> k (g r) l")


def head_stats(d: torch.Tensor, n: int, sets: list[torch.Tensor], window: int | None = None,
               keep_row: bool = False, tail: Tail | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """HEAD_FIELDS [K, nh, F] from masked logits d [nkv, K, rep, L] (consumed in place), and when keep_row the
    head-mean attention rows [K, L]. sets: each context mass's slots (metric_table.context_sets: sink first).

    Softmax by hand, so the pieces serve every statistic: d = s - rowmax, e = exp(d), z = sum e, p = e / z,
    entropy = log z - sum(e * d) / z. Full-length passes: max, sub, exp, sum, mul, sum; everything else
    touches the few sink columns or the K-1 draft columns."""
    k_ = d.shape[1]
    mx, top = d.max(-1)  # the max pass the softmax needs anyway also names the most-attended slot
    d.sub_(mx.unsqueeze(-1))
    e = d.exp()
    z = e.sum(-1)
    f = {name: e.index_select(-1, s.to(e.device)).sum(-1) / z for name, s in zip(_CONTEXT, sets)}
    if tail is None:  # a chain: depth k's control is the depth-1 row's mass on its k-1 most recent non-sink keys
        mi = matched_index(n, k_ - 1, sets[0]).to(e.device)
        f.update(matched(e[:, 0, :, :].index_select(-1, mi) / z[:, 0, :, None], k_, 1))
    else:  # a tree's rows are nodes, not depths: no matched control (docs/metrics.md)
        f.update({m: torch.full_like(z, float("nan")) for m in _MATCHED})
    t = tail or chain_tail(k_, str(d.device))
    w = e[..., n:] / z[..., None]  # draft slots (a chain's n .. n+K-2: the inputs of depths 2..K)
    draft, own = (w * t.draft.to(w)).sum(-1), (w * t.own.to(w)).sum(-1)
    if tail is None:  # the last R keys whatever they are: own slots + the recent set less its j oldest at depth j
        r = e.index_select(-1, sets[_RECENT].to(e.device)) / z[..., None]  # [nkv, K, rep, R']
        f.update({m: r.sum(-1) - _oldest(r, k_, 1) + draft + own for m in _WINDOW})
    else:
        f.update({m: torch.full_like(z, float("nan")) for m in _WINDOW})
    row = (e / z[..., None]).mean((0, 2)) if keep_row else None  # [K, L] head mean, before e is reused
    ed = e.mul_(d)
    ed[..., n:].nan_to_num_(0.0)  # hidden draft slots: 0 * -inf
    lo = window_start(n, k_ - 1, window)
    if lo > 0:
        ed[..., :lo].nan_to_num_(0.0)  # slots before the sliding window
    f.update(draft_mass=draft, own_mass=own, entropy=z.log() - ed.sum(-1) / z, max_prob=z.reciprocal(),
             top_pos=top.to(z.dtype))  # slot ids < 2^24: exact in fp32
    heads = rearrange(torch.stack([f[name] for name in HEAD_FIELDS], -1), "g k r f -> k (g r) f")
    return heads, row


def _oldest(r: torch.Tensor, k_: int, axis: int) -> torch.Tensor:
    """Per depth j (dimension `axis` of r [..., R'], of size K): the mass on the j oldest of the recent set's R'
    slots (all of them when j > R')."""
    c = torch.nn.functional.pad(r.cumsum(-1), (1, 0))  # c[..., i] = mass on the i oldest
    idx = torch.clamp(torch.arange(k_, device=r.device), max=r.shape[-1])
    view = [1] * c.dim()
    view[axis] = k_
    return c.gather(-1, idx.view(view).expand(*c.shape[:-1], 1)).squeeze(-1)


def matched(tail_p: torch.Tensor, k_: int, axis: int) -> dict[str, torch.Tensor]:
    """The matched mass of every depth from the depth-1 row's probabilities on the matched control's m <= K-1 slots
    tail_p [..., m] (sinks.matched_index: the last non-sink context slots, ascending): depth j (0-based) gets the
    mass on the last j of them (j = 1..m; NaN at depth 1 and where j > m), stacked on `axis` of the result (head_stats' [nkv, K, rep] layout: 1; lse_masses'
    [K, nh]: 0)."""
    m = tail_p.shape[-1]
    last = tail_p.flip(-1).cumsum(-1)  # [..., m]: mass on the last 1, 2, .. m slots
    nan = torch.full((*tail_p.shape[:-1], 1 + k_ - 1 - m), float("nan"), dtype=last.dtype, device=last.device)
    cols = torch.cat([nan[..., :1], last, nan[..., 1:]], -1)  # [..., K]: row 0 and rows beyond the context NaN
    return {_MATCHED[0]: cols.movedim(-1, axis)} if _MATCHED else {}


def lse_masses(q: torch.Tensor, keys: torch.Tensor, n: int, lse: torch.Tensor, sets: list[torch.Tensor],
               scale: float | None = None, window: int | None = None) -> torch.Tensor:
    """HEAD_FIELDS [K, nh, F] from the K draft-step queries q [K, nh, hd], the round's keys [nkv, L, hd] and each
    query row's log-sum-exp lse [K, nh] over the keys it attended: each context mass (`sets`, as head_stats takes
    them) and the earlier-draft / own masses exactly as `head_stats` defines them (same slots, same window rule),
    entropy and max_prob NaN, top_pos -1 (not computed). Only the context sets' keys and the K-1 draft keys are
    read, gathered before the fp32 upcast (bf16 caches stay).
    About ten small ops, all in the [K, nh, keys] layout (no reshuffles): this runs every round, and on a small
    drafter its fixed cost is what capture adds."""
    k_, nh, hd = q.shape
    nkv = keys.shape[0]
    dev = q.device
    sets = [s.to(dev) for s in sets]
    # every context set's slots, then the K-1 draft slots, then the matched control's last m non-sink context slots
    mi = matched_index(n, k_ - 1, sets[0]).to(dev)
    m = mi.numel()
    idx = torch.cat([*sets, torch.arange(n, n + k_ - 1, device=dev), mi])
    kg = keys[:, idx].float().repeat_interleave(nh // nkv, 0)  # [nh, S+K-1, hd]: head h reads kv head h // rep
    s = torch.bmm(q.float().transpose(0, 1), kg.transpose(1, 2)).transpose(0, 1)  # [K, nh, S+K-1]
    p = (s * (scale or 1.0 / math.sqrt(hd)) - lse.float()[..., None]).exp_()
    if window is not None and window_start(n, k_ - 1, window) > 0:  # some key left some depth's window
        lo = torch.tensor([window_start(n, j, window) for j in range(k_)], device=dev)
        p.mul_((idx[None, :] >= lo[:, None]).float()[:, None, :])  # [K, 1, S+K-1]: inside the window
    ctl = p[0, :, p.shape[-1] - m:]  # [nh, m]: the depth-1 row on the last m context slots (window applied above)
    masses = torch.bmm(p[..., :p.shape[-1] - m], _region_weights(k_, tuple(s.shape[0] for s in sets), str(dev)))
    masses = masses.add_(_not_computed(k_, nh, str(dev)))  # [K, nh, F]
    if _WINDOW:  # the window mass: self + the recent set less its j oldest slots at depth j
        o = sum(x.shape[0] for x in sets[:_RECENT])
        r = p[..., o:o + sets[_RECENT].shape[0]]  # [K, nh, R']
        self_ = masses[..., HEAD_FIELDS.index("draft_mass")] + masses[..., HEAD_FIELDS.index("own_mass")]
        for name in _WINDOW:
            masses[..., HEAD_FIELDS.index(name)] = r.sum(-1) - _oldest(r, k_, 0) + self_
    for name, col in matched(ctl, k_, 0).items():
        masses[..., HEAD_FIELDS.index(name)] = col
    return masses


@lru_cache(maxsize=64)
def _region_weights(k_: int, sizes: tuple[int, ...], device: str) -> torch.Tensor:
    """[K, sum(sizes)+K-1, F] in HEAD_FIELDS order: per depth, which of the gathered keys (each context set's
    slots, then the K-1 draft slots) count towards each context mass, the earlier draft steps and the own slot
    (chain_masks' rule); the row-only fields' columns are zero (_not_computed adds their NaN / -1)."""
    _, draft_w, own_w = chain_masks(k_, device)
    s = sum(sizes)
    w = torch.zeros(k_, s + k_ - 1, len(HEAD_FIELDS), device=device)
    o = 0
    for name, size in zip(_CONTEXT, sizes):
        w[:, o:o + size, HEAD_FIELDS.index(name)] = 1
        o += size
    w[:, s:, HEAD_FIELDS.index("draft_mass")] = draft_w[:, 0]
    w[:, s:, HEAD_FIELDS.index("own_mass")] = own_w[:, 0]
    return w


@lru_cache(maxsize=32)
def _not_computed(k_: int, nh: int, device: str) -> torch.Tensor:
    """[K, nh, F]: NaN for entropy and max_prob, -1 for top_pos, 0 elsewhere (the fields only a full row gives)."""
    base = torch.zeros(len(HEAD_FIELDS), device=device)
    for name in HEAD_FIELDS:
        if name in _CONTEXT or name in _TAIL or name in _MATCHED or name in _WINDOW:
            continue
        base[HEAD_FIELDS.index(name)] = -1.0 if name == "top_pos" else float("nan")
    return base.expand(k_, nh, len(HEAD_FIELDS))


def hidden_stats(x: torch.Tensor) -> torch.Tensor:
    """HIDDEN_FIELDS [K, 7] from the layer input, pre and post hidden states x [3, K, H] (fp32): rms and L2 of
    each, and whether the input or pre state holds a massive activation."""
    ss = x.pow(2).sum(-1)  # one pass serves both: l2 = sqrt(ss), rms = sqrt(ss / H)
    l2, r = ss.sqrt(), (ss / x.shape[-1]).sqrt()
    return torch.stack([r[0], l2[0], r[1], l2[1], r[2], l2[2], massive(x[:2]).any(0).float()], -1)


def aux_stats(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Per aux chunk [A, 3]: rms before and after fc_norm, and the massive flag of the input (fp32 [A, Ht])."""
    return torch.stack([rms(before), rms(after), massive(before).float()], -1)
