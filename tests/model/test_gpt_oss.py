"""gpt-oss targets (sliding-window layers in the target's own KV cache): speculating in generate mode crops the
cache beyond the window and stays lossless (equals HF greedy generate); an NVIDIA-layout gpt-oss head with
aux id L and YaRN rope equals the reference chain; SpecForge's MoE draft layer is refused in one line."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import drifttool
from drifttool.model.target import Target
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import chain

L, WINDOW = 4, 4
# yarn as gpt-oss configs write it (rope_parameters, transformers v5), shrunk
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0,
        "beta_slow": 1.0}


def gpt_oss_target(seed: int = 0) -> Target:
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(seed)
    cfg = GptOssConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=L, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
                       sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"] * (L // 2),
                       max_position_embeddings=256, tie_word_embeddings=False, attn_implementation="eager",
                       rope_parameters=dict(YARN, rope_theta=150000.0, truncate=False))
    m = GptOssForCausalLM(cfg).eval()
    with torch.no_grad():
        m.lm_head.weight.mul_(4.0)  # greedy far from ties
    return Target(m, aux_layer_ids=[1, 2, L])


# NVIDIA ModelOpt export of a gpt-oss EAGLE-3 head (eagle_config block; the v3 head reads id L), shrunk
CASE = Case("nvidia-gpt-oss-v3", "nvidia", kv_heads=2, head_dim=8, target_hidden=32, aux=[1, 2, L],
            target_layers=L, rope="scaling", rope_scaling=YARN, theta=150000.0, seed=51)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    target = gpt_oss_target()
    w = CASE.weights(target.input_embeddings())
    path = write(CASE, w, tmp_path_factory.mktemp("oss") / "head")
    return target, w, path, drifttool.load_drafter(path, target=target)


def test_generate_crops_the_sliding_cache_and_stays_lossless(pair):
    target, _, _, d = pair
    prompt = [3, 5, 7, 9, 11, 13, 15, 17, 19]  # longer than the target's window
    res = drifttool.speculate(target, d, prompt, depth=3, max_new_tokens=20)
    assert any(r.accepted < 3 for r in res.rounds)  # rejected drafts were cropped past the window
    with torch.no_grad():
        ref = target.model.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0, len(prompt):]
    assert res.output_ids == ref.tolist()
    tf = drifttool.speculate(target, d, prompt, depth=3, max_new_tokens=20, mode="teacher-forced")
    assert tf.output_ids == ref.tolist()


def test_nvidia_head_with_id_L_matches_reference(pair):
    target, w, path, d = pair
    assert json.loads((path / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, L]
    tokens = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(2))
    m = copy.deepcopy(target.model)
    m.model.norm = torch.nn.Identity()  # HF's hidden_states[L] is then the un-normalised last-layer output
    with torch.no_grad():
        hs = m(input_ids=tokens[None, :7], output_hidden_states=True).hidden_states
    feats = torch.cat([hs[i][0] for i in (1, 2, L)], -1)
    target.reset()
    torch.testing.assert_close(target.forward(tokens[:7]).features, feats, atol=1e-5, rtol=0)
    ref = chain(w, CASE.ref_config(), tokens[1:].tolist(), feats, [4, 6, 8], 3)
    cache = d.new_cache()
    with torch.no_grad():
        step = d(tokens[1:][None], feats[None], torch.arange(7)[None], cache, hidden_is_feature=True)
    torch.testing.assert_close(step.logits[0], ref[0].logits, atol=1e-5, rtol=0)


def test_specforge_moe_draft_layer_is_one_clear_error(tmp_path):
    # SpecForge configs/gpt-oss-20B-eagle3.json: a gpt_oss (MoE) draft layer, shrunk
    conf = {"architectures": ["GptOssForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
            "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
            "num_local_experts": 4, "max_position_embeddings": 256, "model_type": "gpt_oss", "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": 1e-05,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 64,
            "experts_per_token": 2, "draft_vocab_size": 32}
    (tmp_path / "config.json").write_text(json.dumps(conf))
    with pytest.raises(drifttool.DriftError, match=r"config.json: model_type 'gpt_oss' unsupported"):
        drifttool.load_drafter(tmp_path, target=gpt_oss_target())


def test_a_shared_prefill_restores_the_sliding_cache_exactly(pair):
    """A sliding-window cache cannot be cropped back to the prompt: the snapshot is a copy, and a drafter that
    starts from it after another drafter ran drafts and commits exactly what it does from its own prefill."""
    from drifttool.run.loop import prefill_prompt

    target, _, _, d = pair
    prompt = [3, 5, 7, 9, 11, 13, 15, 17, 19]
    alone = drifttool.speculate(target, d, prompt, depth=3, max_new_tokens=20)
    shared = prefill_prompt(target, prompt)
    assert shared.snapshot.cache is not None  # copied, not cropped
    drifttool.speculate(target, d, prompt, depth=2, max_new_tokens=12, prefill=shared)  # another run moves the cache
    again = drifttool.speculate(target, d, prompt, depth=3, max_new_tokens=20, prefill=shared)
    assert again.output_ids == alone.output_ids
    assert [r.draft_ids for r in again.rounds] == [r.draft_ids for r in alone.rounds]
