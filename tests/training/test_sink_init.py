"""Sink-initialised drafters (training/sink_init.py): at depth 1 the drafter's attention is exactly the target
layer's (the sink included) and EAGLE-3's output is that layer's output, on a tiny Llama of the drafter's shape;
bad input (a layer outside the target, a layer whose input the drafter does not read, a seed that never trained) is
one line and exit 2 before anything is read."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch

from drifttool.model.tiny import tiny_target
from tests.support.capture import REPO, child_env
from training.drafters import DrafterShape, variant_drafters
from training.sink_init import SinkInitError, check_sink_layer, init_from_sink_layer

H, HEADS, KV, LAYERS = 64, 4, 2, 4


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    t = tiny_target(vocab=64, hidden=H, layers=LAYERS, heads=HEADS, kv_heads=KV)
    root = tmp_path_factory.mktemp("sinkinit") / "target"
    t.model.save_pretrained(root)
    return t, root


def _pair(t, layer_ids):
    shape = DrafterShape(hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=H // HEADS,
                         intermediate_size=2 * H, draft_vocab_size=32, aux_layer_ids=layer_ids)
    cfg = t.model.config
    theta = float((getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", 1e4)))
    return variant_drafters(lambda v: shape.config(v, vocab_size=cfg.vocab_size, target_hidden_size=H,
                                                   rms_norm_eps=cfg.rms_norm_eps, rope_theta=theta,
                                                   max_position_embeddings=cfg.max_position_embeddings),
                            ("eagle3", "eagle3.1"), 0, t.input_embeddings(), torch.zeros(32, dtype=torch.long))


def test_depth1_attention_is_the_target_layers(target):
    t, root = target
    layer = 2
    models = _pair(t, [1, layer, 3])
    done = init_from_sink_layer(models, root, layer)
    assert done["aux_slot"] == 1
    ids = torch.randint(3, 64, (1, 30), generator=torch.Generator().manual_seed(0))
    out = t.model(ids, output_hidden_states=True, output_attentions=True)
    hs, want = out.hidden_states, out.attentions[layer][0]  # [heads, T, T]
    feats = torch.cat([hs[1], hs[layer], hs[3]], -1)
    for v, m in models.items():
        m.set_attn_impl("eager")
        probs = []
        h = m.layer.self_attn.hook_probs.register_forward_hook(lambda _m, _i, o, got=probs: got.append(o[0]))
        try:
            st = m(ids, feats, torch.arange(30)[None], m.new_cache(), True)
        finally:
            h.remove()
        torch.testing.assert_close(probs[0], want, atol=5e-5, rtol=0)  # fp32, two attention codes
        if v == "eagle3":  # the residual stream is layer 2's: the drafter's pre-norm output is layer 3's input
            torch.testing.assert_close(st.pre, hs[layer + 1], atol=1e-5, rtol=1e-5)


def test_a_target_without_weights_is_one_line(target, tmp_path):
    t, _ = target
    (tmp_path / "config.json").write_text((target[1] / "config.json").read_text())
    with pytest.raises(SinkInitError, match="model.safetensors missing"):
        init_from_sink_layer(_pair(t, [1, 2, 3]), tmp_path, 2)


def test_bad_sink_layers_are_one_line():
    with pytest.raises(SinkInitError, match=r"--sink-layer 30: the target has layers 0..29"):
        check_sink_layer(30, 30, [2, 15, 27])
    with pytest.raises(SinkInitError, match=r"--sink-layer 20: the drafter reads the inputs of layers \[2, 15, 27\]"):
        check_sink_layer(20, 30, [2, 15, 27])
    assert check_sink_layer(27, 30, [2, 15, 27]) == 2


@pytest.mark.skipif(not (os.path.expanduser("~") and (REPO / ".venv").exists()), reason="needs the project venv")
def test_train_real_refuses_a_bad_sink_layer_before_reading_features(tmp_path):
    r = subprocess.run([str(REPO / ".venv/bin/python"), "-m", "training.train_real", "--sink-layer", "99",
                        "--features", str(tmp_path / "none"), "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o")],
                       cwd=REPO, capture_output=True, text=True, env=child_env(), timeout=1800)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("training.train_real: --sink-layer 99") and "Traceback" not in r.stderr
    assert not (tmp_path / "w").exists()


def test_capture_sink_panel_refuses_a_seed_that_never_trained(tmp_path):
    r = subprocess.run(["bash", str(REPO / "scripts/capture_sink_panel.sh")], cwd=REPO, capture_output=True, text=True,
                       env={**child_env(), "SEEDS": "97", "DT": "false"}, timeout=1800)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "capture_sink_panel: seed 97 never trained: no runs/sink/s97/; train it first (SEEDS=\"97\" bash "
        "scripts/train_sink_panel.sh)"]


def test_both_variants_feed_back_a_state_the_layer_knows(target):
    """The init recipe's point (norm at weight 1, the target's final-norm weights folded into lm_head): EAGLE-3.1
    feeds back `post = pre / rms(pre)`, and hidden_norm maps it to what it maps `pre` to, so the depth-2 query
    attends exactly as if the drafter fed back its raw `pre` (EAGLE-3's rule, for which layer L's weights are the
    next layer's input: a state the copied layer knows). What still differs between the variants at init is
    fc_norm's normalised residual, EAGLE-3.1's design. The logits are the target head's on the target-normed state.
    The old recipe (the target's final-norm weights in the output norm) fails the first check."""
    t, root = target
    layer = 2
    models = _pair(t, [1, layer, 3])
    init_from_sink_layer(models, root, layer)
    ids = torch.randint(3, 64, (1, 24), generator=torch.Generator().manual_seed(1))
    out = t.model(ids, output_hidden_states=True)
    hs = out.hidden_states
    feats = torch.cat([hs[1], hs[layer], hs[3]], -1)

    def depth2_rows(m, fed="feedback"):
        m.set_attn_impl("eager")
        cache = m.new_cache()
        st = m(ids, feats, torch.arange(24)[None], cache, True)
        probs = []
        h = m.layer.self_attn.hook_probs.register_forward_hook(lambda _m, _i, o, got=probs: got.append(o[0]))
        try:
            m(ids[:, -1:], getattr(st, fed)[:, -1:], torch.tensor([[24]]), cache, False)
        finally:
            h.remove()
        return st, probs[0]

    s3, _ = depth2_rows(models["eagle3"])
    (_, rows31), (_, rows31_pre) = depth2_rows(models["eagle3.1"]), depth2_rows(models["eagle3.1"], "pre")
    assert torch.equal(models["eagle3.1"].norm.weight, torch.ones(H))
    torch.testing.assert_close(rows31, rows31_pre, atol=1e-6, rtol=0)  # post attends as pre would (fp32, eps only)
    w = t.model.model.norm.weight.float()
    head = t.model.lm_head.weight.float()
    m = models["eagle3"]
    want = torch.nn.functional.rms_norm(s3.pre, (H,), eps=m.config.rms_norm_eps) * w @ head[torch.arange(32)].T
    torch.testing.assert_close(s3.logits, want, atol=1e-4, rtol=1e-4)  # the target's head on the target's norm

    # the old recipe, for contrast: the target's final-norm weights in the output norm change EAGLE-3.1's depth 2
    with torch.no_grad():
        t.model.model.norm.weight.copy_(torch.linspace(-2.0, 3.0, H))
    try:
        t.model.save_pretrained(root)
        models = _pair(t, [1, layer, 3])
        init_from_sink_layer(models, root, layer)
        for mm in models.values():
            with torch.no_grad():  # undo the fold: the old recipe
                mm.norm.weight.copy_(t.model.model.norm.weight)
        (_, o31), (_, o31_pre) = depth2_rows(models["eagle3.1"]), depth2_rows(models["eagle3.1"], "pre")
        assert (o31 - o31_pre).abs().max() > 1e-3
    finally:
        with torch.no_grad():
            t.model.model.norm.weight.fill_(1.0)
        t.model.save_pretrained(root)
