"""An independent EAGLE-3 / EAGLE-3.1 reference forward, written from docs/eagle3.md §2-§5 in plain torch.

No drifttool imports, no KV cache: every depth recomputes the whole sequence of drafter slots with eager
attention. Weights live in a plain dict with this module's own names (see `WEIGHT_NAMES`); the parity
tests write them to disk under each real checkpoint layout's key names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

# name here -> meaning
WEIGHT_NAMES = (
    "embed",  # [V, H] token embeddings (target's when the layout has none)
    "fc",  # [H, A*Ht]
    "input_norm",  # [A*Ht] (norm_before_fc only)
    "fc_norm",  # list of A tensors [Ht] (fc_norm only)
    "in_ln", "hid_ln", "post_ln", "norm",  # RMSNorm weights [H]
    "q", "k", "v", "o",  # attention projections
    "gate", "up", "down",  # SwiGLU
    "lm_head",  # [Vd, H]
    "d2t",  # [Vd] int64 offsets
)


@dataclass
class RefConfig:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    target_hidden: int
    num_aux: int = 3
    eps: float = 1e-6
    theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_output: bool = False
    norm_before_residual: bool = False
    sliding_window: int | None = None  # key position p visible from query position q iff q - W < p <= q
    qk_norm: bool = False  # Qwen3: RMSNorm (weights "q_norm" / "k_norm" [head_dim]) on each head before RoPE
    extra: dict[str, Any] = field(default_factory=dict)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Statistics in fp32, cast back to x's dtype, then times the weight."""
    xf = x.to(torch.float32)
    y = xf / torch.sqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> list[float]:
    """Per-pair inverse frequencies as python floats, following the HF rope_type conventions."""
    out = []
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    for i in range(head_dim // 2):
        f = 1.0 / theta ** (2 * i / head_dim)
        if kind == "linear":
            f = f / scaling["factor"]
        elif kind == "llama3":
            factor = scaling["factor"]
            lo, hi = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
            old = scaling["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            if wavelen < old / hi:  # high frequency: unchanged
                pass
            elif wavelen > old / lo:  # low frequency: divided by factor
                f = f / factor
            else:  # in between: interpolate
                s = (old / wavelen - lo) / (hi - lo)
                f = (1 - s) * f / factor + s * f
        elif kind == "yarn":  # YaRN paper: blend f/factor (low freq) and f (high freq) over a linear ramp in i
            old, factor = scaling["original_max_position_embeddings"], scaling["factor"]

            def boundary(rotations, old=old):  # the pair index turning `rotations` times over the original window
                return head_dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

            lo = max(math.floor(boundary(scaling.get("beta_fast", 32))), 0)
            hi = min(math.ceil(boundary(scaling.get("beta_slow", 1))), head_dim - 1)
            r = min(max((i - lo) / ((hi - lo) or 0.001), 0.0), 1.0)
            f = r * f / factor + (1 - r) * f
        elif kind not in ("default",):
            raise ValueError(kind)
        out.append(f)
    return out


def apply_rope(x: torch.Tensor, positions: list[int], freqs: list[float], scale: float = 1.0) -> torch.Tensor:
    """x [T, n, hd]; rotate-half convention: pair (i, i + hd/2) rotated by angle pos * freq_i, times `scale`
    (YaRN's magnitude factor 0.1 ln(factor) + 1)."""
    half = x.shape[-1] // 2
    ang = torch.tensor([[p * f for f in freqs] for p in positions], dtype=torch.float64)  # [T, hd/2]
    cos = (ang.cos() * scale).to(torch.float32)[:, None, :]
    sin = (ang.sin() * scale).to(torch.float32)[:, None, :]
    a, b = x[..., :half].float(), x[..., half:].float()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(x.dtype)


def combine(w: dict[str, Any], c: RefConfig, feats: torch.Tensor) -> torch.Tensor:
    """docs/eagle3.md §2: aux target features [T, A*Ht] -> drafter hidden [T, H]."""
    if c.fc_norm:
        parts = [rms_norm(feats[:, i * c.target_hidden : (i + 1) * c.target_hidden], w["fc_norm"][i], c.eps)
                 for i in range(c.num_aux)]
        feats = torch.cat(parts, dim=-1)
    if c.norm_before_fc:
        feats = rms_norm(feats, w["input_norm"], c.eps)
    return feats @ w["fc"].T


@dataclass
class RefOut:
    logits: torch.Tensor  # [T, Vd]
    pre: torch.Tensor  # [T, H]
    post: torch.Tensor
    fed: torch.Tensor  # what the next depth receives
    probs: torch.Tensor  # [nh, T, T] attention probabilities


def layer(w: dict[str, Any], c: RefConfig, ids: list[int], xs: torch.Tensor, positions: list[int],
          allowed: torch.Tensor | None = None) -> RefOut:
    """docs/eagle3.md §3 over every slot at once. `allowed` [T, T] bool (query, key); default: by position, causal
    and inside the sliding window if any."""
    t = len(ids)
    e = rms_norm(w["embed"][torch.tensor(ids)], w["in_ln"], c.eps)
    h = rms_norm(xs, w["hid_ln"], c.eps)
    z = torch.cat([e, h], dim=-1)  # embeddings first
    q = (z @ w["q"].T).view(t, c.heads, c.head_dim)
    k = (z @ w["k"].T).view(t, c.kv_heads, c.head_dim)
    v = (z @ w["v"].T).view(t, c.kv_heads, c.head_dim)
    if c.qk_norm:
        q, k = rms_norm(q, w["q_norm"], c.eps), rms_norm(k, w["k_norm"], c.eps)
    freqs = inv_freq(c.head_dim, c.theta, c.rope_scaling)
    sc = c.rope_scaling or {}
    m = 0.1 * math.log(sc["factor"]) + 1.0 if sc.get("rope_type") == "yarn" and sc["factor"] > 1 else 1.0
    q, k = apply_rope(q, positions, freqs, m), apply_rope(k, positions, freqs, m)
    if allowed is None:
        pq, pk = torch.tensor(positions)[:, None], torch.tensor(positions)[None, :]
        allowed = pk <= pq
        if c.sliding_window is not None:
            allowed &= pk > pq - c.sliding_window
    group = c.heads // c.kv_heads
    heads_out, all_probs = [], []
    for hh in range(c.heads):
        kv = hh // group  # GQA: consecutive query heads share a kv head
        s = (q[:, hh].float() @ k[:, kv].float().T) / math.sqrt(c.head_dim)
        s = s.masked_fill(~allowed, float("-inf"))
        p = s.softmax(dim=-1)
        all_probs.append(p)
        heads_out.append(p @ v[:, kv].float())
    attn = torch.cat(heads_out, dim=-1).to(z.dtype) @ w["o"].T
    r0 = h if c.norm_before_residual else xs
    r1 = r0 + attn
    m = rms_norm(r1, w["post_ln"], c.eps)
    mlp = (torch.nn.functional.silu(m @ w["gate"].T) * (m @ w["up"].T)) @ w["down"].T
    pre = r1 + mlp
    post = rms_norm(pre, w["norm"], c.eps)
    logits = post @ w["lm_head"].T
    return RefOut(logits, pre, post, post if c.norm_output else pre, torch.stack(all_probs))


def draft_to_target(w: dict[str, Any], draft_ids: torch.Tensor) -> torch.Tensor:
    return draft_ids + w["d2t"][draft_ids]


def chain(w: dict[str, Any], c: RefConfig, ctx_ids: list[int], ctx_feats: torch.Tensor, fed_ids: list[int],
          depth: int) -> list[RefOut]:
    """docs/eagle3.md §4 chain, recomputed from scratch at every depth.

    ctx_ids[t] is the token paired with target feature t (token t+1 of the sequence) at position t;
    depth k >= 2 appends a slot holding fed_ids[k-2] with the previous depth's fed-back tensor at
    position n-1+(k-1). Returns the full-sequence output at each depth 1..depth."""
    n = len(ctx_ids)
    ids = list(ctx_ids)
    xs = [combine(w, c, ctx_feats)]
    pos = list(range(n))
    outs = [layer(w, c, ids, torch.cat(xs), pos)]
    for k in range(2, depth + 1):
        ids.append(fed_ids[k - 2])
        xs.append(outs[-1].fed[-1:])
        pos.append(n - 1 + (k - 1))
        outs.append(layer(w, c, ids, torch.cat(xs), pos))
    return outs


def random_weights(c: RefConfig, vocab: int, draft_vocab: int, inter: int, seed: int,
                   embed: torch.Tensor | None = None, scale: float = 0.3) -> dict[str, Any]:
    """Random weights whose norms are not all ones (so a mis-wired norm shows)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=scale):
        return torch.randn(*shape, generator=g) * s

    def nw(n):
        return 1.0 + r(n, s=0.2)

    h, ht, a = c.hidden, c.target_hidden, c.num_aux
    qd, kvd = c.heads * c.head_dim, c.kv_heads * c.head_dim
    w: dict[str, Any] = {
        "embed": embed.detach().clone().float() if embed is not None else r(vocab, h, s=1.0),
        "fc": r(h, a * ht, s=1.0 / math.sqrt(a * ht)),
        "in_ln": nw(h), "hid_ln": nw(h), "post_ln": nw(h), "norm": nw(h),
        "q": r(qd, 2 * h, s=1.0 / math.sqrt(h)), "k": r(kvd, 2 * h, s=1.0 / math.sqrt(h)),
        "v": r(kvd, 2 * h, s=1.0 / math.sqrt(h)), "o": r(h, qd, s=1.0 / math.sqrt(qd)),
        "gate": r(inter, h, s=1.0 / math.sqrt(h)), "up": r(inter, h, s=1.0 / math.sqrt(h)),
        "down": r(h, inter, s=1.0 / math.sqrt(inter)),
        "lm_head": r(draft_vocab, h, s=1.0 / math.sqrt(h)),  # O(1) logits: 1e-5 is then tight
    }
    if c.norm_before_fc:
        w["input_norm"] = nw(a * ht)
    if c.qk_norm:
        w["q_norm"], w["k_norm"] = nw(c.head_dim), nw(c.head_dim)
    if c.fc_norm:
        w["fc_norm"] = [nw(ht) for _ in range(a)]
    if draft_vocab < vocab:
        keep = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
        w["d2t"] = keep - torch.arange(draft_vocab)
    else:
        w["d2t"] = torch.zeros(draft_vocab, dtype=torch.long)
    return w
