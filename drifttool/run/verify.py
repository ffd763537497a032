"""Verification of a drafted chain: greedy prefix match, or speculative rejection sampling."""

from __future__ import annotations

import torch


def greedy_accept(draft_ids: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Accept the longest prefix where draft == target argmax; return (accepted, bonus token).

    target_logits [K+1, V]: row i is the target's prediction after the first i drafts."""
    choice = target_logits.argmax(-1).tolist()
    a = 0
    while a < len(draft_ids) and draft_ids[a] == choice[a]:
        a += 1
    return a, choice[a]


def rejection_sample(
    draft_ids: list[int],
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Standard speculative sampling (Leviathan et al.; Chen et al.), which preserves the target distribution.

    draft_probs [K, V] (the drafter's distribution each draft was sampled from, in target-vocab space),
    target_probs [K+1, V]. Returns (accepted, next token)."""
    for i, d in enumerate(draft_ids):
        p, q = float(target_probs[i, d]), float(draft_probs[i, d])
        u = float(torch.rand((), generator=generator))
        if q > 0 and u < min(1.0, p / q):
            continue
        resid = (target_probs[i] - draft_probs[i]).clamp_min(0)
        total = resid.sum()
        dist = resid / total if total > 0 else target_probs[i]
        return i, int(torch.multinomial(dist, 1, generator=generator))
    k = len(draft_ids)
    return k, int(torch.multinomial(target_probs[k], 1, generator=generator))
