"""The attention sites of `drifttool patch`: the depth-k query's scaled scores shifted on one key set before the
softmax, per head, in the drafter's own attention call (the fused kernel takes the shift as an additive bias, so
its log-sum-exp, the output and everything downstream are the edited run's).

A chain's depth-k query (k >= 2) sits at slot n-1+k-1 and sees the context slots 0..n-1 and its k-1 own drafted
slots n..n+k-2. Per head h, with p the row's softmax, `sink` the sink slots' share and O = own / (1 - sink) the own
slots' share of the non-sink keys (the statistic the recency-matched ratio reads), the operations (strength s):

- `attention.sink`: the sink slots' scores + log(1 - s) (s = 1: removed; their weight goes to the other keys).
- `attention.own`: the own drafted slots' scores + log(1 - s) (s = 1: the query sees the prompt only).
- `attention.recency`: the own slots' scores + s * (logit C - logit O), C the depth-1 query's share (of its
  non-sink keys) on the k-1 newest non-sink prompt slots (the recency-matched control): at s = 1 the own slots
  hold exactly C of the non-sink remainder, so the round's recency-matched ratio on non-sink shares is 1 at every
  head: drift removed, recency kept.
- `attention.sinkhold`: the sink slots' scores + s * (logit sink_1 - logit sink_k): at s = 1 the sink holds its
  depth-1 share.

A removed key's shift is REMOVED (exp underflows to exactly 0 in float32, and the capture's entropy term 0 * shift
stays finite). The capture (hooks.Capture) reads the same shifts (`round_shifts`) and adds them to the scores it
recomputes for the keys it sums, so every mass in a patch trace is the edited row's; the key counts (the uniform
share's terms) stay those of the mask. Chains only; a sliding-window drafter is refused."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import DriftError
from ..trace.key_sets import matched_index

REMOVED = -1e9
_EPS = 1e-12


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _strength_log(s: float) -> float:
    return REMOVED if s >= 1 else float(np.log1p(-s))


class AttentionEdit:
    """One attention intervention on one drafter while its chains run (patch's `applied`): the depth of the call in
    flight (from the drafter's forward), the depth-1 row's shares, and each edited depth's shifts of this round."""

    def __init__(self, drafter, iv, k: int, sink_slots):
        attn = drafter.layers[0].self_attn
        if getattr(drafter.config, "sliding_window", None):
            raise DriftError(f"--site {iv.label}: attention sites need full attention (the drafter has a sliding "
                             "window)")
        self.attn, self.iv, self.k, self.sink_slots = attn, iv, k, sink_slots
        self.nh = attn.nh
        self.depth = 0
        self.one: tuple[np.ndarray, np.ndarray] | None = None  # depth-1 row: sink share [nh], control C [nh, K]
        self.shifts: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def count(self, hidden_is_feature: bool) -> None:
        """A drafter call begins: depth 1 when it reads target features, one deeper otherwise."""
        if hidden_is_feature:
            self.depth, self.one, self.shifts = 1, None, {}
        else:
            self.depth += 1

    def round_shifts(self, k_: int) -> tuple[np.ndarray, np.ndarray]:
        """(sink shift [K, nh], own shift [K, nh]) of the round just drafted (0 where nothing was edited)."""
        sink, own = np.zeros((k_, self.nh)), np.zeros((k_, self.nh))
        for d, (a, b) in self.shifts.items():
            if d <= k_:
                sink[d - 1], own[d - 1] = a, b
        return sink, own

    def attend(self, orig, q, k, v, mask, causal=False, bias=None):
        d = self.depth
        if d == 1 and self.iv.op in ("recency", "sinkhold"):
            self.one = self._depth_one(q, k)
        if not (self.iv.strength > 0 and self.iv.acts_at(d, self.k)):
            return orig(q, k, v, mask, causal, bias)
        if q.shape[2] != 1 or mask is not None:
            raise DriftError(f"--site {self.iv.label}: attention sites edit chains only (one query per depth)")
        length = k.shape[2]
        n = length - (d - 1)
        sink_idx = np.asarray(self.sink_slots(n), dtype=np.int64)
        sinks = torch.as_tensor(sink_idx, device=q.device)
        p = self._row(q, k)  # [nh, L] float64 on the host
        sink_sh, own_sh = self._shift(p, sink_idx, n, d)
        self.shifts[d] = (sink_sh, own_sh)
        extra = torch.zeros(1, self.nh, 1, length, dtype=torch.float32, device=q.device)
        extra[0, :, 0, sinks] += torch.as_tensor(sink_sh, dtype=torch.float32, device=q.device)[:, None]
        extra[0, :, 0, n:] += torch.as_tensor(own_sh, dtype=torch.float32, device=q.device)[:, None]
        return orig(q, k, v, mask, causal, extra if bias is None else bias + extra)

    def _row(self, q: torch.Tensor, k: torch.Tensor) -> np.ndarray:
        """The last query row's softmax [nh, L] (the row sees every slot of a chain's cache)."""
        nh, nkv = q.shape[1], k.shape[1]
        qg = q[0, :, -1].float().reshape(nkv, nh // nkv, -1)
        s = torch.matmul(qg, k[0].float().transpose(1, 2)).reshape(nh, -1) * self.attn.scale
        return s.softmax(-1).double().cpu().numpy()

    def _depth_one(self, q, k) -> tuple[np.ndarray, np.ndarray]:
        """The depth-1 query (last row; slot n-1, seeing slots 0..n-1): its sink share and, for j = 1..K-1, its
        share of the non-sink keys on the j newest non-sink prompt slots (the recency-matched control)."""
        p = self._row(q, k)
        n = k.shape[2]
        sinks = np.asarray(self.sink_slots(n), dtype=np.int64)
        sink = p[:, sinks].sum(-1)
        m = matched_index(n, self.k - 1, sinks)
        rest = np.maximum(1.0 - sink, _EPS)
        c = np.full((self.nh, self.k), np.nan)
        for j in range(1, min(m.size, self.k - 1) + 1):
            c[:, j] = p[:, m[m.size - j:]].sum(-1) / rest
        return sink, c

    def _shift(self, p: np.ndarray, sinks: np.ndarray, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
        op, s = self.iv.op, float(self.iv.strength)
        zero = np.zeros(self.nh)
        if op == "sink":
            return np.full(self.nh, _strength_log(s)), zero
        if op == "own":
            return zero, np.full(self.nh, _strength_log(s))
        sink = p[:, sinks].sum(-1)
        if op == "sinkhold":
            return s * (_logit(self.one[0]) - _logit(sink)), zero
        own_share = p[:, n:].sum(-1) / np.maximum(1.0 - sink, _EPS)
        c = self.one[1][:, d - 1]
        return zero, np.where(np.isfinite(c), s * (_logit(c) - _logit(own_share)), 0.0)
