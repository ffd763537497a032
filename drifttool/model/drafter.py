"""An independent EAGLE-3 / EAGLE-3.1 drafter whose submodule names match speculators/vLLM checkpoint keys.

Named hook points (identity modules) expose every tensor drifttool measures; attaching hooks never
changes outputs. Three ways to run it: `forward` with a KV cache (the real chain, vLLM semantics),
the same with given tokens (teacher-forced), and `ttt_forward` (docs/eagle3.md §5 training-time test).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from . import rope
from .attention import Eagle3Attention, HookPoint, KVCache, RMSNorm, gqa_repeat, visible  # noqa: F401 - re-exported
from .config import DrafterConfig
from .ragged_cache import RaggedKVCache


class Eagle3MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Eagle3DecoderLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.mla:
            from .mla import MLAAttention

            self.self_attn = MLAAttention(cfg)
        else:
            self.self_attn = Eagle3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Eagle3MLP(cfg)
        self.norm_before_residual = cfg.norm_before_residual

    def inputs(self, emb: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z = [input_layernorm(emb), hidden_norm(x)] (embeddings first) and the residual stream r0."""
        h = self.hidden_norm(x)
        z = torch.cat([self.input_layernorm(emb), h], dim=-1)
        return z, (h if self.norm_before_residual else x)

    def finish(self, r0: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        r1 = r0 + attn
        return r1 + self.mlp(self.post_attention_layernorm(r1))


@dataclass
class DraftStep:
    """Outputs of one drafter forward over T slots."""

    logits: torch.Tensor  # [B, T, Vd]
    pre: torch.Tensor  # un-normalised residual [B, T, H]
    post: torch.Tensor  # norm(pre), what lm_head sees
    feedback: torch.Tensor  # tensor fed to the next depth: post if norm_output else pre


class DrafterBase(nn.Module):
    """What every drafter family shares with the loop and the capture: `config`, `layers[0].self_attn` (hook
    points, softmax scale), `lm_head`, the hook points `hook_layer_in` / `hook_pre` / `hook_post`, `d2t`, the
    KV cache, and `forward(ids, hidden, positions, cache, hidden_is_feature, mask) -> DraftStep`. EAGLE-3
    (below) and MTP heads (mtp.py) are the families."""

    config: DrafterConfig

    def _rope_dim(self) -> int:
        return self.config.rope_dim

    def _apply(self, fn, recurse=True):
        # RoPE frequencies stay fp32 whatever dtype the weights are cast to (as vLLM/HF compute them);
        # a bf16/fp16 inv_freq would put O(position * 2^-8) errors into every rotation angle.
        super()._apply(fn, recurse)
        cfg = self.config
        self.inv_freq = rope.inv_freq(self._rope_dim(), cfg.rope_theta, cfg.rope_scaling).to(self.inv_freq.device)
        return self

    @property
    def layer(self) -> nn.Module:
        return self.layers[0]

    def set_attn_impl(self, impl: str) -> None:
        if impl not in ("sdpa", "eager"):
            raise ValueError(f"attn_impl must be 'sdpa' or 'eager', got {impl!r}")
        for layer in self.layers:
            layer.self_attn.attn_impl = impl

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def target_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Softmax over the draft vocab scattered into target-vocab positions [..., V] (fp32)."""
        p = logits.float().softmax(-1)
        out = p.new_zeros(*p.shape[:-1], self.config.vocab_size)
        idx = self.draft_to_target(torch.arange(p.shape[-1], device=p.device)).expand_as(p)
        return out.scatter_add_(-1, idx, p)  # add: two draft ids may map to one target id

    def new_cache(self, batch: int = 1, capacity: int = 256) -> KVCache:
        p = self.lm_head.weight
        a = self.layer.self_attn
        # values padded to the key width (MLA): the lse-returning fused kernel needs equal head sizes
        return KVCache(batch, a.nkv, a.hd, p.device, p.dtype, capacity, v_dim=max(a.vd, a.hd))

    def new_ragged_cache(self, batch: int, capacity: int) -> RaggedKVCache:
        """A cache of `batch` independent sequences (model/ragged_cache.py): one forward steps them all."""
        p, a = self.lm_head.weight, self.layer.self_attn
        return RaggedKVCache(batch, a.nkv, a.hd, p.device, p.dtype, capacity, v_dim=max(a.vd, a.hd))

    def attend_cached(self, attn: nn.Module, z: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                      mask: torch.Tensor | None) -> torch.Tensor:
        """Project the layer input z [B,T,*] at `positions`, append its K/V to `cache` and attend: each slot sees
        every cached slot before it (and the window), or exactly the slots `mask` marks (trees)."""
        cos, sin = rope.cos_sin(positions, self.inv_freq, z.dtype, self.rope_scale)
        q, k, v = attn.project(z, cos, sin)
        if isinstance(cache, RaggedKVCache):
            if mask is not None:
                raise ValueError("a ragged cache builds its own mask (chains only)")
            kk, vv, mask = cache.append(k, v, self.config.sliding_window)
            return attn.attend(q, kk, vv, mask)
        start = cache.length
        kk, vv = cache.append(k, v)
        t = q.shape[2]
        window = self.config.sliding_window
        if mask is None and ((t > 1 and start > 0) or (window is not None and kk.shape[2] > window)):
            mask = visible(start, t, kk.shape[2], window, q.device)
        return attn.attend(q, kk, vv, mask, causal=mask is None and t > 1 and start == 0)


class Eagle3Drafter(DrafterBase):
    """One EAGLE-3 decoder layer over [embeddings ; fc(aux target features)]; keys as speculators/vLLM."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.config = cfg
        ht, a = cfg.target_hidden_size, cfg.num_aux
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        if cfg.norm_before_fc:
            self.input_norm = RMSNorm(a * ht, cfg.rms_norm_eps)
        if cfg.fc_norm:
            self.fc_norm = nn.ModuleList([RMSNorm(ht, cfg.rms_norm_eps) for _ in range(a)])
        self.fc = nn.Linear(a * ht, cfg.hidden_size, bias=False) if a else nn.Identity()
        self.layers = nn.ModuleList([Eagle3DecoderLayer(cfg)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.hook_aux_pre = nn.ModuleList([HookPoint() for _ in range(a)])
        self.hook_aux_post = nn.ModuleList([HookPoint() for _ in range(a)])
        self.hook_layer_in = HookPoint()  # input hidden x at this depth: fc(features) or fed-back tensor
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()
        self.register_buffer(
            "inv_freq", rope.inv_freq(cfg.rope_dim, cfg.rope_theta, cfg.rope_scaling), persistent=False
        )
        self.rope_scale = rope.mscale(cfg.rope_scaling, deepseek=cfg.mla is not None)  # YaRN's magnitude factor on cos/sin (1 otherwise)

    # -- pieces -------------------------------------------------------------------------------
    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """Aux target features [..., A*Ht] -> drafter hidden [..., H] (docs/eagle3.md §2); identity without aux features."""
        if not self.config.num_aux:
            return features
        ht = self.config.target_hidden_size
        chunks = list(features.split(ht, dim=-1))
        chunks = [hp(c) for hp, c in zip(self.hook_aux_pre, chunks)]
        if self.config.fc_norm:
            chunks = [n(c) for n, c in zip(self.fc_norm, chunks)]
        chunks = [hp(c) for hp, c in zip(self.hook_aux_post, chunks)]
        cat = torch.cat(chunks, dim=-1)
        if self.config.norm_before_fc:
            cat = self.input_norm(cat)
        return self.fc(cat)

    def head(self, pre: torch.Tensor, logits: bool = True) -> DraftStep:
        pre = self.hook_pre(pre)
        post = self.hook_post(self.norm(pre))
        logits = self.lm_head(post) if logits else None
        return DraftStep(logits, pre, post, post if self.config.norm_output else pre)

    # -- the real chain / teacher-forced chain -----------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        hidden_is_feature: bool,
        mask: torch.Tensor | None = None,
    ) -> DraftStep:
        """Run T new slots (ids [B,T], hidden [B,T,A*Ht] target features or [B,T,H] fed back) at
        positions [B,T], appending their K/V to `cache`; each slot attends every cached slot before it, or, with
        `mask` (bool [T, cache length after appending], True = may attend), exactly the slots it marks (trees)."""
        x = self.combine(hidden) if hidden_is_feature else hidden
        x = self.hook_layer_in(x)
        emb = self.embed_tokens(input_ids)
        z, r0 = self.layer.inputs(emb, x)
        out = self.attend_cached(self.layer.self_attn, z, positions, cache, mask)
        return self.head(self.layer.finish(r0, out))

    # -- training-time test (docs/eagle3.md §5) ---------------------------------------------------------
    def ttt_forward(
        self, input_ids: torch.Tensor, features: torch.Tensor, steps: int, logits: bool = True
    ) -> list[DraftStep]:
        """Unrolled parallel forward. input_ids [B,T] with slot t holding token t+1, features [B,T,A*Ht].
        Step k feeds step k-1's feedback tensor and ids shifted left by k at positions t+k; attention is
        causal over step-0 keys plus the same-slot (diagonal) keys of steps 1..k. Returns one DraftStep
        per step; slots whose shifted id runs past T are padded with id 0 (mask them in the loss).
        `logits=False` skips the lm_head (training applies it to the slots it scores only)."""
        b, t = input_ids.shape
        attn = self.layer.self_attn
        nh = attn.nh
        pos0 = torch.arange(t, device=input_ids.device).expand(b, t)
        window = self.config.sliding_window
        x = self.hook_layer_in(self.combine(features))
        outs: list[DraftStep] = []
        k0 = v0 = None
        diag_k: list[torch.Tensor] = []
        diag_v: list[torch.Tensor] = []
        for step in range(steps):
            ids = input_ids if step == 0 else F.pad(input_ids[:, step:], (0, step))
            z, r0 = self.layer.inputs(self.embed_tokens(ids), x)
            cos, sin = rope.cos_sin(pos0 + step, self.inv_freq, z.dtype, self.rope_scale)
            q, k, v = attn.project(z, cos, sin)
            if step == 0:
                k0, v0 = gqa_repeat(k, nh), gqa_repeat(v, nh)
            else:
                diag_k.append(gqa_repeat(k, nh))
                diag_v.append(gqa_repeat(v, nh))
            # one fused SDPA call over [step-0 keys | diagonal keys of steps 1..step] under a boolean mask: the same
            # softmax as scoring both parts by hand, in O(T) memory (6x faster at T = 4096 on CPU, with backward)
            causal = visible(0, t, t, None, input_ids.device)
            if window is not None:  # the chain's rule at position t + step: step-0 keys j <= t, j > t + step - W
                causal &= visible(step, t, t + step, window, input_ids.device)[:, :t]
            eye = torch.eye(t, dtype=torch.bool, device=input_ids.device)
            nothing = torch.zeros_like(eye)
            # diagonal key of step i sits at position t + i: hidden from step `step` when step - i >= W
            blocks = [eye if window is None or step - i < window else nothing for i in range(1, step + 1)]
            mask = torch.cat([causal, *blocks], dim=-1) if blocks else causal
            keys = torch.cat([k0, *diag_k], dim=2) if diag_k else k0
            vals = torch.cat([v0, *diag_v], dim=2) if diag_v else v0
            o = F.scaled_dot_product_attention(q.float(), keys.float(), vals.float(), attn_mask=mask, scale=attn.scale)
            o = attn.o_proj(rearrange(o.to(z.dtype), "b h t d -> b t (h d)"))
            out = self.head(self.layer.finish(r0, o), logits)
            outs.append(out)
            x = self.hook_layer_in(out.feedback)
        return outs
