"""The shipped demo models pass the same independent reference-forward parity as any checkpoint, and the
zoo stays within its size budget with its provenance recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import drifttool
from tests.support.reference_eagle3 import RefConfig, chain

MODELS = Path(drifttool.__file__).resolve().parent / "zoo" / "models"
DRAFTERS = [(spec, v) for spec in ("plain", "sink") for v in ("eagle3", "eagle3.1")]
pytestmark = pytest.mark.skipif(not (MODELS / "sink" / "eagle3.1" / "config.json").is_file(),
                                reason="bundled zoo not built")


def _ref_weights(path: Path, embed: torch.Tensor) -> tuple[dict, RefConfig, list[int]]:
    """Read the speculators checkpoint with plain json + safetensors (no drifttool code)."""
    cfg = json.loads((path / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    sd = load_file(str(path / "model.safetensors"))
    p = "layers.0."
    w = {
        "embed": sd.get("embed_tokens.weight", embed), "fc": sd["fc.weight"],
        "in_ln": sd[p + "input_layernorm.weight"], "hid_ln": sd[p + "hidden_norm.weight"],
        "post_ln": sd[p + "post_attention_layernorm.weight"], "norm": sd["norm.weight"],
        "q": sd[p + "self_attn.q_proj.weight"], "k": sd[p + "self_attn.k_proj.weight"],
        "v": sd[p + "self_attn.v_proj.weight"], "o": sd[p + "self_attn.o_proj.weight"],
        "gate": sd[p + "mlp.gate_proj.weight"], "up": sd[p + "mlp.up_proj.weight"],
        "down": sd[p + "mlp.down_proj.weight"], "lm_head": sd["lm_head.weight"], "d2t": sd["d2t"].long(),
    }
    aux = cfg["eagle_aux_hidden_state_layer_ids"]
    if cfg.get("fc_norm"):
        w["fc_norm"] = [sd[f"fc_norm.{i}.weight"] for i in range(len(aux))]
    c = RefConfig(hidden=layer["hidden_size"], heads=layer["num_attention_heads"],
                  kv_heads=layer["num_key_value_heads"], head_dim=layer["head_dim"],
                  target_hidden=cfg["target_hidden_size"], num_aux=len(aux), eps=layer["rms_norm_eps"],
                  theta=layer.get("rope_theta", 10000.0), fc_norm=bool(cfg.get("fc_norm")),
                  norm_output=bool(cfg.get("norm_output")),
                  norm_before_residual=bool(cfg.get("norm_before_residual")))
    return w, c, aux


@pytest.mark.parametrize("spec,variant", DRAFTERS, ids=lambda x: str(x))
def test_shipped_drafter_matches_reference(spec, variant):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(MODELS / spec / "target", dtype=torch.float32).eval()
    target = drifttool.load_target(MODELS / spec / "target")
    drafter = drifttool.load_drafter(MODELS / spec / variant, target=target)
    w, c, aux = _ref_weights(MODELS / spec / variant, hf.get_input_embeddings().weight.detach())
    assert drafter.config.variant == variant
    ids = target.encode("def parse(self, text):\n    for line in text.splitlines():\n        yield line\n")
    n, depth = len(ids) - 1, 6
    with torch.no_grad():
        hs = hf(input_ids=torch.tensor([ids[:n]]), output_hidden_states=True).hidden_states
    feats = torch.cat([hs[i][0] for i in aux], -1)
    fed = [ids[1]] * (depth - 1)
    ref = chain(w, c, ids[1 : n + 1], feats, fed, depth)
    cache = drafter.new_cache()
    with torch.no_grad():
        step = drafter(torch.tensor([ids[1 : n + 1]]), feats[None], torch.arange(n)[None], cache, hidden_is_feature=True)
        torch.testing.assert_close(step.logits[0, -1], ref[0].logits[-1], atol=1e-4, rtol=0)
        for k in range(2, depth + 1):
            step = drafter(torch.tensor([[fed[k - 2]]]), step.feedback[:, -1:], torch.tensor([[n - 2 + k]]), cache,
                           hidden_is_feature=False)
            torch.testing.assert_close(step.logits[0, -1], ref[k - 1].logits[-1], atol=1e-4, rtol=0)


def test_zoo_size_and_provenance():
    size = lambda d: sum(f.stat().st_size for f in (MODELS / d).rglob("*") if f.is_file())  # noqa: E731
    tiny = size("sink") + size("plain")
    assert tiny <= 25 * 2**20, f"tiny zoo is {tiny / 2**20:.1f} MiB"
    # the real target's drafters ship in bf16 without embeddings (the target's are used): ~14.3 MiB each
    assert size("smollm2") <= 32 * 2**20, f"SmolLM2 drafters are {size('smollm2') / 2**20:.1f} MiB"
    sink = json.loads((MODELS / "sink" / "target" / "report.json").read_text())
    plain = json.loads((MODELS / "plain" / "target" / "report.json").read_text())
    assert sink["sink_aux"] is not None and plain["sink_aux"] is None
    assert min(sink["attn_pos0_per_layer"][1:]) > 0.3 > max(plain["attn_pos0_per_layer"])
