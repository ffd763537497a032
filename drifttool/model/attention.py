"""The drafter's attention: GQA with RoPE over a KV cache, the named hook points the capture taps, RMSNorm and
the sliding-window visibility rule (MLA, DeepSeek's latent attention, builds on it in mla.py).

The fused path (`fused_attention`) runs the SDPA kernel variant that also returns each query row's
log-sum-exp, so the capture gets region masses from a few keys without recomputing rows. The same kernel
runs whether or not anything is hooked, so drafting outputs do not depend on the capture."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn

from . import rope
from .config import DrafterConfig


def visible(start: int, t: int, length: int, window: int | None, device) -> torch.Tensor:
    """Bool [t, length]: query slot start+i may attend key slot j (slot = position): j <= start+i, and with a
    sliding window W also j > start+i-W (W keys including its own, as vLLM / HF / speculators count it)."""
    qi = torch.arange(t, device=device)[:, None] + start
    kj = torch.arange(length, device=device)[None, :]
    m = kj <= qi
    return m & (kj > qi - window) if window is not None else m


class HookPoint(nn.Identity):
    """Marks a tensor for hooks (TransformerLens style); a no-op otherwise."""


class RMSNorm(nn.Module):
    """Statistics in fp32, cast back, then the weight (docs/eagle3.md §3)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class KVCache:
    """Contiguous per-slot key/value cache; slots are sequence positions of the drafter's own inputs."""

    def __init__(self, batch: int, nkv: int, head_dim: int, device, dtype, capacity: int = 256,
                 v_dim: int | None = None):
        self.k = torch.zeros(batch, nkv, capacity, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros(batch, nkv, capacity, v_dim or head_dim, device=device, dtype=dtype)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = k.shape[2]
        need = self.length + n
        if need > self.k.shape[2]:
            cap = max(need, 2 * self.k.shape[2])
            grow = cap - self.k.shape[2]
            self.k = torch.cat([self.k, self.k.new_zeros(*self.k.shape[:2], grow, self.k.shape[3])], 2)
            self.v = torch.cat([self.v, self.v.new_zeros(*self.v.shape[:2], grow, self.v.shape[3])], 2)
        self.k[:, :, self.length : need] = k
        self.v[:, :, self.length : need, : v.shape[3]] = v  # MLA: values narrower than the cache stay 0-padded
        self.length = need
        return self.k[:, :, :need], self.v[:, :, :need]

    def truncate(self, length: int) -> None:
        if length > self.length:
            raise ValueError(f"cannot truncate cache of length {self.length} to {length}")
        self.length = length

    def keys(self) -> torch.Tensor:
        return self.k[:, :, : self.length]


class Eagle3Attention(nn.Module):
    """GQA + RoPE. EAGLE-3 reads the 2H-wide [embeddings ; hidden] input without biases over whole heads; MTP
    blocks (mtp.py) take the H-wide input, q/k/v biases and rotary on the first `rotary_dim` dims (GLM-4.5)."""

    def __init__(self, cfg: DrafterConfig, in_dim: int | None = None, bias: bool = False,
                 rotary_dim: int | None = None):
        super().__init__()
        h2 = in_dim or 2 * cfg.hidden_size
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.vd, self.scale = self.hd, self.hd**-0.5  # value head dim, softmax scale (MLA differs)
        self.rd = rotary_dim or self.hd
        self.q_proj = nn.Linear(h2, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(h2, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(h2, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head's q and k, before RoPE
            self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm
        self.hook_q = HookPoint()  # post-RoPE queries [B, nh, T, hd]
        self.hook_k = HookPoint()  # post-RoPE keys of the whole cache the queries attend [B, nkv, L, hd]
        self.hook_probs = HookPoint()  # eager path only: attention probabilities [B, nh, T, L]
        self.hook_lse = HookPoint()  # log-sum-exp of each query row's scaled scores [B, nh, T] (fp32) or None
        self.attn_impl = "sdpa"

    def project(self, z: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        q = rearrange(self.q_proj(z), "b t (h d) -> b t h d", d=self.hd)
        k = rearrange(self.k_proj(z), "b t (h d) -> b t h d", d=self.hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rearrange(q, "b t h d -> b h t d"), rearrange(k, "b t h d -> b h t d")
        v = rearrange(self.v_proj(z), "b t (h d) -> b h t d", d=self.hd)
        if self.rd < self.hd:  # partial rotary: the rest of each head passes unrotated
            rd = self.rd
            q = torch.cat([rope.apply(q[..., :rd], cos, sin), q[..., rd:]], -1)
            k = torch.cat([rope.apply(k[..., :rd], cos, sin), k[..., rd:]], -1)
            return q, k, v
        return rope.apply(q, cos, sin), rope.apply(k, cos, sin), v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               causal: bool = False, bias: torch.Tensor | None = None) -> torch.Tensor:
        """q [B,nh,T,hd], k/v [B,nkv,L,hd], mask bool [T,L] (True = may attend) or None (attend all);
        `causal` (T == L, an empty cache) lets SDPA mask implicitly instead of materialising T x L. `bias`: an
        additive float [1, nh, T, L] on the scaled scores (`drifttool patch`'s attention sites), or None."""
        q = self.hook_q(q)
        k = self.hook_k(k)
        if self.attn_impl == "eager":
            kk, vv = gqa_repeat(k, self.nh), gqa_repeat(v, self.nh)
            scores = (q.float() @ kk.float().transpose(-1, -2)) * self.scale
            if causal:
                mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            if bias is not None:
                scores = scores + bias.float()
            self.hook_lse(scores.logsumexp(-1))
            probs = self.hook_probs(scores.softmax(-1))
            out = (probs @ vv.float()).to(q.dtype)
        else:
            out, lse = fused_attention(q, k, v, mask, causal, self.scale, bias)
            self.hook_lse(lse)
        out = out[..., : self.vd]  # MLA: the cache pads values to the key width (see KVCache.append)
        return self.o_proj(rearrange(out, "b h t d -> b t (h d)"))


_NO_LSE: set[tuple] = set()  # (device type, dtype, masked) the lse kernels refused once: not retried


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                    scale: float, extra: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """SDPA output [B,nh,T,dv] and each row's log-sum-exp [B,nh,T] (fp32), or None where no lse kernel serves.

    CPU: aten's flash kernel for CPU (what F.scaled_dot_product_attention dispatches to for these shapes: GQA
    native, bool mask given as an additive mask of the query dtype; same head size for k and v). CUDA: the
    memory-efficient kernel, GQA by folding each kv group's query heads into rows (only where the rows can share
    one mask: T == 1 or a mask given). Anything else, or a kernel that refuses the shapes: plain SDPA, lse None.
    `extra`: an additive float bias [1, nh, T, L] on the scaled scores (per head: on CUDA the rows cannot be
    folded, so plain SDPA there, lse None)."""
    if extra is not None:
        return _with_bias(q, k, v, mask, causal, scale, extra)
    key = (q.device.type, q.dtype, mask is not None)
    gqa = k.shape[1] != q.shape[1]
    if key not in _NO_LSE and k.shape[-1] == v.shape[-1]:
        bias = None
        if mask is not None:
            bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
        try:
            if q.device.type == "cpu":
                out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, 0.0, causal, attn_mask=bias, scale=scale)
                return out, lse
            if q.device.type == "cuda" and not (causal and gqa):
                return _cuda_lse(q, k, v, bias, causal, scale)
        except (RuntimeError, NotImplementedError):
            _NO_LSE.add(key)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)
    return out, None


def _with_bias(q, k, v, mask, causal, scale, extra):
    """fused_attention under an additive per-head bias (the mask folded into it)."""
    bias = extra.to(q.dtype).expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    if q.device.type == "cpu" and k.shape[-1] == v.shape[-1]:
        try:
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=bias,
                                                                             scale=scale)
        except (RuntimeError, NotImplementedError):
            pass
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, enable_gqa=k.shape[1] != q.shape[1])
    return out, None


def _cuda_lse(q, k, v, bias, causal, scale):
    b, nh, t, d = q.shape
    nkv, rep = k.shape[1], q.shape[1] // k.shape[1]
    qq = q.reshape(b, nkv, rep * t, d)  # head h = g * rep + r: kv group g's query heads as rows
    if bias is not None:  # rows as the folded queries; the row stride padded to 16 as the kernel wants
        length = bias.shape[-1]
        lead = [1] * (bias.dim() - 2)  # [T, L] or a ragged cache's per-sequence [B, 1, T, L]
        bias = F.pad(bias.repeat(*lead, rep, 1), (0, -length % 16))[..., :length].expand(b, nkv, rep * t, length)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
        qq, k, v, bias, True, 0.0, causal, scale=scale)[:2]
    return out.reshape(b, nh, t, v.shape[-1]), lse[..., : rep * t].reshape(b, nh, t).float()


def gqa_repeat(x: torch.Tensor, nh: int) -> torch.Tensor:
    """[B, nkv, L, d] -> [B, nh, L, d]: query head h reads kv head h // (nh / nkv)."""
    return repeat(x, "b g l d -> b (g r) l d", r=nh // x.shape[1])
