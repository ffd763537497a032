"""An independent multi-head latent attention drafter layer (DeepSeek / Kimi K2.x EAGLE-3.1), plain torch.

Written from the MLA definition (DeepSeek-V2 paper + the vLLM/HF weight names), not from drifttool: every head
loops separately, RoPE is complex multiplication of interleaved pairs, the YaRN softmax factor comes from its
formula. Reuses reference_eagle3 for what MLA leaves unchanged (combine, norms, MLP, chain bookkeeping)."""

from __future__ import annotations

import math
from typing import Any

import torch

from tests.support.reference_eagle3 import RefConfig, RefOut, combine, inv_freq, rms_norm


def rope_pairs(x: torch.Tensor, positions: list[int], freqs: list[float], scale: float) -> torch.Tensor:
    """x [T, d] (d even): pair (2i, 2i+1) as the complex number x_2i + j x_2i+1, times scale * e^{j pos f_i}."""
    z = torch.complex(x[:, 0::2].double(), x[:, 1::2].double())
    ang = torch.tensor([[p * f for f in freqs] for p in positions], dtype=torch.float64)
    z = z * torch.polar(torch.full_like(ang, scale), ang)
    return torch.stack([z.real, z.imag], -1).flatten(-2).to(x.dtype)


def _m(scale: float, m: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def layer(w: dict[str, Any], c: RefConfig, ids: list[int], xs: torch.Tensor, positions: list[int]) -> RefOut:
    """c.extra: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim."""
    e = c.extra
    nope, rd, vd, kvr = e["qk_nope_head_dim"], e["qk_rope_head_dim"], e["v_head_dim"], e["kv_lora_rank"]
    t, nh = len(ids), c.heads
    emb = rms_norm(w["embed"][torch.tensor(ids)], w["in_ln"], c.eps)
    h = rms_norm(xs, w["hid_ln"], c.eps)
    z = torch.cat([emb, h], -1)
    q = rms_norm(z @ w["q_a"].T, w["q_a_ln"], c.eps) @ w["q_b"].T if e.get("q_lora_rank") else z @ w["q"].T
    q = q.view(t, nh, nope + rd)
    ckv = z @ w["kv_a"].T
    latent, k_rope = ckv[:, :kvr], ckv[:, kvr:]
    kv = (rms_norm(latent, w["kv_a_ln"], c.eps) @ w["kv_b"].T).view(t, nh, nope + vd)
    sc = c.rope_scaling or {}
    yarn = sc.get("rope_type", sc.get("type")) == "yarn"
    freqs = inv_freq(rd, c.theta, c.rope_scaling)
    cs = _m(sc["factor"], sc.get("mscale", 1.0)) / _m(sc["factor"], sc.get("mscale_all_dim", 0.0)) if yarn else 1.0
    k_rope = rope_pairs(k_rope, positions, freqs, cs)
    softmax = (nope + rd) ** -0.5 * (_m(sc["factor"], sc.get("mscale_all_dim", 0.0)) ** 2 if yarn else 1.0)
    pq, pk = torch.tensor(positions)[:, None], torch.tensor(positions)[None, :]
    allowed = pk <= pq
    outs, probs = [], []
    for hh in range(nh):
        qh = torch.cat([q[:, hh, :nope], rope_pairs(q[:, hh, nope:], positions, freqs, cs)], -1)
        kh = torch.cat([kv[:, hh, :nope], k_rope], -1)
        s = (qh.float() @ kh.float().T * softmax).masked_fill(~allowed, float("-inf"))
        p = s.softmax(-1)
        probs.append(p)
        outs.append(p @ kv[:, hh, nope:].float())
    attn = torch.cat(outs, -1).to(z.dtype) @ w["o"].T
    r1 = (h if c.norm_before_residual else xs) + attn
    m = rms_norm(r1, w["post_ln"], c.eps)
    pre = r1 + (torch.nn.functional.silu(m @ w["gate"].T) * (m @ w["up"].T)) @ w["down"].T
    post = rms_norm(pre, w["norm"], c.eps)
    return RefOut(post @ w["lm_head"].T, pre, post, post if c.norm_output else pre, torch.stack(probs))


def chain(w, c, ctx_ids: list[int], ctx_feats: torch.Tensor, fed_ids: list[int], depth: int) -> list[RefOut]:
    """reference_eagle3.chain with the MLA layer."""
    n = len(ctx_ids)
    ids, xs, pos = list(ctx_ids), [combine(w, c, ctx_feats)], list(range(n))
    outs = [layer(w, c, ids, torch.cat(xs), pos)]
    for k in range(2, depth + 1):
        ids.append(fed_ids[k - 2])
        xs.append(outs[-1].fed[-1:])
        pos.append(n - 1 + (k - 1))
        outs.append(layer(w, c, ids, torch.cat(xs), pos))
    return outs


def random_mla(c: RefConfig, g: torch.Generator) -> dict[str, torch.Tensor]:
    """MLA attention weights (replace q/k/v/o of reference_eagle3.random_weights)."""
    e, h2 = c.extra, 2 * c.hidden
    nope, rd, vd, kvr, qr = (e["qk_nope_head_dim"], e["qk_rope_head_dim"], e["v_head_dim"], e["kv_lora_rank"],
                             e.get("q_lora_rank"))

    def r(*shape):
        return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

    w = {"kv_a": r(kvr + rd, h2), "kv_a_ln": 1 + 0.2 * torch.randn(kvr, generator=g),
         "kv_b": r(c.heads * (nope + vd), kvr), "o": r(c.hidden, c.heads * vd)}
    if qr:
        w.update(q_a=r(qr, h2), q_a_ln=1 + 0.2 * torch.randn(qr, generator=g), q_b=r(c.heads * (nope + rd), qr) * 3)
    else:
        w["q"] = r(c.heads * (nope + rd), h2) * 3
    return w
