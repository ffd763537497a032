"""Rotary embeddings as Llama/vLLM apply them: inverse frequencies from the draft config, rotate-half form."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..errors import DriftError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "yarn")


def yarn_mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def mscale(scaling: dict[str, Any] | None, deepseek: bool = False) -> float:
    """Magnitude factor on cos/sin under YaRN, as vLLM reads it: `attention_factor`, else mscale / mscale_all_dim
    when both are set, else 0.1 ln(factor) + 1; DeepSeek's YaRN (MLA drafters): m(mscale) / m(mscale_all_dim)
    with defaults 1 and 0. 1 for every other rope type."""
    if not scaling or scaling.get("rope_type", scaling.get("type")) != "yarn":
        return 1.0
    f = float(scaling["factor"])
    ms, ms_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if deepseek:
        return yarn_mscale(f, float(ms if ms is not None else 1.0)) / yarn_mscale(f, float(ms_all or 0.0))
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    if ms and ms_all:
        return yarn_mscale(f, float(ms)) / yarn_mscale(f, float(ms_all))
    return yarn_mscale(f)


def _yarn(base: torch.Tensor, head_dim: int, theta: float, scaling: dict[str, Any], where: str) -> torch.Tensor:
    """YaRN (Peng et al.): interpolate low frequencies by `factor`, keep high ones, ramp between the dims
    that rotate beta_fast / beta_slow times over original_max_position_embeddings (as vLLM computes it)."""
    if "original_max_position_embeddings" not in scaling or "factor" not in scaling:
        raise DriftError(f"{where}: yarn needs factor and original_max_position_embeddings")
    factor, old = float(scaling["factor"]), float(scaling["original_max_position_embeddings"])

    def dim_of(rotations: float) -> float:
        return head_dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = dim_of(float(scaling.get("beta_fast") or 32)), dim_of(float(scaling.get("beta_slow") or 1))
    if scaling.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, head_dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (original frequency), 0: interpolate (frequency / factor)
    return base / factor * (1 - keep) + base * keep


def inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None, where: str = "rope_scaling") -> torch.Tensor:
    """fp32 inverse frequencies; scaling follows the HF `rope_scaling` conventions."""
    base = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if not scaling:
        return base.float()
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return base.float()
    if kind == "linear":
        return (base / float(scaling["factor"])).float()
    if kind == "yarn":
        return _yarn(base, head_dim, theta, scaling, where).float()
    if kind == "dynamic":
        # Dynamic NTK only changes frequencies beyond the trained window; within it, it equals default.
        return base.float()
    if kind == "llama3":
        factor = float(scaling["factor"])
        lo = float(scaling.get("low_freq_factor", 1.0))
        hi = float(scaling.get("high_freq_factor", 4.0))
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / base
        low_wl, high_wl = old / lo, old / hi
        scaled = torch.where(wavelen > low_wl, base / factor, base)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        mid = (wavelen >= high_wl) & (wavelen <= low_wl)
        return torch.where(mid, smoothed, scaled).float()
    raise DriftError(f"{where}: unsupported rope type {kind!r}; expected one of {', '.join(SUPPORTED_ROPE_TYPES)}")


def cos_sin(positions: torch.Tensor, freqs: torch.Tensor, dtype: torch.dtype,
            scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [..., T] -> cos, sin [..., T, head_dim], computed in fp32 (times `scale`: YaRN's mscale), cast."""
    ang = positions.to(torch.float32)[..., None] * freqs.to(positions.device)
    emb = torch.cat((ang, ang), dim=-1)
    if scale != 1.0:
        return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, hd]; cos/sin [B, T, hd]."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def apply_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J style (DeepSeek MLA): pairs (2i, 2i+1) rotated by angle i. x [B, heads, T, d]; cos/sin [B, T, d]
    as cos_sin builds them (the angles repeated twice), so their first half holds one angle per pair."""
    half = x.shape[-1] // 2
    c, s = cos[:, None, :, :half], sin[:, None, :, :half]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2)
