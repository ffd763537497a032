"""Write tiny drafter checkpoints under the real public key names and config.json shapes (docs/eagle3.md §6),
from the reference weight dict of `reference_eagle3` -- independently of drifttool.save_drafter."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from tests.support.reference_eagle3 import RefConfig, random_weights

LAYER_KEYS = {
    "in_ln": "input_layernorm.weight",
    "hid_ln": "hidden_norm.weight",
    "post_ln": "post_attention_layernorm.weight",
    "q": "self_attn.q_proj.weight",
    "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight",
    "o": "self_attn.o_proj.weight",
    "gate": "mlp.gate_proj.weight",
    "up": "mlp.up_proj.weight",
    "down": "mlp.down_proj.weight",
}


@dataclass
class Case:
    name: str
    layout: str  # speculators | safeailab | specforge | nvidia
    hidden: int = 32
    heads: int = 4
    kv_heads: int = 2
    head_dim: int | None = None  # None: hidden // heads, field not written
    target_hidden: int = 32
    vocab: int = 64
    draft_vocab: int = 64
    inter: int = 64
    rope: str = "theta"  # absent | theta | scaling | parameters
    theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    aux: list[int] | None = None  # None: not written (loader derives [2, L//2, L-3])
    flags: dict[str, bool] = field(default_factory=dict)
    embed: bool = True  # write embed_tokens.weight (speculators only)
    write_d2t: bool = True
    target_layers: int = 8
    seed: int = 0
    window: int | None = None  # the window the reference applies (what the fields below should mean)
    qk_norm: bool = False  # Qwen3 q_norm / k_norm tensors (and the reference applies them)
    layer_extra: dict[str, Any] = field(default_factory=dict)  # extra fields of the (layer) config, verbatim
    top_extra: dict[str, Any] = field(default_factory=dict)  # extra top-level fields (speculators), verbatim

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def ref_config(self) -> RefConfig:
        return RefConfig(
            hidden=self.hidden, heads=self.heads, kv_heads=self.kv_heads, head_dim=self.hd,
            target_hidden=self.target_hidden, theta=self.theta if self.rope != "absent" else 10000.0,
            rope_scaling=self.rope_scaling, sliding_window=self.window, qk_norm=self.qk_norm, **self.flags,
        )

    def aux_ids(self) -> list[int]:
        n = self.target_layers
        return list(self.aux) if self.aux is not None else [2, n // 2, n - 3]

    def weights(self, target_embed: torch.Tensor | None) -> dict[str, Any]:
        own = self.layout == "speculators" and self.embed
        return random_weights(self.ref_config(), self.vocab, self.draft_vocab, self.inter, self.seed,
                              embed=None if own else target_embed)


def llama_fields(case: Case) -> dict[str, Any]:
    d: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": case.hidden,
        "num_attention_heads": case.heads, "num_key_value_heads": case.kv_heads,
        "intermediate_size": case.inter, "vocab_size": case.vocab, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 2048, "hidden_act": "silu", "num_hidden_layers": 1,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    }
    if case.head_dim is not None:
        d["head_dim"] = case.head_dim
    d.update(case.layer_extra)
    if case.rope == "theta":
        d["rope_theta"] = case.theta
    elif case.rope == "scaling":
        d["rope_theta"] = case.theta
        d["rope_scaling"] = case.rope_scaling
    elif case.rope == "parameters":  # transformers v5
        d["rope_parameters"] = {"rope_type": "default", "rope_theta": case.theta, **(case.rope_scaling or {})}
    return d


def tensors(case: Case, w: dict[str, Any]) -> dict[str, torch.Tensor]:
    prefix = "layers.0." if case.layout == "speculators" else "midlayer."
    sd = {"fc.weight": w["fc"], "norm.weight": w["norm"], "lm_head.weight": w["lm_head"]}
    for name, key in LAYER_KEYS.items():
        sd[prefix + key] = w[name]
    if case.layout == "speculators" and case.embed:
        sd["embed_tokens.weight"] = w["embed"]
    if case.write_d2t:
        sd["d2t"] = w["d2t"].long()
        t2d = torch.zeros(case.vocab, dtype=torch.bool)
        t2d[torch.arange(case.draft_vocab) + w["d2t"]] = True
        sd["t2d"] = t2d
    if "input_norm" in w:
        sd["input_norm.weight"] = w["input_norm"]
    if "q_norm" in w:
        sd[prefix + "self_attn.q_norm.weight"] = w["q_norm"]
        sd[prefix + "self_attn.k_norm.weight"] = w["k_norm"]
    for i, t in enumerate(w.get("fc_norm", [])):
        sd[f"fc_norm.{i}.weight"] = t
    return {k: v.contiguous() for k, v in sd.items()}


def config(case: Case) -> dict[str, Any]:
    llama = llama_fields(case)
    f = case.flags
    if case.layout == "speculators":
        conf = {
            "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3",
            "transformer_layer_config": llama, "draft_vocab_size": case.draft_vocab,
            "target_hidden_size": case.target_hidden,
            "norm_before_residual": f.get("norm_before_residual", False),
            "norm_before_fc": f.get("norm_before_fc", False),
            "fc_norm": f.get("fc_norm", False), "norm_output": f.get("norm_output", False),
            "speculators_config": {
                "algorithm": "eagle3", "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "verifier": {"name_or_path": "tiny-target", "architectures": ["LlamaForCausalLM"]},
            },
        }
        if case.aux is not None:
            conf["eagle_aux_hidden_state_layer_ids"] = case.aux
        conf.update(case.top_extra)
        return conf
    conf = dict(llama, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=case.draft_vocab)
    if case.target_hidden != case.hidden:
        conf["target_hidden_size"] = case.target_hidden
    if case.layout == "safeailab":
        assert not f, "SafeAILab configs carry no EAGLE flags"
        assert case.aux is None
    elif case.layout == "specforge":
        conf["fc_norm"] = f.get("fc_norm", False)
        conf["norm_output"] = f.get("norm_output", False)
        if case.aux is not None:
            conf["eagle_aux_hidden_state_layer_ids"] = case.aux
    elif case.layout == "nvidia":
        conf["eagle_config"] = {
            "use_aux_hidden_state": True,
            "eagle_aux_hidden_state_layer_ids": case.aux_ids(),
            "norm_before_fc": f.get("norm_before_fc", False),
        }
    else:
        raise ValueError(case.layout)
    return conf


def write(case: Case, w: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors(case, w), str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config(case), indent=2))
    return out
