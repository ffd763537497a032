"""A drafter with the shape of the public Llama-3.1-8B EAGLE-3 head, random weights, loaded through
`load_drafter` like any checkpoint: hidden 4096, 32 query / 8 kv heads x 128, vocab 128256 -> draft 32000,
fc 12288 -> 4096, intermediate 14336, llama3 rope scaling (speculators layout).

The checkpoint (bf16, 1.9 GB) is written once into a cache folder (default: the system temp dir) and reused;
`fill_cache` puts random keys/values into the KV cache instead of running a 64k-token prefill (attention cost
depends on the shapes only; the masses of random keys are nearly uniform and mean nothing here)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

H, NH, NKV, HD, V, VD, INTER, AUX = 4096, 32, 8, 128, 128256, 32000, 14336, (2, 16, 29)
ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def config() -> dict:
    layer = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": H,
        "num_attention_heads": NH,
        "num_key_value_heads": NKV,
        "head_dim": HD,
        "intermediate_size": INTER,
        "vocab_size": V,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072,
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "tie_word_embeddings": False,
        "rope_theta": 500000.0,
        "rope_scaling": ROPE,
    }
    return {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": layer,
        "draft_vocab_size": VD,
        "target_hidden_size": H,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": list(AUX),
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 8}],
            "verifier": {"name_or_path": "llama-3.1-8b-shape", "architectures": ["LlamaForCausalLM"]},
        },
    }


def shapes() -> dict[str, tuple[int, ...]]:
    p = "layers.0."
    return {
        "embed_tokens.weight": (V, H),
        "fc.weight": (H, 3 * H),
        "norm.weight": (H,),
        "lm_head.weight": (VD, H),
        p + "input_layernorm.weight": (H,),
        p + "hidden_norm.weight": (H,),
        p + "post_attention_layernorm.weight": (H,),
        p + "self_attn.q_proj.weight": (NH * HD, 2 * H),
        p + "self_attn.k_proj.weight": (NKV * HD, 2 * H),
        p + "self_attn.v_proj.weight": (NKV * HD, 2 * H),
        p + "self_attn.o_proj.weight": (H, NH * HD),
        p + "mlp.gate_proj.weight": (INTER, H),
        p + "mlp.up_proj.weight": (INTER, H),
        p + "mlp.down_proj.weight": (H, INTER),
    }


def checkpoint(root: Path | None = None) -> Path:
    """The random real-scale checkpoint folder (written on first use)."""
    from safetensors.torch import save_file

    out = Path(root or tempfile.gettempdir()) / "drifttool-bench-llama31-8b-eagle3-shape"
    if (out / "config.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    sd = {}
    for name, shape in shapes().items():
        sd[name] = (
            torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=g) * 0.02
        ).bfloat16()
    sd["d2t"] = torch.zeros(VD, dtype=torch.long)
    save_file(sd, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config(), indent=2))  # written last: marks a complete folder
    return out


def load(dtype: torch.dtype = torch.float32):
    from drifttool import load_drafter

    return load_drafter(checkpoint(), dtype=dtype).eval()


def fill_cache(drafter, n: int, depth: int, seed: int = 0):
    """A KV cache holding n random committed slots (capacity for one round of K drafts)."""
    cache = drafter.new_cache(capacity=n + depth + 8)
    g = torch.Generator().manual_seed(seed)
    for a in range(0, n, 4096):  # in chunks: no full-size fp32 temporary
        b = min(n, a + 4096)
        cache.k[:, :, a:b] = torch.randn(cache.k[:, :, a:b].shape, generator=g).to(cache.k.dtype)
        cache.v[:, :, a:b] = torch.randn(cache.v[:, :, a:b].shape, generator=g).to(cache.v.dtype)
    cache.length = n
    return cache
