"""Shared pieces of the benchmarks: the bench drafter, a filled KV cache, and one drafting round.

`draft_round` is the drafting half of `drifttool.run.loop.speculate` with the target taken out, calling the loop's
own steps: `refresh` the accepted slots with (precomputed) target features, `draft_chain` K tokens by chaining
K-1 single-slot steps, and hand the round to the observers exactly as the loop does. The context is reset to the same length every
round (the cache is truncated back), so every round does the same work and capture on/off see identical
inputs."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial

import torch

from drifttool.model.config import DrafterConfig
from drifttool.model.drafter import Eagle3Drafter, KVCache
from drifttool.run.loop import RoundRecord, draft_chain, draft_token, refresh


@dataclass
class BenchShape:
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 2
    vocab: int = 2048
    depth: int = 8  # K draft tokens per round
    refresh: int = 3  # accepted slots re-run with target features at the start of each round

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def describe(self) -> str:
        return (f"drafter hidden {self.hidden}, {self.heads} heads x {self.head_dim} ({self.kv_heads} kv), "
                f"vocab {self.vocab}, fp32 CPU; K={self.depth}, refresh {self.refresh} slots/round")


def make_drafter(shape: BenchShape, max_pos: int, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    cfg = DrafterConfig(
        hidden_size=shape.hidden, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, intermediate_size=2 * shape.hidden, vocab_size=shape.vocab,
        draft_vocab_size=shape.vocab, target_hidden_size=shape.hidden, aux_layer_ids=[1, 2, 3],
        max_position_embeddings=max_pos, fc_norm=True, norm_output=True,
    )
    return Eagle3Drafter(cfg).eval()


@dataclass
class Context:
    """A prompt of n committed tokens: ids (length n+1, the newest committed token last) and features [n, A*Ht]."""

    n: int
    seq: list[int]
    feats: torch.Tensor


def make_context(shape: BenchShape, n: int, seed: int = 0) -> Context:
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(1, shape.vocab, (n + 1,), generator=g).tolist()
    feats = torch.randn(n, 3 * shape.hidden, generator=g)
    return Context(n, seq, feats)


@torch.no_grad()
def prefill(drafter: Eagle3Drafter, ctx: Context, shape: BenchShape, chunk: int = 512) -> KVCache:
    """Fill slots 0..n-refresh-1 with target features, `chunk` slots per forward (chunked prefill)."""
    cache = drafter.new_cache(capacity=ctx.n + shape.depth + 8)
    stop = ctx.n - shape.refresh
    for a in range(0, stop, chunk):
        b = min(stop, a + chunk)
        ids = torch.tensor(ctx.seq[a + 1 : b + 1])[None]
        drafter(ids, ctx.feats[None, a:b], torch.arange(a, b)[None], cache, hidden_is_feature=True)
    return cache


@torch.no_grad()
def draft_round(drafter: Eagle3Drafter, cache: KVCache, ctx: Context, shape: BenchShape, r: int = 0,
                observers=()) -> RoundRecord:
    """One round of the drafting path (the loop's `refresh` + `draft_chain`, no verification) at context n."""
    n, depth, m = ctx.n, shape.depth, shape.refresh
    seq = ctx.seq
    for o in observers:
        o.begin_round(drafter, r, n, depth, seq)
    step = refresh(drafter, cache, seq[n - m + 1 :], n - m, ctx.feats[n - m : n])
    drafts, _, fed = draft_chain(drafter, cache, step, n, depth, seq[-1], partial(draft_token, drafter))
    rec = RoundRecord(round=r, context_len=n, draft_ids=drafts, target_ids=drafts, accepted=0,
                      match=[True] * depth, bonus=0, input_ids=fed)
    for o in observers:
        o.end_round(drafter, cache, rec)
    return rec


def median(xs) -> float:
    return float(statistics.median(xs))


def fmt_ctx(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def parse_contexts(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        out.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
    return out


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
