"""Multi-token-prediction heads (DeepSeek-V3/R1, GLM-4.5, MiMo) as drafters, run the way vLLM runs them
(docs/mtp.md has the file:line of each rule).

One MTP step at slot t (token t+1, hidden h_t, position t; the token embedding zeroed at position 0):
    z   = eh_proj(cat[enorm(embed(ids)), hnorm(h)])      (MiMo: cat[hidden, embeddings], its own names)
    pre = decoder block(z)                                (pre-norm attention + MLP or MoE, residuals added)
    post = shared_head.norm(pre); logits = shared_head.head(post)
The first step's h is the target's last hidden state after its final norm (what vLLM's target returns); the
next step is fed `pre` (DeepSeek, GLM) or `post` (MiMo, whose layer ends in final_layernorm). `norm_output`
says which (the family's own reading unless overridden: the EAGLE-3.1 question asked of MTP). Every step runs
the first MTP layer: vLLM's proposer passes no step index, so `spec_step_idx % num_mtp_layers` is 0 there.

Submodule names are the checkpoint's with `model.layers.{N+i}.` replaced by `layers.{i}.` (MiMo's renamed to
DeepSeek's), so the loop, the capture's hook points and the KV cache treat this drafter like an EAGLE one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import rope
from .attention import Eagle3Attention, HookPoint, RMSNorm
from .config import DrafterConfig
from .drafter import DrafterBase, DraftStep


class MLP(nn.Module):
    """SwiGLU MLP (dense layer, one routed expert or the shared experts)."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    """DeepSeek-V3 / GLM-4.5 router weights: `gate.weight` [E, H] and `gate.e_score_correction_bias` [E]."""

    def __init__(self, hidden: int, experts: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(experts, hidden))
        self.e_score_correction_bias = nn.Parameter(torch.zeros(experts))


class MoE(nn.Module):
    """Sigmoid-scored, group-limited top-k MoE with a bias-corrected choice (`noaux_tc`) and shared experts, as
    DeepSeek-V3 and GLM-4.5 route: choose by sigmoid + bias within the best `topk_group` of `n_group` groups
    (a group scored by its two best choices), weight by the plain sigmoid, renormalise (norm_topk_prob), scale."""

    def __init__(self, hidden: int, moe: dict):
        super().__init__()
        self.m = moe
        e, inter = moe["n_routed_experts"], moe["moe_intermediate_size"]
        self.gate = Router(hidden, e)
        self.experts = nn.ModuleList([MLP(hidden, inter) for _ in range(e)])
        shared = moe["n_shared_experts"]
        self.shared_experts = MLP(hidden, inter * shared) if shared else None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(expert ids [T, k], their weights [T, k] fp32) for rows x [T, H]."""
        m = self.m
        scores = F.linear(x.float(), self.gate.weight.float()).sigmoid()
        choice = scores + self.gate.e_score_correction_bias.float()
        groups = m["n_group"]
        if groups > 1:
            t, e = choice.shape
            best = choice.view(t, groups, e // groups).topk(2, -1).values.sum(-1)
            keep = torch.zeros(t, groups, dtype=torch.bool, device=x.device)
            keep.scatter_(1, best.topk(m["topk_group"], -1).indices, True)
            choice = choice.masked_fill(~keep.repeat_interleave(e // groups, 1), float("-inf"))
        idx = choice.topk(m["num_experts_per_tok"], -1).indices
        w = scores.gather(1, idx)
        if m["norm_topk_prob"]:
            w = w / w.sum(-1, keepdim=True)
        return idx, w * m["routed_scaling_factor"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        idx, w = self.route(flat)
        out = torch.zeros_like(flat)
        for e in idx.unique().tolist():
            rows, slot = (idx == e).nonzero(as_tuple=True)
            out.index_add_(0, rows, self.experts[e](flat[rows]) * w[rows, slot, None].to(flat.dtype))
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat)
        return out.view_as(x)


class GQAAttention(Eagle3Attention):
    """GQA over the block's H-wide input with the Qwen2 / GLM-4.5 options: q/k/v biases, per-head QK RMSNorm
    before RoPE (GLM's use_qk_norm), rotate-half RoPE on the first `rotary_dim` dims of each head (partial)."""

    def __init__(self, cfg: DrafterConfig, bias: bool, rotary_dim: int):
        super().__init__(cfg, in_dim=cfg.hidden_size, bias=bias, rotary_dim=rotary_dim)


class SharedHead(nn.Module):
    """The head's final norm and vocabulary projection (DeepSeek's shared_head; MiMo's final_layernorm and the
    target's lm_head)."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)


class MTPLayer(nn.Module):
    """One MTP module: input norms and projection, a pre-norm decoder block, its shared head."""

    def __init__(self, cfg: DrafterConfig, moe: bool):
        super().__init__()
        h, m = cfg.hidden_size, cfg.mtp
        self.enorm = RMSNorm(h, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(h, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        if cfg.mla:
            from .mla import MLAAttention

            self.self_attn = MLAAttention(cfg, in_features=h)
        else:
            self.self_attn = GQAAttention(cfg, m["attention_bias"], m["rotary_dim"])
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = MoE(h, m["moe"]) if moe else MLP(h, cfg.intermediate_size)
        self.shared_head = SharedHead(cfg)
        self.hidden_first = m["order"] == "hidden_first"

    def inputs(self, emb: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        e, h = self.enorm(emb), self.hnorm(x)
        return self.eh_proj(torch.cat([h, e] if self.hidden_first else [e, h], -1))


class MTPDrafter(DrafterBase):
    """A target's MTP head(s) behind the drafter interface of the loop and the capture (see the module doc)."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.config = cfg
        m = cfg.mtp
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([MTPLayer(cfg, moe) for moe in m["moe_layers"]])
        self.register_buffer("d2t", torch.zeros(cfg.vocab_size, dtype=torch.long))  # full vocabulary: identity
        self.hook_layer_in = HookPoint()  # hidden fed at this depth: the target's last hidden, then fed back
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()
        self.register_buffer("inv_freq", rope.inv_freq(self._rope_dim(), cfg.rope_theta, cfg.rope_scaling),
                             persistent=False)
        self.rope_scale = rope.mscale(cfg.rope_scaling, deepseek=cfg.mla is not None)

    def _rope_dim(self) -> int:
        return int(self.config.mtp["rotary_dim"])

    @property
    def lm_head(self) -> nn.Linear:
        return self.layers[self.step_layer(1)].shared_head.head

    def step_layer(self, depth: int) -> int:
        """Which MTP layer drafts at `depth` (1-based): vLLM's proposer passes no spec_step_idx, so the model's
        `spec_step_idx % num_mtp_layers` is 0 at every step: the first layer, reused (docs/mtp.md)."""
        return 0

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """The target's last hidden state enters the MTP layer as it is (no fc)."""
        return features

    def head(self, pre: torch.Tensor, logits: bool = True) -> DraftStep:
        sh = self.layers[self.step_layer(1)].shared_head
        pre = self.hook_pre(pre)
        post = self.hook_post(sh.norm(pre))
        out = sh.head(post) if logits else None
        return DraftStep(out, pre, post, post if self.config.norm_output else pre)

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache,
                hidden_is_feature: bool, mask: torch.Tensor | None = None) -> DraftStep:
        """T new slots: ids [B,T] (token t+1 at slot t), hidden [B,T,H] (the target's last hidden state, or the
        fed-back tensor), positions [B,T]; appends their K/V to `cache` (as Eagle3Drafter.forward)."""
        layer = self.layers[self.step_layer(1)]
        x = self.hook_layer_in(hidden)
        emb = self.embed_tokens(input_ids).masked_fill((positions == 0)[..., None], 0.0)  # vLLM: no token at 0
        z = layer.inputs(emb, x)
        r1 = z + self.attend_cached(layer.self_attn, layer.input_layernorm(z), positions, cache, mask)
        return self.head(r1 + layer.mlp(layer.post_attention_layernorm(r1)))
