"""Older and irregular heads load and equal the reference chain: SafeAILab's `pytorch_model.bin` (read
weights-only), YaRN rope scaling, SGLang's legacy `use_aux_norm` / `aux_norm.*` names for fc_norm, a head
without lm_head (the target's, as vLLM shares it) and one without a final-norm weight (unit weights)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import drifttool
from drifttool.model.tiny import tiny_target
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import chain

DEPTH, N_CTX = 4, 7
# SafeAILab yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config.json fields (no EAGLE flags, no aux ids), shrunk
SAFEAILAB = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "initializer_range": 0.02,
             "torch_dtype": "float16", "transformers_version": "4.28.1", "use_cache": True}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0,
        "beta_slow": 1.0}


def _target(case):
    return tiny_target(vocab=case.vocab, hidden=case.target_hidden, layers=case.target_layers, heads=4,
                       kv_heads=2, seed=500 + case.seed)


def _check(case, w, d, target):
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
    res = drifttool.speculate(target, d, tokens[:5].tolist(), depth=DEPTH, max_new_tokens=6)
    assert res.rounds


def _edit(path, conf_fn=None, sd_fn=None):
    if conf_fn:
        conf = json.loads((path / "config.json").read_text())
        conf_fn(conf)
        (path / "config.json").write_text(json.dumps(conf))
    if sd_fn:
        sd = load_file(str(path / "model.safetensors"))
        sd_fn(sd)
        save_file(sd, str(path / "model.safetensors"))


def test_safeailab_pytorch_model_bin(tmp_path):
    case = Case("safeailab-llama3.1-bin", "safeailab", kv_heads=2, draft_vocab=40, rope="absent",
                layer_extra=SAFEAILAB, seed=41)
    target = _target(case)
    w = case.weights(target.input_embeddings())
    path = write(case, w, tmp_path / "d")
    torch.save(load_file(str(path / "model.safetensors")), path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    d = drifttool.load_drafter(path, target=target)
    assert d.config.layout == "safeailab"
    _check(case, w, d, target)


def test_yarn_rope_matches_reference(tmp_path):
    case = Case("yarn", "speculators", kv_heads=2, head_dim=16, aux=[1, 4, 6], rope="scaling", rope_scaling=YARN,
                seed=42)
    target = _target(case)
    w = case.weights(target.input_embeddings())
    d = drifttool.load_drafter(write(case, w, tmp_path / "d"), target=target)
    assert d.rope_scale == pytest.approx(0.1 * torch.log(torch.tensor(4.0)).item() + 1)
    _check(case, w, d, target)
    plain = drifttool.model.rope.inv_freq(16, 10000.0, None)
    assert not torch.allclose(d.inv_freq.cpu(), plain)  # the scaling changes the low frequencies
    assert torch.allclose(d.inv_freq.cpu()[:1], plain[:1])  # and keeps the fastest one


def test_sglang_legacy_aux_norm_names(tmp_path):
    case = Case("specforge-legacy", "specforge", kv_heads=2, draft_vocab=40, flags={"fc_norm": True,
                "norm_output": True}, seed=43)
    target = _target(case)
    w = case.weights(target.input_embeddings())
    path = write(case, w, tmp_path / "d")

    def conf(c):
        c.pop("fc_norm")
        c["use_aux_norm"] = True

    def keys(sd):
        for i in range(3):
            sd[f"aux_norm.{i}.weight"] = sd.pop(f"fc_norm.{i}.weight")

    _edit(path, conf, keys)
    d = drifttool.load_drafter(path, target=target)
    assert d.config.fc_norm and "use_aux_norm" in d.config.assumptions["fc_norm"]
    _check(case, w, d, target)


def test_head_without_lm_head_or_final_norm(tmp_path):
    case = Case("no-head", "speculators", kv_heads=2, aux=[1, 4, 6], seed=44,
                layer_extra={"tie_word_embeddings": True})
    target = _target(case)
    w = case.weights(target.input_embeddings())
    path = write(case, w, tmp_path / "d")
    _edit(path, sd_fn=lambda sd: (sd.pop("lm_head.weight"), sd.pop("norm.weight")))
    d = drifttool.load_drafter(path, target=target)
    a = d.config.assumptions
    assert "target's lm_head" in a["lm_head"] and "unit weights" in a["norm"]
    w = dict(w, lm_head=target.output_embeddings().detach().float(), norm=torch.ones(case.hidden))
    _check(case, w, d, target)


def test_head_without_aux_features(tmp_path):
    """eagle_config use_aux_hidden_state: false (vLLM's reading): no fc; the layer reads the target's final hidden
    state after its last norm (HF hidden_states[-1])."""
    case = Case("no-aux", "nvidia", kv_heads=2, aux=[1, 4, 6], seed=45)
    target = _target(case)
    w = case.weights(target.input_embeddings())
    path = write(case, w, tmp_path / "d")

    def conf(c):
        c["eagle_config"] = {"use_aux_hidden_state": False}

    _edit(path, conf, lambda sd: sd.pop("fc.weight"))
    d = drifttool.load_drafter(path, target=target)
    assert d.config.num_aux == 0 and d.config.input_aux_layer_ids == [-1]
    assert "final hidden state" in d.config.assumptions["use_aux_hidden_state"]
    tokens = torch.arange(3, 3 + N_CTX)
    with torch.no_grad():
        final = target.model(input_ids=tokens[None], output_hidden_states=True).hidden_states[-1][0]
    target.reset()
    torch.testing.assert_close(target.forward(tokens).features, final, atol=1e-6, rtol=0)
    rc = case.ref_config()
    w = dict(w, fc=torch.eye(case.hidden))  # the reference's fc as the identity: features pass through
    fed = [5, 6, 7]
    ref = chain(w, dataclasses.replace(rc, num_aux=1), tokens[1:].tolist() + [9], final, fed, DEPTH)
    cache = d.new_cache()
    with torch.no_grad():
        step = d(torch.tensor([tokens[1:].tolist() + [9]]), final[None], torch.arange(N_CTX)[None], cache, True)
    torch.testing.assert_close(step.logits[0], ref[0].logits, atol=1e-5, rtol=0)
    for mode in ("generate", "teacher-forced"):
        assert drifttool.speculate(target, d, tokens[:5].tolist(), depth=3, max_new_tokens=6, mode=mode).rounds
    with pytest.raises(drifttool.DriftError, match="use_aux_hidden_state"):
        drifttool.save_drafter(d, tmp_path / "out")


def test_head_without_aux_features_captures(tmp_path):
    from drifttool.run.engines.hf import DrafterSpec, run_capture

    case = Case("no-aux-cap", "nvidia", kv_heads=2, aux=[1, 4, 6], seed=46)
    target = _target(case)
    path = write(case, case.weights(target.input_embeddings()), tmp_path / "d")
    _edit(path, lambda c: c.update(eagle_config={"use_aux_hidden_state": False}), lambda sd: sd.pop("fc.weight"))
    probes = tmp_path / "p.jsonl"
    probes.write_text(json.dumps({"id": "a", "token_ids": list(range(3, 12))}) + "\n")
    tr = drifttool.load(run_capture(target, [DrafterSpec.parse(str(path))], str(probes), str(tmp_path / "x.drift"),
                                    depth=3, max_new_tokens=6, progress=False))
    assert len(tr.depths) and tr.manifest["drafters"][0]["aux_layer_ids_read"] == [-1] and len(tr.aux) == 0
