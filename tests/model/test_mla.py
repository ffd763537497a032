"""MLA draft layers (Kimi K2.x EAGLE-3.1, DeepSeek-style multi-head latent attention): a shrunk copy of the
public head's layout (flat DeepSeek-V3 config with q/kv LoRA ranks, split nope/rope head dims, DeepSeek YaRN,
eagle_config aux ids, fc_norm + norm_output; midlayer.* keys, no embed_tokens, no d2t) loads, equals the
independent reference (tests/support/reference_mla.py) at every depth, speculates in both modes, and the capture's
per-head masses are those of the decompressed heads."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import drifttool
from drifttool.model.tiny import tiny_target
from drifttool.run.hooks import Capture
from drifttool.trace.sinks import SinkSpec
from tests.support.reference_eagle3 import RefConfig, random_weights
from tests.support.reference_mla import chain, random_mla

DEPTH, N_CTX, VOCAB, H = 4, 7, 64, 32
MLA = {"q_lora_rank": 16, "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6}
YARN = {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.7,
        "original_max_position_embeddings": 16, "type": "yarn"}


def kimi_config(mla: dict, rope_scaling: dict | None) -> dict:
    """Kimi K2.6 EAGLE-3.1 head config fields, shrunk (hidden 7168 -> 32, 64 heads -> 4, ranks and dims too)."""
    return {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
            "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1, "intermediate_size": 48,
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "rope_scaling": rope_scaling,
            "max_position_embeddings": 256, "vocab_size": VOCAB, "attention_bias": False,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "fc_norm": True, "norm_output": True,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 4, 6], "use_aux_hidden_state": True}, **mla}


def _write(path, conf, w):
    p = "midlayer."
    sd = {"fc.weight": w["fc"], "norm.weight": w["norm"], "lm_head.weight": w["lm_head"],
          p + "input_layernorm.weight": w["in_ln"], p + "hidden_norm.weight": w["hid_ln"],
          p + "post_attention_layernorm.weight": w["post_ln"], p + "mlp.gate_proj.weight": w["gate"],
          p + "mlp.up_proj.weight": w["up"], p + "mlp.down_proj.weight": w["down"],
          p + "self_attn.kv_a_proj_with_mqa.weight": w["kv_a"], p + "self_attn.kv_a_layernorm.weight": w["kv_a_ln"],
          p + "self_attn.kv_b_proj.weight": w["kv_b"], p + "self_attn.o_proj.weight": w["o"]}
    if "q_a" in w:
        sd.update({p + "self_attn.q_a_proj.weight": w["q_a"], p + "self_attn.q_a_layernorm.weight": w["q_a_ln"],
                   p + "self_attn.q_b_proj.weight": w["q_b"]})
    else:
        sd[p + "self_attn.q_proj.weight"] = w["q"]
    sd.update({f"fc_norm.{i}.weight": t for i, t in enumerate(w["fc_norm"])})
    path.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(conf, indent=2))
    return path


VARIANTS = {"q-lora+deepseek-yarn": (MLA, YARN), "no-q-lora+default-rope": (dict(MLA, q_lora_rank=None), None)}


@pytest.fixture(params=list(VARIANTS), scope="module")
def kimi(request, tmp_path_factory):
    mla, scaling = VARIANTS[request.param]
    target = tiny_target(vocab=VOCAB, hidden=H, layers=8, heads=4, kv_heads=2, seed=61)
    rc = RefConfig(hidden=H, heads=4, kv_heads=4, head_dim=12, target_hidden=H, eps=1e-5, theta=50000.0,
                   rope_scaling=scaling, fc_norm=True, norm_output=True, extra=mla)
    g = torch.Generator().manual_seed(62)
    w = random_weights(rc, VOCAB, VOCAB, 48, seed=63, embed=target.input_embeddings())
    w.update(random_mla(rc, g))
    path = _write(tmp_path_factory.mktemp("kimi") / "head", kimi_config(mla, scaling), w)
    return target, rc, w, drifttool.load_drafter(path, target=target)


def _features(target, tokens):
    target.reset()
    return target.forward(tokens).features.float()


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_mla_chain_matches_reference(kimi, attn_impl):
    target, rc, w, d = kimi
    assert d.config.mla and d.config.variant == "eagle3.1" and not d.config.has_embed
    d.set_attn_impl(attn_impl)
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, VOCAB, (N_CTX + 1,), generator=g)
    fed = torch.randint(0, VOCAB, (DEPTH,), generator=g).tolist()
    feats = _features(target, tokens[:N_CTX])
    ref = chain(w, rc, tokens[1:].tolist(), feats, fed, DEPTH)
    cache = d.new_cache(capacity=4)
    try:
        with torch.no_grad():
            step = d(tokens[1:][None], feats[None], torch.arange(N_CTX)[None], cache, hidden_is_feature=True)
            torch.testing.assert_close(step.logits[0], ref[0].logits, atol=1e-5, rtol=0)
            for k in range(2, DEPTH + 1):
                step = d(torch.tensor([[fed[k - 2]]]), step.feedback[:, -1:], torch.tensor([[N_CTX + k - 2]]), cache,
                         hidden_is_feature=False)
                torch.testing.assert_close(step.logits[0, -1], ref[k - 1].logits[-1], atol=1e-5, rtol=0)
                torch.testing.assert_close(step.feedback[0, -1], ref[k - 1].fed[-1], atol=1e-5, rtol=1e-5)
    finally:
        d.set_attn_impl("sdpa")


def test_mla_capture_reports_the_decompressed_heads(kimi):
    """Capture's per-head rows (its own softmax over hooked q and cached k) equal the reference MLA heads."""
    target, rc, w, d = kimi
    prompt = list(range(3, 3 + N_CTX))
    with Capture(d, sink=SinkSpec.parse("2"), keep_qk=True) as cap:
        res = drifttool.speculate(target, d, prompt, depth=DEPTH, max_new_tokens=6, observers=[cap])
    seq = prompt + res.output_ids
    r = res.rounds[-1]
    n = r.context_len
    feats = _features(target, torch.tensor(seq[:n]))
    ref = chain(w, rc, seq[1 : n + 1], feats, r.input_ids[1:], DEPTH)
    for j in range(DEPTH):
        for head in range(rc.heads):
            mine = torch.from_numpy(cap.attention(r.round, j + 1, head=head))
            torch.testing.assert_close(mine, ref[j].probs[head, -1].float(), atol=1e-5, rtol=0)
        sink = cap.rounds[-1].field("sink_mass")[j]
        np.testing.assert_allclose(sink, ref[j].probs[:, -1, :2].sum(-1).numpy(), atol=1e-5)


@pytest.mark.parametrize("mode", ["generate", "teacher-forced"])
def test_mla_speculates(kimi, mode):
    target, _, _, d = kimi
    res = drifttool.speculate(target, d, [5, 9, 13, 17, 21], depth=DEPTH, max_new_tokens=8, mode=mode)
    assert len(res.output_ids) == 8 and res.rounds


def test_mla_missing_field_and_save_refused(kimi, tmp_path):
    target, _, _, d = kimi
    conf = kimi_config(MLA, YARN)
    del conf["kv_lora_rank"]
    (tmp_path / "config.json").write_text(json.dumps(conf))
    with pytest.raises(drifttool.DriftError, match="missing required field 'kv_lora_rank'"):
        drifttool.load_drafter(tmp_path, target=target)
    with pytest.raises(drifttool.DriftError, match="MLA"):
        drifttool.save_drafter(d, tmp_path / "out")


def test_softmax_scale_follows_deepseek_yarn():
    from drifttool.model.mla import softmax_scale

    m = 0.1 * 0.7 * np.log(4.0) + 1
    assert softmax_scale(12, YARN) == pytest.approx(12**-0.5 * m * m)
    assert softmax_scale(12, None) == pytest.approx(12**-0.5)
    assert softmax_scale(12, dataclasses.replace(RefConfig(1, 1, 1, 1, 1)).rope_scaling) == pytest.approx(12**-0.5)


def test_odd_rope_head_dim_is_one_error_line(kimi, tmp_path):
    """An odd qk_rope_head_dim gave a traceback inside RoPE."""
    target, _, _, _ = kimi
    conf = kimi_config(MLA, YARN)
    conf["qk_rope_head_dim"] = 7
    (tmp_path / "config.json").write_text(json.dumps(conf))
    with pytest.raises(drifttool.DriftError, match="qk_rope_head_dim 7 is odd"):
        drifttool.load_drafter(tmp_path, target=target)
