"""An independent MTP head forward (DeepSeek-V3 / GLM-4.5 / MiMo), plain torch, written from the public modeling
equations and vLLM's proposer rules, not from drifttool: every slot is recomputed from scratch at every depth,
every head and every token's expert routing loop separately, RoPE is written out per family.

Rules (vLLM: deepseek_mtp.py, mimo_mtp.py, glm4_moe_mtp.py, v1/spec_decode/eagle.py):
- slot t holds token t+1, the target's last (post-final-norm) hidden state at t, position t; the embedding of a
  position-0 slot is zero;
- x = proj(cat[enorm(emb), hnorm(h)]) (MiMo: cat[hnorm(h), enorm(emb)]); pre = block(x);
- logits = head(norm(pre)); the next depth is fed pre (DeepSeek, GLM) or norm(pre) (MiMo);
- every depth runs MTP layer 0."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tests.support.reference_eagle3 import inv_freq
from tests.support.reference_mla import rope_pairs


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return w * (x32 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


def silu_mlp(x: torch.Tensor, w: dict[str, torch.Tensor], pre: str) -> torch.Tensor:
    g, u = x @ w[pre + "gate_proj.weight"].T, x @ w[pre + "up_proj.weight"].T
    return (g * torch.sigmoid(g) * u) @ w[pre + "down_proj.weight"].T


def moe(x: torch.Tensor, w: dict[str, torch.Tensor], c: dict[str, Any]) -> torch.Tensor:
    """Token by token: sigmoid scores, bias-corrected choice inside the best groups, plain-score weights."""
    e, groups, per = c["n_routed_experts"], c.get("n_group", 1), c["n_routed_experts"] // c.get("n_group", 1)
    out = []
    for row in x:
        s = torch.sigmoid(row @ w["mlp.gate.weight"].T)
        choice = s + w["mlp.gate.e_score_correction_bias"]
        gscore = [sorted(choice[g * per:(g + 1) * per].tolist(), reverse=True)[:2] for g in range(groups)]
        best = sorted(range(groups), key=lambda g: -sum(gscore[g]))[: c.get("topk_group", 1)]
        allowed = [i for i in range(e) if i // per in best]
        top = sorted(allowed, key=lambda i: -float(choice[i]))[: c["num_experts_per_tok"]]
        ws = torch.stack([s[i] for i in top])
        if c.get("norm_topk_prob", True):
            ws = ws / ws.sum()
        ws = ws * c.get("routed_scaling_factor", 1.0)
        y = sum(ws[j] * silu_mlp(row, w, f"mlp.experts.{i}.") for j, i in enumerate(top))
        if c.get("n_shared_experts"):
            y = y + silu_mlp(row, w, "mlp.shared_experts.")
        out.append(y)
    return torch.stack(out)


def _m(scale: float, m: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope_half(x: torch.Tensor, positions: list[int], freqs: list[float]) -> torch.Tensor:
    """Rotate-half (NeoX) RoPE: dims i and i + d/2 are a pair rotated by angle pos * f_i. x [T, d]."""
    d = x.shape[-1] // 2
    out = x.clone()
    for t, p in enumerate(positions):
        for i, f in enumerate(freqs):
            c, s = math.cos(p * f), math.sin(p * f)
            a, b = x[t, i].item(), x[t, i + d].item()
            out[t, i], out[t, i + d] = a * c - b * s, b * c + a * s
    return out


def attention(x: torch.Tensor, w: dict[str, torch.Tensor], c: dict[str, Any], positions: list[int]) -> torch.Tensor:
    """Causal attention over the slots (positions increasing), per head, fp32."""
    t, nh = x.shape[0], c["num_attention_heads"]
    allowed = torch.tensor(positions)[None, :] <= torch.tensor(positions)[:, None]
    heads = []
    if c["model_type"] == "deepseek_v3":
        nope, rd, vd, kvr = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        sc = c.get("rope_scaling")
        yarn = bool(sc) and sc.get("type", sc.get("rope_type")) == "yarn"
        freqs = list(inv_freq(rd, c["rope_theta"], sc))
        cs = _m(sc["factor"], sc.get("mscale", 1.0)) / _m(sc["factor"], sc.get("mscale_all_dim", 0.0)) if yarn else 1.0
        scale = (nope + rd) ** -0.5 * (_m(sc["factor"], sc.get("mscale_all_dim", 0.0)) ** 2 if yarn else 1.0)
        q = rms(x @ w["self_attn.q_a_proj.weight"].T, w["self_attn.q_a_layernorm.weight"], c["rms_norm_eps"])
        q = (q @ w["self_attn.q_b_proj.weight"].T).view(t, nh, nope + rd)
        ckv = x @ w["self_attn.kv_a_proj_with_mqa.weight"].T
        kv = rms(ckv[:, :kvr], w["self_attn.kv_a_layernorm.weight"], c["rms_norm_eps"])
        kv = (kv @ w["self_attn.kv_b_proj.weight"].T).view(t, nh, nope + vd)
        k_rope = rope_pairs(ckv[:, kvr:], positions, freqs, cs)
        for h in range(nh):
            qh = torch.cat([q[:, h, :nope], rope_pairs(q[:, h, nope:], positions, freqs, cs)], -1)
            kh = torch.cat([kv[:, h, :nope], k_rope], -1)
            p = (qh @ kh.T * scale).masked_fill(~allowed, float("-inf")).softmax(-1)
            heads.append(p @ kv[:, h, nope:])
    else:
        nkv = c["num_key_value_heads"]
        hd = c.get("head_dim", c["hidden_size"] // nh)
        rd = int(hd * c.get("partial_rotary_factor", 1.0))
        freqs = list(inv_freq(rd, c["rope_theta"], None))
        q = (x @ w["self_attn.q_proj.weight"].T + w["self_attn.q_proj.bias"]).view(t, nh, hd)
        k = (x @ w["self_attn.k_proj.weight"].T + w["self_attn.k_proj.bias"]).view(t, nkv, hd)
        v = (x @ w["self_attn.v_proj.weight"].T + w["self_attn.v_proj.bias"]).view(t, nkv, hd)
        for h in range(nh):
            g = h // (nh // nkv)
            qh, kh = q[:, h], k[:, g]
            if c.get("use_qk_norm"):
                qh = rms(qh, w["self_attn.q_norm.weight"], c["rms_norm_eps"])
                kh = rms(kh, w["self_attn.k_norm.weight"], c["rms_norm_eps"])
            qh = torch.cat([rope_half(qh[:, :rd], positions, freqs), qh[:, rd:]], -1)
            kh = torch.cat([rope_half(kh[:, :rd], positions, freqs), kh[:, rd:]], -1)
            p = (qh @ kh.T * hd**-0.5).masked_fill(~allowed, float("-inf")).softmax(-1)
            heads.append(p @ v[:, g])
    return torch.cat(heads, -1) @ w["self_attn.o_proj.weight"].T


@dataclass
class Step:
    logits: torch.Tensor  # [V]
    pre: torch.Tensor  # [H] block output
    post: torch.Tensor  # [H] normed
    fed: torch.Tensor  # [H] what the next depth is fed


def _names(c: dict[str, Any]) -> dict[str, str]:
    if c["model_type"] == "mimo":
        return {"e": "token_layernorm.weight", "h": "hidden_layernorm.weight", "proj": "input_proj.weight",
                "norm": "final_layernorm.weight"}
    return {"e": "enorm.weight", "h": "hnorm.weight", "proj": "eh_proj.weight", "norm": "shared_head.norm.weight"}


def forward(w: dict[str, torch.Tensor], c: dict[str, Any], ids: list[int], hidden: torch.Tensor,
            positions: list[int], moe_block: bool, feed_post: bool | None = None) -> list[Step]:
    """All slots at once (slot i: token ids[i], hidden[i], positions[i]); returns every slot's Step."""
    n, eps = _names(c), c["rms_norm_eps"]
    mimo = c["model_type"] == "mimo"
    embed = w.get("embed_tokens.weight", w["target.embed"])
    head = w.get("shared_head.head.weight", w["target.lm_head"])
    emb = torch.stack([torch.zeros(embed.shape[1]) if p == 0 else embed[i] for i, p in zip(ids, positions)])
    e, h = rms(emb, w[n["e"]], eps), rms(hidden, w[n["h"]], eps)
    x = torch.cat([h, e] if mimo else [e, h], -1) @ w[n["proj"]].T
    r1 = x + attention(rms(x, w["input_layernorm.weight"], eps), w, c, positions)
    y = rms(r1, w["post_attention_layernorm.weight"], eps)
    pre = r1 + (moe(y, w, c) if moe_block else silu_mlp(y, w, "mlp."))
    post = rms(pre, w[n["norm"]], eps)
    post_fed = mimo if feed_post is None else feed_post
    return [Step(post[i] @ head.T, pre[i], post[i], post[i] if post_fed else pre[i]) for i in range(len(ids))]


def chain(w: dict[str, torch.Tensor], c: dict[str, Any], seq: list[int], target_hidden: torch.Tensor,
          tokens: list[int], moe_block: bool, feed_post: bool | None = None) -> list[Step]:
    """vLLM's chain from a context seq[0..n] (n = len(seq) - 1) with the target's hidden states at 0..n-1:
    depth 1 is slot n-1; depth k+1 is fed tokens[k-1] (the depth-k draft) and depth k's fed-back tensor, at
    position n-1+k. Recomputed from scratch per depth. Returns the Step of each depth 1..len(tokens)+1."""
    n = len(seq) - 1
    ids, hid, pos = list(seq[1:]), [target_hidden[i] for i in range(n)], list(range(n))
    out = []
    for k in range(len(tokens) + 1):
        step = forward(w, c, ids, torch.stack(hid), pos, moe_block, feed_post)[-1]
        out.append(step)
        if k < len(tokens):
            ids.append(tokens[k])
            hid.append(step.fed)
            pos.append(n + k)
    return out
