"""A draft-layer sliding window (speculators' `sliding_window` + `layer_types`) is honoured as vLLM applies it:
in the chain (both attention paths), in ttt_forward, in the capture's masses (sink positions outside the window
get zero mass) and in the trace metadata. Fixture: a speculators config shaped as speculators' scripts/train.py
writes it (transformer_layer_config from LlamaConfig(sliding_window=..., use_sliding_window=True,
layer_types=["sliding_attention"]), top-level norm_before_fc / norm_output true: its EAGLE-3 defaults), sizes
shrunk, random weights under the public key names (tests/support/ckpt_writer.py)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import drifttool
from drifttool.model.tiny import tiny_target
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.run.hooks import Capture
from drifttool.run.loop import speculate
from drifttool.trace.sinks import SinkSpec
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import chain

W = 4
N_CTX, DEPTH = 9, 5
SPEC_LAYER = {"sliding_window": W, "use_sliding_window": True, "layer_types": ["sliding_attention"],
              "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02}
CASE = Case("speculators-swa", "speculators", kv_heads=2, aux=[1, 4, 6], window=W, layer_extra=SPEC_LAYER,
            flags={"norm_before_fc": True, "norm_output": True}, seed=11,
            top_extra={"speculators_version": "0.4.0", "embed_requires_grad": False})


def _target(case: Case):
    return tiny_target(vocab=case.vocab, hidden=case.target_hidden, layers=case.target_layers, heads=4,
                       kv_heads=2, seed=200 + case.seed)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    target = _target(CASE)
    w = CASE.weights(target.input_embeddings())
    path = write(CASE, w, tmp_path_factory.mktemp("swa") / "drafter")
    return target, w, path, drifttool.load_drafter(path, target=target)


def _features(target, tokens):
    with torch.no_grad():
        hs = target.model(input_ids=tokens[None], output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in CASE.aux_ids()], dim=-1).float()


def _chain(drafter, ctx_ids, feats, fed):
    cache = drafter.new_cache(capacity=4)
    n = len(ctx_ids)
    steps = [drafter(torch.tensor([ctx_ids]), feats[None], torch.arange(n)[None], cache, hidden_is_feature=True)]
    for k in range(2, DEPTH + 1):
        steps.append(drafter(torch.tensor([[fed[k - 2]]]), steps[-1].feedback[:, -1:], torch.tensor([[n + k - 2]]),
                             cache, hidden_is_feature=False))
    return steps


def test_config_reads_the_window_and_labels_eagle31(loaded):
    _, _, path, d = loaded
    raw = json.loads((path / "config.json").read_text())
    assert raw["transformer_layer_config"]["layer_types"] == ["sliding_attention"]
    assert d.config.sliding_window == W
    assert d.config.variant == "eagle3.1"  # speculators' default: norm_before_fc + norm_output


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_windowed_chain_matches_reference(loaded, attn_impl):
    target, w, _, d = loaded
    d.set_attn_impl(attn_impl)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, CASE.vocab, (N_CTX + 1,), generator=g)
    fed = torch.randint(0, CASE.vocab, (DEPTH,), generator=g).tolist()
    feats = _features(target, tokens[:N_CTX])
    rc = CASE.ref_config()
    ref = chain(w, rc, tokens[1:].tolist(), feats, fed, DEPTH)
    full = chain(w, dataclasses.replace(rc, sliding_window=None), tokens[1:].tolist(), feats, fed, DEPTH)
    with torch.no_grad():
        got = _chain(d, tokens[1:].tolist(), feats, fed)
    d.set_attn_impl("sdpa")
    torch.testing.assert_close(got[0].logits[0], ref[0].logits, atol=1e-5, rtol=0)
    for k in range(DEPTH):
        torch.testing.assert_close(got[k].logits[0, -1], ref[k].logits[-1], atol=1e-5, rtol=0)
        torch.testing.assert_close(got[k].feedback[0, -1], ref[k].fed[-1], atol=1e-5, rtol=1e-5)
    # the window bites: the full-context drafter computes something else
    assert (ref[-1].logits[-1] - full[-1].logits[-1]).abs().max() > 1e-2


def test_ttt_forward_equals_windowed_chain(loaded):
    target, w, _, d = loaded
    t_len, steps = 8, 3
    tokens = torch.randint(0, CASE.vocab, (t_len + 1,), generator=torch.Generator().manual_seed(5))
    feats = _features(target, tokens[:t_len])
    ids = tokens[1:]
    with torch.no_grad():
        outs = d.ttt_forward(ids[None], feats[None], steps)
    rc = CASE.ref_config()
    for t in range(t_len):
        depth = min(steps, t_len - t)
        ref = chain(w, rc, ids[: t + 1].tolist(), feats[: t + 1], ids[t + 1 : t + depth].tolist(), depth)
        for k in range(depth):
            torch.testing.assert_close(outs[k].logits[0, t], ref[k].logits[-1], atol=1e-5, rtol=0)


def test_capture_masses_are_over_the_window(loaded):
    """Capture's rows equal the eager probabilities of the windowed drafter (reference masked softmax), the
    first 4 positions (the default sinks) get zero mass once they fall out of the window."""
    target, _, _, d = loaded
    rows = []
    h = d.layer.self_attn.hook_probs.register_forward_hook(lambda _m, _i, out: rows.append(out[0, :, -1].clone()))
    d.set_attn_impl("eager")
    try:
        with Capture(d, sink=SinkSpec.parse("4"), keep_qk=True) as cap:
            res = speculate(target, d, list(range(3, 3 + N_CTX)), depth=DEPTH, max_new_tokens=10, observers=[cap])
    finally:
        h.remove()
        d.set_attn_impl("sdpa")
    per_round = DEPTH  # one forward per depth (the refresh's last row is depth 1)
    assert len(rows) == per_round * len(res.rounds)
    for r, rc in enumerate(cap.rounds):
        n = rc.context_len
        for j in range(DEPTH):
            eager = rows[r * per_round + j]  # [nh, L]
            mine = torch.from_numpy(cap.attention(r, j + 1, head=None))
            torch.testing.assert_close(mine, eager.mean(0)[: n + j].float(), atol=1e-5, rtol=0)
            lo = max(0, n + j - W)
            assert float(eager[:, :lo].abs().max() if lo else 0.0) == 0.0
            if lo >= 4:
                assert np.all(rc.field("sink_mass")[j] == 0.0)  # sink mass
            np.testing.assert_allclose(rc.field("sink_mass")[j], eager[:, :4].sum(-1).numpy(), atol=1e-5)
            assert np.isfinite(rc.field("entropy")[j]).all()  # entropy over the visible slots


@pytest.mark.parametrize("mode", ["generate", "teacher-forced"])
def test_trace_records_the_window(loaded, tmp_path, mode):
    target, _, path, _ = loaded
    probes = tmp_path / "p.jsonl"
    probes.write_text(json.dumps({"id": "a", "token_ids": list(range(3, 3 + N_CTX))}) + "\n")
    out = run_capture(target, [DrafterSpec.parse(f"swa={path}")], str(probes), str(tmp_path / "x.drift"),
                      depth=DEPTH, mode=mode, max_new_tokens=8, progress=False)
    tr = drifttool.load(out)
    dm = tr.manifest["drafters"][0]
    assert dm["sliding_window"] == W and dm["variant"] == "eagle3.1"
    assert "zero mass" in tr.manifest["capture"]["attention_window"]
    dep = tr.depths
    assert (dep.attn_window_start == np.maximum(dep.position - W + 1, 0)).all()
    assert (dep[dep.attn_window_start >= 4].sink_mass == 0).all()


@pytest.mark.parametrize("layer_types,size,want,note", [
    (["full_attention"], 8, None, "full attention"),
    (None, 8, None, "without layer_types"),
    (["sliding_attention"], 0, None, "unset"),
    (["sliding_attention"], None, None, "unset"),
])
def test_window_resolution_follows_vllm(tmp_path, layer_types, size, want, note):
    layer = {k: v for k, v in {"sliding_window": size, "layer_types": layer_types}.items()}
    case = dataclasses.replace(CASE, layer_extra=layer)
    target = _target(case)
    path = write(case, case.weights(target.input_embeddings()), tmp_path / "d")
    d = drifttool.load_drafter(path, target=target)
    assert d.config.sliding_window is want
    assert note in d.config.assumptions["sliding_window"]


def test_window_override_and_bad_value(loaded, tmp_path):
    target, _, path, _ = loaded
    d = drifttool.load_drafter(path, target=target, overrides={"sliding_window": "none"})
    assert d.config.sliding_window is None and d.config.overrides["sliding_window"]["checkpoint"] == W
    assert drifttool.load_drafter(path, target=target, overrides={"sliding_window": "2"}).config.sliding_window == 2
    bad = json.loads((path / "config.json").read_text())
    bad["transformer_layer_config"]["sliding_window"] = "big"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps(bad))
    (tmp_path / "b" / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    with pytest.raises(drifttool.DriftError, match="sliding_window 'big'"):
        drifttool.load_drafter(tmp_path / "b", target=target)
