"""Real drafter config families, shrunk: each loads, equals the independent reference chain
(tests/support/reference_eagle3.py) at every depth, and speculates in generate and teacher-forced mode. Field names
follow the public configs they copy (listed per case); sizes are shrunk and weights random
(tests/support/ckpt_writer.py)."""

from __future__ import annotations

import pytest
import torch

import drifttool
from drifttool.model.tiny import tiny_target
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import chain

DEPTH, N_CTX = 4, 6

# speculators Qwen3 drafter (scripts/train.py --draft-arch qwen3): transformer_layer_config from Qwen3Config,
# EAGLE-3 defaults norm_before_fc + norm_output on top; Qwen3 attention has per-head q_norm / k_norm.
QWEN3_LAYER = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
               "max_window_layers": 28, "use_sliding_window": False, "sliding_window": None,
               "layer_types": ["full_attention"], "tie_word_embeddings": False}
# SpecForge configs/qwen3-30B-A3B-eagle3.1.json (a Llama draft layer for a Qwen3 target), shrunk.
SPECFORGE_QWEN3 = {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
                   "initializer_range": 0.02, "max_window_layers": 48, "rope_scaling": None, "sliding_window": None,
                   "torch_dtype": "bfloat16", "transformers_version": "4.53.2", "use_cache": True,
                   "use_sliding_window": False}

CASES = [
    Case("speculators-qwen3-3.1-qknorm", "speculators", kv_heads=2, head_dim=16, aux=[1, 4, 6], qk_norm=True,
         theta=1000000.0, layer_extra=QWEN3_LAYER, flags={"norm_before_fc": True, "norm_output": True}, seed=31),
    Case("speculators-qwen3-qknorm-swa", "speculators", kv_heads=1, head_dim=16, aux=[1, 4, 6], qk_norm=True,
         window=3, layer_extra=dict(QWEN3_LAYER, sliding_window=3, use_sliding_window=True,
                                    layer_types=["sliding_attention"]),
         flags={"norm_before_fc": True, "norm_output": True}, seed=32),
    Case("specforge-qwen3-3.1", "specforge", kv_heads=2, head_dim=16, draft_vocab=40, theta=1000000.0,
         layer_extra=SPECFORGE_QWEN3, flags={"fc_norm": True, "norm_output": True}, seed=33),
    Case("specforge-qwen3-3.0", "safeailab", kv_heads=2, head_dim=16, draft_vocab=40, theta=1000000.0,
         layer_extra=SPECFORGE_QWEN3, seed=34),
]


def _target(case: Case):
    return tiny_target(vocab=case.vocab, hidden=case.target_hidden, layers=case.target_layers, heads=4,
                       kv_heads=2, seed=400 + case.seed)


@pytest.fixture(params=CASES, ids=lambda c: c.name)
def family(request, tmp_path):
    case = request.param
    target = _target(case)
    w = case.weights(target.input_embeddings())
    path = write(case, w, tmp_path / case.name)
    return case, target, w, drifttool.load_drafter(path, target=target)


def test_family_matches_reference(family):
    case, target, w, d = family
    assert d.config.qk_norm == case.qk_norm and d.config.sliding_window == case.window
    g = torch.Generator().manual_seed(case.seed)
    tokens = torch.randint(0, case.vocab, (N_CTX + 1,), generator=g)
    fed = torch.randint(0, case.vocab, (DEPTH,), generator=g).tolist()
    target.reset()
    feats = target.forward(tokens[:N_CTX]).features.float()
    ref = chain(w, case.ref_config(), tokens[1:].tolist(), feats, fed, DEPTH)
    cache = d.new_cache()
    with torch.no_grad():
        step = d(tokens[1:][None], feats[None], torch.arange(N_CTX)[None], cache, hidden_is_feature=True)
        torch.testing.assert_close(step.logits[0], ref[0].logits, atol=1e-5, rtol=0)
        for k in range(2, DEPTH + 1):
            step = d(torch.tensor([[fed[k - 2]]]), step.feedback[:, -1:], torch.tensor([[N_CTX + k - 2]]), cache,
                     hidden_is_feature=False)
            torch.testing.assert_close(step.logits[0, -1], ref[k - 1].logits[-1], atol=1e-5, rtol=0)
            torch.testing.assert_close(step.feedback[0, -1], ref[k - 1].fed[-1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["generate", "teacher-forced"])
def test_family_speculates(family, mode):
    _, target, _, d = family
    res = drifttool.speculate(target, d, [3, 5, 7, 9, 11], depth=DEPTH, max_new_tokens=8, mode=mode)
    assert len(res.output_ids) == 8 and res.rounds


def test_qk_norm_weights_are_required(tmp_path):
    case = CASES[0]
    target = _target(case)
    path = write(case, case.weights(target.input_embeddings()), tmp_path / "q")
    from safetensors.torch import load_file, save_file

    sd = load_file(str(path / "model.safetensors"))
    sd.pop("layers.0.self_attn.k_norm.weight")
    save_file(sd, str(path / "model.safetensors"))
    with pytest.raises(drifttool.DriftError, match="missing tensor 'layers.0.self_attn.k_norm.weight'"):
        drifttool.load_drafter(path, target=target)
