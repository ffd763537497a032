"""MTP heads read from their target's checkpoint (DeepSeek-V3 dense and MoE with YaRN, GLM-4.5, MiMo; shrunk public
configs, tests/support/mtp_fixtures.py): each loads as an `mtp` drafter, its chain equals the independent
reference (tests/support/reference_mtp.py) at every depth within 1e-4 (fp32), the recursion follows vLLM's rule
(fed-back tensor, per-step norms, the first MTP layer reused), and what is not supported is one error line."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import drifttool
from drifttool.errors import DriftError
from drifttool.run import loop
from tests.support import mtp_fixtures as fx
from tests.support import reference_mtp as ref

FAMILIES = {  # name: (config, MTP block is MoE)
    "deepseek-dense": (fx.DEEPSEEK_DENSE, False),
    "deepseek-moe-yarn": (dict(fx.DEEPSEEK, rope_scaling=fx.DEEPSEEK_YARN), True),
    "glm4.5": (fx.GLM, True),
    "mimo": (fx.MIMO, False),
}
N_CTX, DEPTH = 6, 4


@pytest.fixture(params=list(FAMILIES), scope="module")
def family(request, tmp_path_factory):
    conf, moe = FAMILIES[request.param]
    folder = fx.write_target(tmp_path_factory.mktemp(request.param), conf)
    return request.param, conf, moe, folder


def _chain(drafter, seq, hidden, depth=DEPTH):
    """drifttool's own loop pieces: refresh over the context, then greedy drafts to `depth`."""
    cache = drafter.new_cache()
    step = loop.refresh(drafter, cache, seq[1:], 0, hidden)
    steps: list = []
    drafts, _, _ = loop.draft_chain(drafter, cache, step, len(seq) - 1, depth, seq[-1],
                                    lambda lg: (int(lg.argmax()), None), None, steps)
    return drafts, steps


def test_each_family_loads_as_an_mtp_drafter(family):
    name, conf, moe, folder = family
    d = drifttool.load_drafter(folder)
    assert d.config.variant == "mtp"
    assert d.config.layout == {"deepseek_v3": "deepseek_mtp", "glm4_moe": "glm4_moe_mtp",
                               "mimo": "mimo_mtp"}[conf["model_type"]]
    assert d.config.input_aux_layer_ids == [-1]  # the target's last hidden state after its final norm
    assert type(d.layers[0].mlp).__name__ == ("MoE" if moe else "MLP")
    assert d.config.norm_output is (conf["model_type"] == "mimo")  # MiMo's layer returns final_layernorm(h)


def test_chain_matches_the_reference_at_every_depth(family):
    _, conf, moe, folder = family
    torch.manual_seed(1)
    d = drifttool.load_drafter(folder)
    seq = torch.randint(2, fx.VOCAB, (N_CTX + 1,)).tolist()
    hidden = torch.randn(N_CTX, fx.H)
    drafts, steps = _chain(d, seq, hidden)
    want = ref.chain(fx.layer_tensors(folder, conf), conf, seq, hidden, drafts[:-1], moe)
    for k, (got, exp) in enumerate(zip(steps, want), 1):
        assert torch.allclose(got.logits[0, -1], exp.logits, atol=1e-4), f"logits at depth {k}"
        assert torch.allclose(got.feedback[0, -1], exp.fed, atol=1e-4), f"fed-back tensor at depth {k}"
        assert torch.allclose(got.post[0, -1], exp.post, atol=1e-4), f"normed state at depth {k}"


def test_recursion_feeds_back_what_vllm_feeds_back(family, tmp_path):
    """vLLM (v1/spec_decode/eagle.py, method "mtp"): the next step's hidden input is the MTP model's forward output,
    i.e. DeepSeekMultiTokenPredictorLayer.forward's `residual + hidden_states` before shared_head.norm, and
    MiMoMultiTokenPredictorLayer.forward's final_layernorm output. Checked by the layer input the next depth sees."""
    _, conf, _, folder = family
    torch.manual_seed(2)
    d = drifttool.load_drafter(folder)
    seen = []
    d.hook_layer_in.register_forward_hook(lambda m, i, o: seen.append(o[0, -1].clone()))
    seq = torch.randint(2, fx.VOCAB, (N_CTX + 1,)).tolist()
    _, steps = _chain(d, seq, torch.randn(N_CTX, fx.H))
    for k in range(1, DEPTH):
        fed = steps[k - 1].post if conf["model_type"] == "mimo" else steps[k - 1].pre
        assert torch.equal(seen[k], fed[0, -1]), f"depth {k + 1} input"
    assert not torch.allclose(steps[0].pre, steps[0].post)  # the two readings really differ


def test_every_step_runs_the_first_mtp_layer(tmp_path):
    """vLLM's rule with more MTP layers than one: DeepSeekMultiTokenPredictor picks layer
    `spec_step_idx % num_mtp_layers`, and the V1 proposer calls the model (and compute_logits) without
    spec_step_idx, so every draft step runs layer num_hidden_layers + 0. Layer 1's weights change nothing;
    layer 0's change every depth."""
    conf = fx.DEEPSEEK_DENSE
    folder = fx.write_target(tmp_path / "two", conf, mtp_layers=2)
    torch.manual_seed(3)
    seq = torch.randint(2, fx.VOCAB, (N_CTX + 1,)).tolist()
    hidden = torch.randn(N_CTX, fx.H)
    d = drifttool.load_drafter(folder)
    assert [type(x.mlp).__name__ for x in d.layers] == ["MLP", "MoE"]  # layer 3 >= first_k_dense_replace
    assert len(d.layers) == 2 and "every draft step runs the first" in d.config.assumptions["mtp_layers"]
    _, base = _chain(d, seq, hidden)
    sd = load_file(str(folder / "model.safetensors"))
    for layer, changes in ((3, False), (2, True)):
        bumped = dict(sd)
        key = f"model.layers.{layer}.eh_proj.weight"
        bumped[key] = sd[key] + 0.5
        save_file(bumped, str(folder / "model.safetensors"), metadata={"format": "pt"})
        _, steps = _chain(drifttool.load_drafter(folder), seq, hidden)
        same = all(torch.equal(a.logits, b.logits) for a, b in zip(base, steps))
        assert same is not changes, f"layer {layer}"
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_position_zero_embedding_is_zeroed(family):
    """vLLM masks the token embedding of a position-0 slot (`inputs_embeds[positions == 0] = 0`): at position 0
    the token id cannot change the output."""
    *_, folder = family
    d = drifttool.load_drafter(folder)
    h = torch.randn(1, 1, fx.H)
    outs = [d(torch.tensor([[tok]]), h, torch.tensor([[0]]), d.new_cache(), True).logits for tok in (3, 7)]
    assert torch.equal(outs[0], outs[1])
    outs = [d(torch.tensor([[tok]]), h, torch.tensor([[1]]), d.new_cache(), True).logits for tok in (3, 7)]
    assert not torch.equal(outs[0], outs[1])


def test_norm_output_override_feeds_back_the_other_state(family):
    *_, folder = family
    d = drifttool.load_drafter(folder)
    flipped = drifttool.load_drafter(folder, overrides={"norm_output": str(not d.config.norm_output).lower()})
    assert flipped.config.overrides["norm_output"]["override"] is (not d.config.norm_output)
    assert flipped.config.variant == "mtp"
    torch.manual_seed(4)
    seq = torch.randint(2, fx.VOCAB, (N_CTX + 1,)).tolist()
    hidden = torch.randn(N_CTX, fx.H)
    _, a = _chain(d, seq, hidden, depth=2)
    _, b = _chain(flipped, seq, hidden, depth=2)
    assert torch.equal(a[0].logits, b[0].logits)  # depth 1 reads the target's hidden state: unchanged
    assert torch.equal(b[0].feedback, a[0].post if not d.config.norm_output else a[0].pre)
    assert not torch.allclose(a[1].logits, b[1].logits)


def _one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_unsupported_and_broken_checkpoints_are_one_error_line(tmp_path):
    base = fx.write_target(tmp_path / "ds", fx.DEEPSEEK_DENSE)
    conf = json.loads((base / "config.json").read_text())

    def with_conf(name, **change):
        p = tmp_path / name
        p.mkdir()
        (p / "model.safetensors").symlink_to(base / "model.safetensors")
        (p / "config.json").write_text(json.dumps({**conf, **change}))
        return p

    cases = {
        "qwen3_next": (dict(model_type="qwen3_next"), "Qwen3-Next MTP heads"),
        "zero": (dict(num_nextn_predict_layers=0), "num_nextn_predict_layers is 0"),
        "huge": (dict(num_nextn_predict_layers=10**12), "expected at most 64"),  # was a list of 10**12 first
        "unknown": (dict(model_type="llama"), "unknown MTP family"),
        "v2-routing": (dict(first_k_dense_replace=1, scoring_func="softmax"), "scoring_func 'softmax'"),
        "wider": (dict(hidden_size=72), "has shape"),
        "no-kv-rank": (dict(kv_lora_rank=None), "'kv_lora_rank'"),
    }
    for name, (change, text) in cases.items():
        with pytest.raises(DriftError) as e:
            drifttool.load_drafter(with_conf(name, **change))
        assert text in _one_line(e), name
    with pytest.raises(DriftError) as e:  # an MTP layer is a dense block here: the MoE config asks for experts
        drifttool.load_drafter(with_conf("moe", first_k_dense_replace=1))
    assert "missing tensor 'model.layers.2.mlp.gate.weight'" in _one_line(e)
    with pytest.raises(DriftError) as e:
        drifttool.load_drafter(base, overrides={"fc_norm": "true"})
    assert "not an MTP head setting" in _one_line(e)
    with pytest.raises(DriftError) as e:
        drifttool.save_drafter(drifttool.load_drafter(base), tmp_path / "out")
    assert "lives in its target's checkpoint" in _one_line(e)


@pytest.mark.parametrize("conf", ["DEEPSEEK", "VLLM_CPU"])
def test_deepseek_mla_block_attention_equals_transformers(conf, tmp_path):
    """The DeepSeek-V3 MTP block's MLA attention equals transformers' DeepseekV3Attention on the same weights,
    inputs and positions (causal, eager) within 1e-5: the fixture and the vllm-cpu-sized one (kv_lora_rank 512,
    rope 64), on which vLLM 0.32's CPU MLA differs (docs/mtp.md)."""
    import transformers
    from safetensors.torch import load_file
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf

    c = fx.VLLM_CPU["deepseek_v3"] if conf == "VLLM_CPU" else fx.DEEPSEEK
    folder = fx.write_target(tmp_path / "ds", c)
    cfg = transformers.DeepseekV3Config(**{k: v for k, v in c.items()
                                          if k not in ("architectures", "model_type", "num_nextn_predict_layers")})
    cfg._attn_implementation = "eager"
    att = hf.DeepseekV3Attention(cfg, layer_idx=c["num_hidden_layers"]).eval()
    pre = f"model.layers.{c['num_hidden_layers']}.self_attn."
    att.load_state_dict({k[len(pre):]: v for k, v in load_file(str(folder / "model.safetensors")).items()
                         if k.startswith(pre)}, strict=True)
    x = torch.randn(1, 8, fx.H, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(3, 11)[None]
    mask = torch.full((8, 8), float("-inf")).triu(1)[None, None]
    d = drifttool.load_drafter(folder, target=drifttool.load_target(folder))
    with torch.no_grad():
        want, _ = att(x, hf.DeepseekV3RotaryEmbedding(cfg)(x, pos), mask)
        got = d.attend_cached(d.layers[0].self_attn, x, pos, d.new_cache(), None)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
