"""Tiny random models built on the fly, for tests and for a demo that needs no shipped weights."""

from __future__ import annotations

import torch

from .config import DrafterConfig
from .drafter import Eagle3Drafter
from .target import Target


def tiny_target(
    vocab: int = 64, hidden: int = 64, layers: int = 4, heads: int = 4, kv_heads: int = 2,
    max_pos: int = 512, seed: int = 0,
) -> Target:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_pos,
        tie_word_embeddings=False, attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg)
    # Sharpen the output so greedy decoding is stable and far from ties.
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return Target(model.eval(), aux_layer_ids=[1, layers // 2, layers - 1])


def tiny_drafter_config(target: Target, draft_vocab: int | None = None, **flags) -> DrafterConfig:
    h = target.hidden_size
    heads = int(target.config.num_attention_heads)
    return DrafterConfig(
        hidden_size=h, num_attention_heads=heads, num_key_value_heads=int(target.config.num_key_value_heads),
        head_dim=h // heads, intermediate_size=2 * h, vocab_size=target.vocab_size,
        draft_vocab_size=draft_vocab or target.vocab_size, target_hidden_size=h,
        aux_layer_ids=list(target.aux_layer_ids), **flags,
    )


def tiny_drafter(target: Target, seed: int = 1, draft_vocab: int | None = None, **flags) -> Eagle3Drafter:
    """A random drafter sharing the target's embeddings and lm_head rows: imperfect but often right."""
    torch.manual_seed(seed)
    cfg = tiny_drafter_config(target, draft_vocab, **flags)
    d = Eagle3Drafter(cfg)
    with torch.no_grad():
        d.embed_tokens.weight.copy_(target.input_embeddings())
        vd = cfg.draft_vocab_size
        d.lm_head.weight.copy_(target.model.lm_head.weight[:vd])
        for m in d.modules():
            if hasattr(m, "weight") and m.weight.ndim == 2 and m is not d.embed_tokens and m is not d.lm_head:
                m.weight.mul_(2.0)
    return d.eval()
