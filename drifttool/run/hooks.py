"""Capture: forward hooks stash cheap per-step tensors; one batched computation per round (attention_stats)
turns them into per-depth, per-head attention masses and hidden magnitudes.

Per draft step the hooks only keep references (the query row, its log-sum-exp from the fused attention kernel,
the layer input, pre, post). At the end of a round each query row's probabilities on the few keys the masses read
(the metric table's context sets, the drafted slots, the matched control's slots) come from the log-sum-exp
(attention_stats.lse_probs, independent of context length), and every field from them on the host
(attention_stats.head_values). On full rounds — every `full_every`-th round, rounds whose row is sampled, and any
round without a log-sum-exp — the K query rows are instead scored against the round's final key cache in one
matmul + softmax (K×heads×L, never L×L): the reference path, which also gives entropy and the head maxima.
`full_every=1` is the reference path on every round. Adapters map hook names onto a module, so the same capture
can sit on a foreign drafter."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..errors import DriftError
from ..trace import key_sets
from ..trace.sinks import RECENT, SinkSpec
from . import attention_stats as stats
from .attention_stats import HEAD_FIELDS, HIDDEN_FIELDS, MASS_FIELDS, MASS_IDX, massive  # noqa: F401 - re-exported (public names)


@dataclass
class DrafterAdapter:
    """Where the capture finds its tensors on a module (names of submodules whose outputs are hooked).

    q: post-RoPE queries [B, nh, T, hd]; the last row of each call is that depth's query.
    layer_in / pre / post: [B, T, H]; aux_pre / aux_post: lists, one per aux chunk [B, T, Ht]."""

    q: str = "layers.0.self_attn.hook_q"
    layer_in: str = "hook_layer_in"
    pre: str = "hook_pre"
    post: str = "hook_post"
    aux_pre: tuple[str, ...] = ()
    aux_post: tuple[str, ...] = ()
    lse: str | None = "layers.0.self_attn.hook_lse"  # [B, nh, T] row log-sum-exps (None: always full rows)

    @classmethod
    def for_drifttool(cls, drafter) -> DrafterAdapter:
        a = drafter.config.num_aux
        return cls(
            aux_pre=tuple(f"hook_aux_pre.{i}" for i in range(a)),
            aux_post=tuple(f"hook_aux_post.{i}" for i in range(a)),
        )


class _Taps:
    """Output callbacks of an identity hook point, installed as its instance-level `forward`. torch's
    forward-hook path costs about as much per call as a small tensor op (measured: ~5% of a drafting round
    of a hidden-256 drafter for the four points tapped per step); this costs one Python call. Several
    captures can share a point; each removes only its own callback."""

    def __init__(self):
        self.fns: list = []

    def __call__(self, x):
        for f in self.fns:
            f(x)
        return x


class _TapHandle:
    def __init__(self, mod: nn.Module, fn):
        self.mod, self.fn = mod, fn

    def remove(self) -> None:
        taps = self.mod.__dict__.get("forward")
        if isinstance(taps, _Taps) and self.fn in taps.fns:
            taps.fns.remove(self.fn)
            if not taps.fns:
                del self.mod.forward  # back to the class's identity forward


def tap(mod: nn.Module, fn):
    """Call fn(output) after every call of `mod`; returns a handle with .remove(). Identity modules (hook
    points) get the cheap instance-level tap, anything else a regular forward hook."""
    if type(mod).forward is nn.Identity.forward:
        taps = mod.__dict__.get("forward")
        if not isinstance(taps, _Taps):
            taps = _Taps()
            mod.forward = taps
        taps.fns.append(fn)
        return _TapHandle(mod, fn)
    return mod.register_forward_hook(lambda _m, _i, out: fn(out))


class Observer:
    """What the chain capture and the tree capture share: the adapter and the heads' softmax scale read off the
    drafter, hooks attached from `_taps()` (module name -> fn of its output), detach, context-manager use."""

    drafter: nn.Module
    adapter: DrafterAdapter | None

    def _setup(self) -> None:
        self.adapter = self.adapter or DrafterAdapter.for_drifttool(self.drafter)
        layers = getattr(self.drafter, "layers", None)  # softmax scale of the drafter's heads (MLA: not hd^-1/2)
        self.scale: float | None = getattr(layers[0].self_attn, "scale", None) if layers else None
        self._handles: list = []

    def _taps(self, mods: dict[str, nn.Module]) -> list[tuple[str, object]]:
        raise NotImplementedError

    def attach(self):
        mods = dict(self.drafter.named_modules())
        taps = self._taps(mods)
        missing = [name for name, _ in taps if name not in mods]
        if missing:
            raise DriftError(f"drafter {type(self.drafter).__name__}: no submodule {missing[0]!r} to hook (the "
                             "capture's adapter names a module this drafter lacks)")
        self._handles = [tap(mods[name], fn) for name, fn in taps]
        return self

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self):
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()


@dataclass
class RoundCapture:
    """Host-side results of one round."""

    round: int
    context_len: int
    heads: np.ndarray  # [K, nh, len(HEAD_FIELDS)]: read a field by name (`field`)
    hidden: np.ndarray  # [K, 7] HIDDEN_FIELDS
    aux: np.ndarray  # [A, 3] rms before, rms after, massive (depth-1 slot features)
    row: np.ndarray | None = None  # [K, L] head-mean attention rows (sampled rounds only)
    slot_tokens: list[int] | None = None
    sink_slots: list[int] | None = None  # the context slots counted as sinks (sampled rounds only)
    full: bool = True  # entropy / max_prob / top_pos computed (a full round); else NaN / NaN / -1
    counts: np.ndarray | None = None  # [K, C] COUNT_FIELDS: keys seen and the size of each mass's key set

    def field(self, name: str) -> np.ndarray:
        """One per-head field [K, nh] by its metric-table name (HEAD_FIELDS)."""
        return stats.field(self.heads, name)


@dataclass
class _Pending:
    """One round's host arrays, waiting for the host work (Capture.flush)."""

    round: int
    n: int
    full: bool
    keep: bool
    g: stats.Gathered
    host: list
    got: list[int]
    n_aux: int
    slots: tuple[list[int], list[int]] | None
    shift: np.ndarray | None = None  # [nh, K, G] scores added by a patch attention site (lse rounds), or None


PENDING = 16  # rounds whose host work is batched (and whenever `.rounds` is read)
_VIEW_ROWS = 64  # a refresh of up to this many slots keeps views of its last row (no copy); a longer one copies it

# every 16th round of a prompt gets full rows (entropy, head maxima): their cost amortised to ~1/16
FULL_EVERY = 16


@dataclass
class Capture(Observer):
    """Observer for `speculate`: attach(), run, then read `.rounds` (one RoundCapture per round)."""

    drafter: nn.Module
    sink: SinkSpec = field(default_factory=SinkSpec)
    recent: int = RECENT  # the recent mass: the last `recent` context slots (sinks excluded)
    template_ids: tuple[int, ...] = ()  # the chat template's special tokens: their slots are the template mass
    keep_rows: int = 0  # reservoir-sample this many rounds' full attention rows per prompt
    keep_qk: bool = False  # keep q rows + draft keys so `attention()` can rebuild any row later
    seed: int = 0
    adapter: DrafterAdapter | None = None
    full_every: int = (
        1  # full rows on rounds 0, N, 2N, ... (1: every round = reference; 0: sampled rows only)
    )

    def __post_init__(self):
        self._setup()
        cfg = getattr(self.drafter, "config", None)
        self.window: int | None = getattr(cfg, "sliding_window", None)  # the drafter's attention window
        self._rounds: list[RoundCapture] = []
        self._pending: list[_Pending] = []
        self._rng = random.Random(self.seed)
        self._seen = 0
        self._qk: dict[int, tuple[torch.Tensor, torch.Tensor, int, list[int]]] = {}
        self._final_keys: torch.Tensor | None = None
        self._ids, self._ids_of = np.zeros(0, dtype=np.int64), None  # see _context_ids
        self._fixed_sinks: np.ndarray | None = None  # see _sinks
        self.shift_source = None  # a patch attention site (attention_edits.AttentionEdit) whose shifts the rows carry
        self._q: list[torch.Tensor] = []  # per-round stores, filled by the taps (see _reset_round)
        self._lse: list[torch.Tensor | None] = []
        self._h: dict[str, list[torch.Tensor]] = {"in": [], "pre": [], "post": []}
        self._aux_pre: list[torch.Tensor | None] = [None] * len(self.adapter.aux_pre)
        self._aux_post: list[torch.Tensor | None] = [None] * len(self.adapter.aux_post)
        self._reset_round()

    # -- hooks -------------------------------------------------------------------------------
    def _reset_round(self) -> None:
        """Empty the per-round stores in place: the taps hold their bound `append`s across rounds."""
        for store in (self._q, self._lse, *self._h.values()):
            store.clear()
        for store in (self._aux_pre, self._aux_post):
            store[:] = [None] * len(store)

    def _taps(self, mods: dict[str, nn.Module]) -> list[tuple[str, object]]:
        ad = self.adapter

        # Per step only a reference is kept (a single-slot step's output is tiny; a short refresh's last row is kept
        # as a view). A long refresh (the prompt's prefill) keeps a copy of its last row so its whole [T, ...]
        # output can be freed. Rows are joined and reduced once, in end_round: a tap is one Python call.
        def last_row(store: list):
            app = store.append

            def f(out):
                t = out.shape[-2]
                app(out if t == 1 else out[..., -1:, :] if t <= _VIEW_ROWS else out[..., -1:, :].clone())

            return f

        def aux(store: list, idx: int):
            def f(out):
                store[idx] = out[0, -1] if out.shape[1] <= _VIEW_ROWS else out[0, -1].clone()

            return f

        def lse_row(out):  # [B, nh, T] -> the last row [B, nh, 1]; None where the kernel gave none
            self._lse.append(out if out is None or out.shape[-1] == 1 else out[..., -1:].clone())

        taps = [(ad.q, last_row(self._q)),
                *((getattr(ad, name), last_row(self._h[key]))
                  for name, key in (("layer_in", "in"), ("pre", "pre"), ("post", "post")))]
        if ad.lse is not None and ad.lse in mods:  # a kernel that gives no lse: full rows every round
            taps.append((ad.lse, lse_row))
        taps += [(name, aux(self._aux_pre, i)) for i, name in enumerate(ad.aux_pre)]
        taps += [(name, aux(self._aux_post, i)) for i, name in enumerate(ad.aux_post)]
        return taps

    def new_prompt(self) -> None:
        """Forget the previous prompt's rounds (the runner drains `.rounds` per prompt)."""
        self.rounds = []
        self._seen = 0
        self._qk = {}
        self._final_keys = None
        self._ids_of = None

    # -- observer protocol ---------------------------------------------------------------------
    def begin_round(self, drafter, round_idx: int, context_len: int, depth: int, seq: list[int]) -> None:
        self._reset_round()
        self._ctx = context_len
        self._seq = seq

    def end_round(self, drafter, cache, record) -> None:
        keys = cache.keys()[0]  # [nkv, L, hd], L = n - 1 + K
        qh = torch.cat(self._q, -2)[0].detach()  # [nh, K, hd]
        self._pending.append(self._device(qh, keys, record))
        if len(self._pending) >= PENDING:
            self.flush()
        if self.keep_qk:
            n = self._ctx
            self._qk[record.round] = (qh.transpose(0, 1).contiguous(), keys[:, n:].clone(), n, list(record.input_ids))
            self._final_keys = keys.clone()  # slots < n never change after commit

    # -- the per-round computation (the maths: attention_stats) ------------------------------------
    def scores(self, q: torch.Tensor, keys: torch.Tensor, n: int) -> torch.Tensor:
        """Attention probabilities [K, nh, L] of K draft-step queries [K, nh, hd] over keys [nkv, L, hd] (fp32).
        Depth j (0-based) sits at slot n-1+j and sees slots <= n-1+j."""
        return stats.probabilities(q, keys, n, self.scale, self.window)

    def _context_ids(self, n: int) -> np.ndarray:
        """Token ids of positions 0..n-1 (int64, host). The loop's `seq` only grows and committed tokens never
        change, so only the tokens committed since the last round are converted (a list -> array copy of the whole
        context costs a millisecond at 16k)."""
        if self._ids_of is not self._seq:
            self._ids, self._ids_of = np.asarray(self._seq[:n], dtype=np.int64), self._seq
        elif self._ids.shape[0] < n:
            self._ids = np.concatenate([self._ids, np.asarray(self._seq[self._ids.shape[0] : n], dtype=np.int64)])
        return self._ids[:n]

    def _device(self, qh: torch.Tensor, keys: torch.Tensor, record) -> _Pending:
        """The round's work on what lives on the device (the few keys the masses read, or on full rounds the whole
        rows) and the one host transfer; the host arrays wait in `_pending` (they hold no reference to the cache).
        qh: the K query rows, head-major [nh, K, hd]."""
        n = self._ctx
        k_ = qh.shape[1]
        ids = self._context_ids(n)
        sink_pos = self._sinks(ids)  # context positions only (on the host)
        sets = key_sets.context_sets(key_sets.KeyContext(n, lambda: ids, sink_pos, self.recent, self.template_ids))
        g = stats.Gathered.of(n, sets, key_sets.TailSlots.chain(k_), key_sets.matched_index(n, k_ - 1, sink_pos),
                              stats.chain_lo(n, k_, self.window), self.recent)
        index = torch.from_numpy(g.index).to(keys.device)
        keep = self._sample_row()
        lse = self._round_lse(k_)
        full = keep or lse is None or (self.full_every > 0 and record.round % self.full_every == 0)
        h = self._h
        x = torch.cat(h["in"] + h["pre"] + h["post"], -2)[0].detach()  # [3K, H]
        got = [i for i, a in enumerate(self._aux_pre) if a is not None]
        xa = torch.stack([*(self._aux_pre[i] for i in got), *(self._aux_post[i] for i in got)]) if got else None
        shifts = self.shift_source.round_shifts(k_) if self.shift_source is not None else None
        if full:  # the whole rows on the device; the gathered keys' probabilities and the row fields to the host
            d = stats.masked_logits(qh.transpose(0, 1), keys, n, self.scale, self.window)  # [nkv, K, rep, L]
            if shifts is not None:
                stats.shift_logits(d, shifts, sink_pos, n)
            p, rows, row = stats.full_probs(d, g, index, keep)
            host = stats.to_host(p, rows, row, x, xa)
        else:  # the few keys the masses read, gathered on the device
            host = stats.to_host(qh, keys[:, index], lse, x, xa)
        slots = (list(self._seq[1 : n + 1]) + list(record.input_ids[1:]), sink_pos.tolist()) if keep else None
        shift = stats.gathered_shift(shifts, g, sink_pos) if shifts is not None and not full else None
        return _Pending(record.round, n, full, keep, g, host, got, len(self._aux_pre), slots, shift)

    def _host(self, r: _Pending) -> RoundCapture:
        """Every field of one round from its host arrays (attention_stats: weights, masses, magnitudes)."""
        k_ = r.g.lo.shape[0]
        if r.full:
            p, rows, row, x, xa = r.host
        else:
            qh, kg, lse, x, xa = r.host
            p = stats.lse_probs(qh, kg, lse, self.scale or qh.shape[-1] ** -0.5, r.g.hidden(), r.shift)
            rows, row = None, None
        hidden = stats.hidden_stats(x.reshape(3, k_, -1))
        aux = np.zeros((r.n_aux, 3))
        if r.got:
            aux[r.got] = stats.aux_stats(xa[: len(r.got)], xa[len(r.got) :])
        heads = stats.head_values(p, r.g, rows)
        # entropy / max_prob are NaN by design on lse rounds (the matched masses are NaN by design at depth 1)
        cols = stats.CHECKED_FULL if r.full else stats.CHECKED_LSE
        if not (np.isfinite(heads[..., cols]).all() and np.isfinite(hidden).all() and np.isfinite(aux).all()
                and heads[..., stats.CHECKED_LSE].max() <= 1.001):  # a weight above 1: the scores overflowed
            raise DriftError(
                f"drafter activations: NaN or inf in round {r.round} (attention or hidden states "
                "overflow; check rms_norm_eps, the weights' scale, or try --dtype float32)"
            )
        rc = RoundCapture(round=r.round, context_len=r.n, heads=heads, hidden=hidden.astype(np.float32),
                          aux=aux.astype(np.float32), full=r.full, counts=stats.key_counts(r.g))
        if r.keep:
            rc.row = row.astype(np.float16)
            rc.slot_tokens, rc.sink_slots = r.slots  # what the sink mass summed over: the drill-down marks these
        return rc

    @property
    def rounds(self) -> list[RoundCapture]:
        """One RoundCapture per captured round (the rounds still waiting for their host work are done first)."""
        self.flush()
        return self._rounds

    @rounds.setter
    def rounds(self, value: list[RoundCapture]) -> None:
        self._pending, self._rounds = [], value

    def flush(self) -> None:
        """Turn the waiting rounds' host arrays into RoundCaptures (in order). The capture batches this host work
        (every PENDING rounds, and whenever `.rounds` is read): done together, it runs with the interpreter's and
        numpy's working set warm instead of after each round's matmuls have evicted it."""
        while self._pending:
            self._rounds.append(self._host(self._pending.pop(0)))

    def sink_slots(self, n: int) -> np.ndarray:
        """The sink rule's context slots among the first n of the prompt in flight (a patch attention site's)."""
        return self._sinks(self._context_ids(n))

    def _sinks(self, ids: np.ndarray) -> np.ndarray:
        """SinkSpec.index(ids), from the positions it gave once when the rule reads no token ids (the capture's
        default `first:4` then costs one search per round)."""
        if self.sink.token_ids:
            return self.sink.index(ids)
        if self._fixed_sinks is None:
            self._fixed_sinks = self.sink.index(np.zeros(max([self.sink.first_n, *(p + 1 for p in self.sink.positions)])))
        return self._fixed_sinks[: np.searchsorted(self._fixed_sinks, len(ids))]

    def _round_lse(self, k_: int) -> torch.Tensor | None:
        """[nh, K] log-sum-exp of the round's K query rows, or None when any step lacked one."""
        if len(self._lse) != k_ or any(x is None for x in self._lse):
            return None
        return torch.cat(self._lse, -1)[0]

    def _sample_row(self) -> bool:
        if self.keep_rows <= 0:
            return False
        self._seen += 1
        kept = sum(r.row is not None for r in self._rounds) + sum(p.keep for p in self._pending)
        if kept < self.keep_rows:
            return True
        j = self._rng.randrange(self._seen)
        if j < self.keep_rows:
            # replace a uniformly chosen kept row (reservoir sampling)
            self.flush()
            victims = [r for r in self._rounds if r.row is not None]
            v = victims[self._rng.randrange(len(victims))]
            v.row, v.slot_tokens, v.sink_slots = None, None, None
            return True
        return False

    # -- on-demand rows (notebook) ---------------------------------------------------------------
    def attention(self, round: int, depth: int, head: int | None = None) -> np.ndarray:
        """Full attention row [L] (head mean, or one head) of a draft step of the last prompt run."""
        if not self.keep_qk:
            raise DriftError("attention rows need Capture(keep_qk=True)")
        if round not in self._qk:
            raise DriftError(f"round {round} not captured; valid rounds: 0..{len(self._qk) - 1}")
        q, draft_keys, n, _ = self._qk[round]
        if not 1 <= depth <= q.shape[0]:
            raise DriftError(f"depth {depth} out of range; valid depths: 1..{q.shape[0]}")
        keys = torch.cat([self._final_keys[:, :n], draft_keys], 1)
        p = self.scores(q, keys, n)[depth - 1]
        p = p.mean(0) if head is None else p[head]
        return p[: n + depth - 1].cpu().numpy()


class RowCaptures(Observer):
    """Several prompts' `Capture`s on one drafter stepping them together (a ragged cache's batch): batch row b of
    every hooked output goes to the capture `rows[b]` names (None: that row is padding in this forward, or the
    call is not a captured step), so each capture sees exactly what it would see running its prompt alone."""

    def __init__(self, drafter: nn.Module, captures: list[Capture]):
        self.drafter, self.adapter, self.captures = drafter, captures[0].adapter, captures
        self.rows: list[int | None] = []  # batch row -> index into captures, set before each forward
        self._setup()

    def _taps(self, mods: dict[str, nn.Module]) -> list[tuple[str, object]]:
        per = [c._taps(mods) for c in self.captures]
        names = [name for name, _ in per[0]]
        if any([name for name, _ in p] != names for p in per):
            raise DriftError("row captures: the captures hook different points")

        def route(i: int):
            fns = [p[i][1] for p in per]

            def f(out):
                for b, c in enumerate(self.rows):
                    if c is not None:
                        fns[c](None if out is None else out[b : b + 1])

            return f

        return [(name, route(i)) for i, name in enumerate(names)]
