"""Tiny random target checkpoints that carry MTP layers, shrunk from the public configs (no hub access):
DeepSeek-V3 (MLA; a dense and a small-MoE MTP block, one with DeepSeek YaRN), GLM-4.5 (GQA with biases, partial
rotary, QK-norm, MoE) and MiMo-7B (a Qwen2 block, `model.mtp_layers.*`). The target layers come from transformers
(random init, saved by save_pretrained), the MTP tensors are written under their public names next to them in
the same model.safetensors, as the public checkpoints store them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

VOCAB, H = 96, 64

# DeepSeek-V3 config.json (deepseek-ai/DeepSeek-V3), shrunk: hidden 7168 -> 64, 128 heads -> 4, ranks and dims,
# 256 experts -> 8 in 4 groups (top-2 of 8, best 2 groups), 61 layers -> 2 (+ 1 MTP layer).
DEEPSEEK = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": VOCAB,
            "hidden_size": H, "intermediate_size": 112, "moe_intermediate_size": 24, "num_hidden_layers": 2,
            "num_nextn_predict_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
            "n_shared_experts": 1, "n_routed_experts": 8, "routed_scaling_factor": 2.5, "kv_lora_rank": 16,
            "q_lora_rank": 24, "qk_rope_head_dim": 8, "v_head_dim": 12, "qk_nope_head_dim": 12,
            "topk_method": "noaux_tc", "n_group": 4, "topk_group": 2, "num_experts_per_tok": 2, "moe_layer_freq": 1,
            "first_k_dense_replace": 1, "norm_topk_prob": True, "scoring_func": "sigmoid", "hidden_act": "silu",
            "max_position_embeddings": 512, "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True,
            "rope_theta": 10000, "rope_scaling": None, "attention_bias": False, "tie_word_embeddings": False,
            "torch_dtype": "float32", "bos_token_id": 0, "eos_token_id": 1}
# DeepSeek-V3 with every layer dense (first_k_dense_replace past the MTP layer's index): a dense MTP block
DEEPSEEK_DENSE = dict(DEEPSEEK, first_k_dense_replace=3)
# DeepSeek-V3's YaRN block, shrunk (factor 40 over 4096 -> factor 4 over 128)
DEEPSEEK_YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 1.0, "mscale_all_dim": 1.0,
                 "original_max_position_embeddings": 128, "type": "yarn"}
# GLM-4.5 config.json (zai-org/GLM-4.5), shrunk: hidden 5120 -> 64, 96/8 heads -> 4/2 of head_dim 16, 160
# experts -> 8, 92 layers -> 2 (+ 1 MTP layer); partial_rotary_factor, attention_bias and qk-norm as published
# (GLM-4.5 sets use_qk_norm true).
GLM = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "vocab_size": VOCAB, "hidden_size": H,
       "intermediate_size": 112, "moe_intermediate_size": 24, "num_hidden_layers": 2, "num_nextn_predict_layers": 1,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5,
       "attention_bias": True, "use_qk_norm": True, "n_shared_experts": 1, "n_routed_experts": 8,
       "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "norm_topk_prob": True,
       "routed_scaling_factor": 2.5, "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
       "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float32",
       "bos_token_id": 0, "eos_token_id": 1}
# MiMo-7B-RL config.json (XiaomiMiMo/MiMo-7B-RL), shrunk: hidden 4096 -> 64, 32/8 heads -> 4/2, 36 layers -> 2.
MIMO = {"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "vocab_size": VOCAB, "hidden_size": H,
        "intermediate_size": 112, "num_hidden_layers": 2, "num_nextn_predict_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
        "rope_theta": 640000, "tie_word_embeddings": False, "torch_dtype": "float32", "attention_dropout": 0.0,
        "bos_token_id": 0, "eos_token_id": 1}


def _w(gen: torch.Generator, *shape: int) -> torch.Tensor:
    fan_in = shape[-1] if len(shape) > 1 else 1
    return torch.randn(*shape, generator=gen) * (fan_in**-0.5 if len(shape) > 1 else 0.1)


def _norm(gen: torch.Generator, n: int) -> torch.Tensor:
    return 1.0 + 0.1 * torch.randn(n, generator=gen)


def _mlp(gen, inter: int) -> dict[str, torch.Tensor]:
    return {"gate_proj.weight": _w(gen, inter, H), "up_proj.weight": _w(gen, inter, H),
            "down_proj.weight": _w(gen, H, inter)}


def mtp_tensors(conf: dict[str, Any], gen: torch.Generator, moe: bool, own_embed: bool = True,
                own_head: bool = True) -> dict[str, torch.Tensor]:
    """One MTP layer's tensors, prefix-free, under the family's public names (`own_embed` / `own_head`: the
    layer's own embed_tokens / shared_head.head, else the target's are read)."""
    t: dict[str, torch.Tensor] = {"input_layernorm.weight": _norm(gen, H),
                                  "post_attention_layernorm.weight": _norm(gen, H)}
    mimo = conf["model_type"] == "mimo"
    t.update({("token_layernorm.weight" if mimo else "enorm.weight"): _norm(gen, H),
              ("hidden_layernorm.weight" if mimo else "hnorm.weight"): _norm(gen, H),
              ("input_proj.weight" if mimo else "eh_proj.weight"): _w(gen, H, 2 * H),
              ("final_layernorm.weight" if mimo else "shared_head.norm.weight"): _norm(gen, H)})
    if not mimo:
        head = _w(gen, VOCAB, H) * 4
        if own_head:
            t["shared_head.head.weight"] = head
        if own_embed:
            t["embed_tokens.weight"] = torch.randn(VOCAB, H, generator=gen)
    nh = conf["num_attention_heads"]
    if conf["model_type"] == "deepseek_v3":
        nope, rd, vd = conf["qk_nope_head_dim"], conf["qk_rope_head_dim"], conf["v_head_dim"]
        qr, kvr = conf["q_lora_rank"], conf["kv_lora_rank"]
        a = {"q_a_proj.weight": _w(gen, qr, H), "q_a_layernorm.weight": _norm(gen, qr),
             "q_b_proj.weight": _w(gen, nh * (nope + rd), qr), "kv_a_proj_with_mqa.weight": _w(gen, kvr + rd, H),
             "kv_a_layernorm.weight": _norm(gen, kvr), "kv_b_proj.weight": _w(gen, nh * (nope + vd), kvr),
             "o_proj.weight": _w(gen, H, nh * vd)}
    else:
        hd = conf.get("head_dim", H // nh)
        nkv = conf["num_key_value_heads"]
        a = {"q_proj.weight": _w(gen, nh * hd, H), "q_proj.bias": 0.1 * torch.randn(nh * hd, generator=gen),
             "k_proj.weight": _w(gen, nkv * hd, H), "k_proj.bias": 0.1 * torch.randn(nkv * hd, generator=gen),
             "v_proj.weight": _w(gen, nkv * hd, H), "v_proj.bias": 0.1 * torch.randn(nkv * hd, generator=gen),
             "o_proj.weight": _w(gen, H, nh * hd)}
        if conf.get("use_qk_norm"):
            a.update({"q_norm.weight": _norm(gen, hd), "k_norm.weight": _norm(gen, hd)})
    t.update({"self_attn." + k: v for k, v in a.items()})
    if moe:
        e, im = conf["n_routed_experts"], conf["moe_intermediate_size"]
        t["mlp.gate.weight"] = _w(gen, e, H) * 4
        t["mlp.gate.e_score_correction_bias"] = 0.05 * torch.randn(e, generator=gen)
        for i in range(e):
            t.update({f"mlp.experts.{i}.{k}": v for k, v in _mlp(gen, im).items()})
        t.update({f"mlp.shared_experts.{k}": v for k, v in _mlp(gen, im * conf["n_shared_experts"]).items()})
    else:
        t.update({f"mlp.{k}": v for k, v in _mlp(gen, conf["intermediate_size"]).items()})
    return t


def hf_model(conf: dict[str, Any], seed: int = 0):
    """The target part as transformers builds it (MiMo's target is a Qwen2 model: MiMo = Qwen2 + MTP layers)."""
    import transformers

    torch.manual_seed(seed)
    c = {k: v for k, v in conf.items() if k not in ("architectures", "model_type", "num_nextn_predict_layers")}
    kind = {"deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
            "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
            "mimo": ("Qwen2Config", "Qwen2ForCausalLM")}[conf["model_type"]]
    cfg = getattr(transformers, kind[0])(**c)
    model = getattr(transformers, kind[1])(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # a sharper target: greedy decoding far from ties
    return model


def write_target(out: Path, conf: dict[str, Any], moe: bool | None = None, seed: int = 0, mtp_layers: int = 1,
                 own_embed: bool = True, own_head: bool = True) -> Path:
    """A target folder: transformers' target weights plus `mtp_layers` MTP layers, one model.safetensors, and
    the public-style config.json. `moe`: the MTP blocks' MLP (default: per layer, what the config's dense/MoE rule
    says for decoder layer num_hidden_layers + i)."""
    conf = dict(conf, num_nextn_predict_layers=mtp_layers)
    model = hf_model(conf, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    sd = load_file(str(out / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed + 1)
    n = conf["num_hidden_layers"]
    for i in range(mtp_layers):
        pre = f"model.mtp_layers.{i}." if conf["model_type"] == "mimo" else f"model.layers.{n + i}."
        is_moe = moe if moe is not None else (conf.get("n_routed_experts") is not None
                                              and n + i >= conf.get("first_k_dense_replace", 0))
        sd.update({pre + k: v.contiguous() for k, v in mtp_tensors(conf, gen, is_moe, own_embed, own_head).items()})
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    return out


def layer_tensors(folder: Path, conf: dict[str, Any], i: int = 0) -> dict[str, torch.Tensor]:
    """MTP layer i's tensors, prefix-free (what the reference reads), plus `target.embed` / `target.lm_head`."""
    sd = load_file(str(folder / "model.safetensors"))
    pre = f"model.mtp_layers.{i}." if conf["model_type"] == "mimo" else f"model.layers.{conf['num_hidden_layers'] + i}."
    w = {k[len(pre):]: v for k, v in sd.items() if k.startswith(pre)}
    w["target.embed"], w["target.lm_head"] = sd["model.embed_tokens.weight"], sd["lm_head.weight"]
    return w


# At the head sizes vLLM's CPU attention takes (tests/run/test_vllm_engine.py): DeepSeek-V3's MLA at the only
# latent size vLLM's CPU_MLA kernel runs (kv_lora_rank 512 + rope 64 = 576, the public model's; the other MLA dims
# stay small); GLM-4.5: head_dim 32 (still 4/2 heads, partial rotary 16); MiMo: 2 query heads / 1 KV head of
# 64 / 2 = 32 (CPU attention needs head_dim >= 32).
VLLM_CPU = {
    "deepseek_v3": dict(DEEPSEEK, qk_nope_head_dim=32, qk_rope_head_dim=64, v_head_dim=32, kv_lora_rank=512,
                        q_lora_rank=32),
    "glm4_moe": dict(GLM, head_dim=32),
    "mimo": dict(MIMO, num_attention_heads=2, num_key_value_heads=1),
}

# MiMo-7B's configuration_mimo.py (XiaomiMiMo/MiMo-7B-RL; `auto_map` in its config.json): transformers has no
# `mimo` model type, so the public checkpoint ships this config class and loaders need trust_remote_code.
MIMO_CONFIG_PY = '''from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


class MiMoConfig(Qwen2Config):
    model_type = "mimo"

    def __init__(self, *args, num_nextn_predict_layers=0, **kwargs):
        self.num_nextn_predict_layers = num_nextn_predict_layers
        super().__init__(*args, **kwargs)
'''


def add_mimo_remote_config(folder: Path) -> Path:
    """Give a MiMo fixture folder the public checkpoint's config class (`auto_map` + configuration_mimo.py)."""
    conf = json.loads((folder / "config.json").read_text())
    conf["auto_map"] = {"AutoConfig": "configuration_mimo.MiMoConfig"}
    (folder / "config.json").write_text(json.dumps(conf, indent=2))
    (folder / "configuration_mimo.py").write_text(MIMO_CONFIG_PY)
    return folder
