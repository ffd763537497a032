"""Rotary embeddings as Llama/vLLM apply them: inverse frequencies from the draft config, rotate-half form."""

from __future__ import annotations

import math
from typing import Any

import torch

from .errors import DriftError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "dynamic")


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


def cos_sin(positions: torch.Tensor, freqs: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [..., T] -> cos, sin [..., T, head_dim], computed in fp32 then cast."""
    ang = positions.to(torch.float32)[..., None] * freqs.to(positions.device)
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, hd]; cos/sin [B, T, hd]."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]
