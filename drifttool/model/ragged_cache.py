"""A KV cache of several independent sequences, each with its own length, so that one drafter forward can run
a step of several prompts at once (the vLLM replay batches its prompts this way: one single-token forward costs
about as much as sixteen side by side on a CPU).

A forward over a ragged cache takes T query rows per sequence, right-aligned: sequence b's real rows are the
last `counts[b]` (set with `plan` before the call); the rows before them are padding that writes nothing and
attends slot 0 only (finite, ignored). Each real row sees its own sequence's slots up to its own, under the
drafter's sliding window, exactly as `KVCache` + `visible` give one sequence."""

from __future__ import annotations

import torch

from .attention import KVCache


class RaggedKVCache:
    """[B, nkv, capacity, hd] keys/values with one length per sequence; capacity is fixed (no growth: row views
    handed out by `row` must stay views)."""

    def __init__(self, batch: int, nkv: int, head_dim: int, device, dtype, capacity: int,
                 v_dim: int | None = None):
        self.k = torch.zeros(batch, nkv, capacity, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros(batch, nkv, capacity, v_dim or head_dim, device=device, dtype=dtype)
        self.lengths = [0] * batch
        self.counts = [0] * batch

    @property
    def batch(self) -> int:
        return self.k.shape[0]

    def plan(self, counts: list[int]) -> None:
        """Real query rows per sequence in the next forward (0: the sequence sits this one out)."""
        if len(counts) != self.batch:
            raise ValueError(f"{len(counts)} counts for a cache of {self.batch} sequences")
        self.counts = list(counts)

    def truncate(self, b: int, length: int) -> None:
        if length > self.lengths[b]:
            raise ValueError(f"cannot truncate sequence {b} of length {self.lengths[b]} to {length}")
        self.lengths[b] = length

    def append(self, k: torch.Tensor, v: torch.Tensor, window: int | None):
        """Write each sequence's real rows of k/v [B, nkv, T, *] after its slots; returns the keys, values
        [B, nkv, L, *] (L = the longest sequence now) and the mask [B, 1, T, L] (True = may attend)."""
        t = k.shape[2]
        starts = list(self.lengths)
        for b, c in enumerate(self.counts):
            if c > t:
                raise ValueError(f"sequence {b}: {c} real rows in a call of {t}")
            if c:
                end = starts[b] + c
                if end > self.k.shape[2]:
                    raise ValueError(f"sequence {b}: {end} slots beyond the cache's capacity {self.k.shape[2]}")
                self.k[b, :, starts[b] : end] = k[b, :, t - c :]
                self.v[b, :, starts[b] : end, : v.shape[3]] = v[b, :, t - c :]
                self.lengths[b] = end
        length = max(1, max(self.lengths))
        return self.k[:, :, :length], self.v[:, :, :length], self.mask(starts, t, length, window)

    def mask(self, starts: list[int], t: int, length: int, window: int | None) -> torch.Tensor:
        dev = self.k.device
        start = torch.tensor(starts, device=dev)[:, None]
        pad = t - torch.tensor(self.counts, device=dev)[:, None]  # [B, 1]: padding rows before the real ones
        i = torch.arange(t, device=dev)[None, :]
        q = start + i - pad  # [B, T]: the slot (= position) of each real query row
        kj = torch.arange(length, device=dev)[None, None, :]
        m = kj <= q[..., None]
        if window is not None:
            m &= kj > q[..., None] - window
        padding = (i < pad)[..., None]  # [B, T, 1]
        m = torch.where(padding, kj == 0, m)
        return m[:, None]

    def row(self, b: int) -> KVCache:
        """Sequence b as a one-sequence `KVCache` (views: what it appends lands here)."""
        return _RowView(self, b)

    def keep(self, rows: list[int]) -> None:
        """Keep only these sequences, in this order (the others have finished)."""
        idx = torch.tensor(rows, device=self.k.device)
        self.k, self.v = self.k.index_select(0, idx), self.v.index_select(0, idx)
        self.lengths = [self.lengths[b] for b in rows]
        self.counts = [0] * len(rows)


class _RowView(KVCache):
    """One sequence of a RaggedKVCache behind KVCache's interface (its length is the parent's entry)."""

    def __init__(self, parent: RaggedKVCache, b: int):  # no KVCache.__init__: nothing of its own to allocate
        self.parent, self.b = parent, b

    @property
    def k(self) -> torch.Tensor:
        return self.parent.k[self.b : self.b + 1]

    @property
    def v(self) -> torch.Tensor:
        return self.parent.v[self.b : self.b + 1]

    @property
    def length(self) -> int:
        return self.parent.lengths[self.b]

    @length.setter
    def length(self, value: int) -> None:
        self.parent.lengths[self.b] = value

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.length + k.shape[2] > self.parent.k.shape[2]:
            raise ValueError(f"sequence {self.b}: beyond the cache's capacity {self.parent.k.shape[2]}")
        return super().append(k, v)
