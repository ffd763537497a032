"""The sink the target uses, found from the target's own attention (`--sink target`).

The EAGLE 3.1 paper's sink is "whichever position the target uses" (Llama: the BoS token at position 0; Qwen:
token 1; gpt-oss's learned sink bias and gated attention: none). A fixed first-N rule counts positions the target may
not attend at all. Here the target runs a few of the suite's prompts (the first `max_len` tokens each) and, in every
layer, the attention rows of the last `queries` positions are recomputed from the layer's own q / k projections,
q/k norms and rotary embedding (transformers' own `apply_rotary_pos_emb` of the model's module) for those rows only:
[heads, queries, length] per layer, never an L x L map.

Rule (`RULE`): an early position (one of the first `first` positions) is a sink when the upper two-thirds of the
layers put, on average over heads, sampled queries and prompts, at least MIN_MASS of their attention on it and at
least MIN_LIFT times the share uniform attention over the keys each query saw would give it. Attention sinks are
a property of the upper layers (the first layers attend locally); 0.1 of a row on one token is >= 12x uniform for any
query past position 120, and MIN_LIFT (5x) keeps short rows from qualifying on length alone (a 30-token chat prompt's
uniform share is 0.03: SmolLM2's 0.61 there is 17x). SmolLM2-135M puts 0.42-0.60 on position 0 (single heads
0.75-0.87) and nothing comparable elsewhere. The evidence (mass per layer and per third
of the layers, and the uniform share) goes into the manifest beside the positions."""

from __future__ import annotations

import sys
from typing import Any

import torch

from ..errors import DriftError

MIN_MASS = 0.1
MIN_LIFT = 5.0
RULE = (f"an early position whose mean attention over the upper two-thirds of the target's layers (all heads, the last "
        f"queries of each sampled prompt) is >= {MIN_MASS} and >= {MIN_LIFT:g}x the uniform share")


def _rope_fn(attn) -> Any:
    return getattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb", None)


def attention_rows(model, layers, ids: list[int], queries: list[int]) -> torch.Tensor:
    """[layers, heads, Q, T] attention probabilities of the target's forward over `ids` for the query positions
    `queries` (a fresh pass without the cache; causal)."""
    rows: dict[int, torch.Tensor] = {}
    handles = []
    dev = next(model.parameters()).device
    qi = torch.tensor(queries, device=dev)
    for li, layer in enumerate(layers):
        attn = getattr(layer, "self_attn", None)
        rope = _rope_fn(attn) if attn is not None else None
        if attn is None or rope is None or not all(hasattr(attn, a) for a in ("q_proj", "k_proj", "head_dim", "scaling")):
            raise DriftError(f"--sink target: layer {li} of the target has no Llama-style attention (q_proj, k_proj, "
                             "rotary embedding) to read its attention from; give --sink first:N or pos:i,j")
        if getattr(attn, "sinks", None) is not None:
            raise DriftError("--sink target: the target's attention has learned sink logits (gpt-oss): no position is "
                             "its sink; give --sink first:N or pos:i,j to measure a fixed set")

        def hook(m, args, kwargs, li=li, rope=rope):
            h = args[0] if args else kwargs["hidden_states"]
            cos, sin = kwargs["position_embeddings"]
            t, hd = h.shape[1], m.head_dim
            q = m.q_proj(h).view(1, t, -1, hd)
            k = m.k_proj(h).view(1, t, -1, hd)
            if getattr(m, "q_norm", None) is not None:
                q, k = m.q_norm(q), m.k_norm(k)
            q, k = rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            s = (q[:, :, qi].float() @ k.float().transpose(-1, -2)) * m.scaling  # [1, nh, Q, T]
            s = s.masked_fill(torch.arange(t, device=s.device)[None, :] > qi[:, None], float("-inf"))
            rows[li] = s.softmax(-1)[0]

        handles.append(attn.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids], device=dev), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return torch.stack([rows[i] for i in range(len(layers))])


def find_sinks(target, prompts: list[list[int]], max_len: int = 512, queries: int = 64, first: int = 16,
               n_prompts: int = 4) -> dict[str, Any]:
    """The target's sink positions (and their token ids in the first prompt) with the evidence; DriftError when no
    early position meets RULE."""
    use = [p[:max_len] for p in prompts if len(p) >= 2 * first][:n_prompts]
    if not use:
        raise DriftError(f"--sink target: no prompt of the suite has {2 * first} tokens or more to read the target's "
                         "attention from")
    per_layer, uniform = [], []
    for ids in use:
        qs = list(range(max(first, len(ids) - queries), len(ids)))
        a = attention_rows(target.model, target.layers, ids, qs)  # [L, H, Q, T]
        per_layer.append(a[..., :first].mean((1, 2)))  # [L, first]
        uniform.append(float(torch.tensor([1.0 / (q + 1) for q in qs]).mean()))
    m = torch.stack(per_layer).mean(0)  # [L, first]
    n_layers = m.shape[0]
    third = max(1, n_layers // 3)
    upper = m[third:].mean(0) if n_layers > 1 else m[0]
    u = sum(uniform) / len(uniform)
    pos = [j for j in range(first) if upper[j] >= MIN_MASS and upper[j] >= MIN_LIFT * u]
    best = int(upper.argmax())
    if not pos:
        raise DriftError(f"--sink target: the target attends no early position as a sink (the largest: position "
                         f"{best}, {float(upper[best]):.3f} of the upper layers' attention, {float(upper[best]) / u:.1f}x "
                         f"uniform; rule: {RULE}); give --sink first:N or pos:i,j")
    bands = {"lower": m[:third], "middle": m[third:2 * third], "upper": m[2 * third:]}
    return {
        "positions": pos, "token_ids": [int(use[0][j]) for j in pos], "rule": RULE,
        "prompts": len(use), "max_len": max_len, "queries": queries, "uniform_share": round(u, 6),
        "upper_mass": {str(j): round(float(upper[j]), 4) for j in pos},
        "mass_per_layer": {str(j): [round(float(x), 4) for x in m[:, j]] for j in pos},
        "mass_per_band": {str(j): {b: round(float(v[:, j].mean()), 4) for b, v in bands.items() if len(v)} for j in pos},
    }
