"""Multi-head latent attention for an EAGLE-3 draft layer (Kimi K2.x EAGLE-3.1), as vLLM's deepseek_eagle3
serves it: low-rank q and kv projections of the 2H layer input, per-head keys and values decompressed by
kv_b_proj, a RoPE part shared by all heads (interleaved pairs, GPT-J style) and values of v_head_dim.

Queries and keys leave `project` as decompressed heads [B, nh, T, nope + rope], so the hook points, the KV cache
and the capture score MLA heads exactly as the drafter attends (softmax scale included). The cache stores values
zero-padded to the key width (v_head_dim < qk_head_dim), so the fused kernel that returns the log-sum-exp serves
MLA too; the padding columns of the output are dropped before o_proj."""

from __future__ import annotations

import torch
from torch import nn

from . import rope
from .attention import Eagle3Attention, HookPoint, RMSNorm
from .config import DrafterConfig


def softmax_scale(head_dim: int, scaling: dict | None) -> float:
    """qk_head_dim^-1/2, times mscale(factor, mscale_all_dim)^2 under DeepSeek YaRN (vLLM's deepseek_yarn:
    any non-default rope type whose attention_factor is not 1)."""
    s = head_dim**-0.5
    if scaling and scaling.get("rope_type", scaling.get("type", "default")) != "default" \
            and scaling.get("attention_factor") != 1.0 and "factor" in scaling:
        m = rope.yarn_mscale(float(scaling["factor"]), float(scaling.get("mscale_all_dim") or 0.0))
        s *= m * m
    return s


class MLAAttention(Eagle3Attention):
    """Same interface as Eagle3Attention (project / attend, hook points); nkv = nh after decompression."""

    def __init__(self, cfg: DrafterConfig, in_features: int | None = None):
        """`in_features`: the width of the layer input (2H for an EAGLE-3 layer's [emb ; hidden], H for an MTP block)."""
        nn.Module.__init__(self)
        m, h2 = cfg.mla, in_features or 2 * cfg.hidden_size
        self.nope, self.rd, self.vd = int(m["qk_nope_head_dim"]), int(m["qk_rope_head_dim"]), int(m["v_head_dim"])
        self.kvr, qr = int(m["kv_lora_rank"]), m.get("q_lora_rank")
        self.nh = self.nkv = cfg.num_attention_heads
        self.hd = self.nope + self.rd
        self.scale = softmax_scale(self.hd, cfg.rope_scaling)
        self.qk_norm = False
        if qr:
            self.q_a_proj = nn.Linear(h2, int(qr), bias=False)
            self.q_a_layernorm = RMSNorm(int(qr), cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(int(qr), self.nh * self.hd, bias=False)
        else:
            self.q_proj = nn.Linear(h2, self.nh * self.hd, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h2, self.kvr + self.rd, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kvr, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.kvr, self.nh * (self.nope + self.vd), bias=False)
        self.o_proj = nn.Linear(self.nh * self.vd, cfg.hidden_size, bias=False)
        self.hook_q, self.hook_k, self.hook_probs = HookPoint(), HookPoint(), HookPoint()
        self.hook_lse = HookPoint()
        self.attn_impl = "sdpa"

    def project(self, z: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, t, _ = z.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(z))) if hasattr(self, "q_a_proj") else self.q_proj(z)
        q_nope, q_rot = q.view(b, t, self.nh, self.hd).transpose(1, 2).split([self.nope, self.rd], -1)
        latent, k_rot = self.kv_a_proj_with_mqa(z).split([self.kvr, self.rd], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(b, t, self.nh, self.nope + self.vd).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.vd], -1)
        q_rot = rope.apply_interleaved(q_rot, cos, sin)
        k_rot = rope.apply_interleaved(k_rot[:, None], cos, sin).expand(b, self.nh, t, self.rd)
        return torch.cat([q_nope, q_rot], -1), torch.cat([k_nope, k_rot], -1), v.contiguous()
