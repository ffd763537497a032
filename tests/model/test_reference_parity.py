"""drifttool's drafter, loaded from every real checkpoint layout, equals an independent reference
(tests/support/reference_eagle3.py) at every depth of the chain; ttt_forward equals the chain (docs/eagle3.md §5
masking); save_drafter round-trips."""

from __future__ import annotations

import pytest
import torch

import drifttool
from drifttool.model.tiny import tiny_target
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import chain, draft_to_target

ATOL = 1e-5
DEPTH = 5
N_CTX = 6

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}

CASES = [
    # speculators / vLLM: layers.0.* + embed_tokens, GQA, draft vocab < target vocab (d2t), explicit rope_theta.
    Case("speculators-eagle3-gqa-d2t", "speculators", kv_heads=2, draft_vocab=40, theta=500000.0,
         aux=[1, 3, 6], seed=1),
    # EAGLE-3.1 with norm_before_residual, MQA, head_dim != H/nh, Ht != H, transformers-v5 rope_parameters llama3.
    Case("speculators-eagle3.1-nbr-v5llama3", "speculators", kv_heads=1, head_dim=16, target_hidden=48,
         rope="parameters", rope_scaling=LLAMA3, aux=[0, 5, 7],
         flags={"fc_norm": True, "norm_output": True, "norm_before_residual": True}, seed=2),
    # speculators without d2t/t2d (full draft vocab), linear rope scaling, norm_before_fc.
    Case("speculators-nbf-linear-nod2t", "speculators", kv_heads=4, rope="scaling",
         rope_scaling={"rope_type": "linear", "factor": 2.0}, aux=[2, 3, 4], write_d2t=False,
         flags={"norm_before_fc": True}, seed=3),
    # SafeAILab: midlayer.*, no embed_tokens (target's), no rope_theta, default aux layers.
    Case("safeailab-eagle3", "safeailab", kv_heads=4, draft_vocab=48, rope="absent", seed=4),
    # SpecForge EAGLE-3.1: midlayer.* + fc_norm.{i}, v4 rope_theta + rope_scaling llama3.
    Case("specforge-eagle3.1-llama3", "specforge", kv_heads=2, draft_vocab=50, rope="scaling",
         rope_scaling=LLAMA3, flags={"fc_norm": True, "norm_output": True}, seed=5),
    # NVIDIA: eagle_config {use_aux_hidden_state, eagle_aux_hidden_state_layer_ids, norm_before_fc} + input_norm.
    Case("nvidia-norm_before_fc", "nvidia", kv_heads=2, draft_vocab=40, rope="parameters", theta=20000.0,
         aux=[1, 4, 6], flags={"norm_before_fc": True}, seed=6),
]


def _target(case: Case):
    return tiny_target(vocab=case.vocab, hidden=case.target_hidden, layers=case.target_layers, heads=4,
                       kv_heads=2, seed=100 + case.seed)


def _setup(case: Case, tmp_path, **load_kw):
    target = _target(case)
    w = case.weights(target.input_embeddings())
    path = write(case, w, tmp_path / case.name)
    drafter = drifttool.load_drafter(path, target=target, **load_kw)
    return target, w, drafter, path


def _features(target, case: Case, tokens: torch.Tensor) -> torch.Tensor:
    """docs/eagle3.md §1 independently: HF hidden_states[idx] (input of layer idx), concatenated low -> high."""
    with torch.no_grad():
        hs = target.model(input_ids=tokens[None], output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in case.aux_ids()], dim=-1).float()


def _drifttool_chain(drafter, ctx_ids, feats, fed_ids, depth):
    cache = drafter.new_cache(capacity=4)  # small on purpose: exercises cache growth
    n = len(ctx_ids)
    steps = [drafter(torch.tensor([ctx_ids]), feats[None], torch.arange(n)[None], cache, hidden_is_feature=True)]
    for k in range(2, depth + 1):
        prev = steps[-1]
        steps.append(drafter(torch.tensor([[fed_ids[k - 2]]]), prev.feedback[:, -1:],
                             torch.tensor([[n - 1 + (k - 1)]]), cache, hidden_is_feature=False))
    return steps


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_chain_matches_reference(case, attn_impl, tmp_path):
    target, w, drafter, _ = _setup(case, tmp_path)
    cfg = drafter.config
    assert cfg.layout == case.layout
    assert cfg.aux_layer_ids == case.aux_ids()
    assert target.aux_layer_ids == case.aux_ids()
    for name in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual"):
        assert getattr(cfg, name) == case.flags.get(name, False), name
    assert cfg.has_embed == (case.layout == "speculators" and case.embed)
    drafter.set_attn_impl(attn_impl)

    g = torch.Generator().manual_seed(case.seed)
    tokens = torch.randint(0, case.vocab, (N_CTX + 1,), generator=g)
    fed_ids = torch.randint(0, case.vocab, (DEPTH,), generator=g).tolist()
    feats = _features(target, case, tokens[:N_CTX])
    # the Target wrapper's features are docs/eagle3.md §1's
    target.reset()
    torch.testing.assert_close(target.forward(tokens[:N_CTX]).features.float(), feats, atol=1e-6, rtol=0)

    ctx_ids = tokens[1:].tolist()
    ref = chain(w, case.ref_config(), ctx_ids, feats, fed_ids, DEPTH)
    got = _drifttool_chain(drafter, ctx_ids, feats, fed_ids, DEPTH)
    with torch.no_grad():
        # prefill: every context slot
        torch.testing.assert_close(got[0].logits[0], ref[0].logits, atol=ATOL, rtol=0)
        for k in range(DEPTH):
            torch.testing.assert_close(got[k].logits[0, -1], ref[k].logits[-1], atol=ATOL, rtol=0,
                                       msg=lambda m, k=k: f"depth {k + 1}: {m}")
            torch.testing.assert_close(got[k].feedback[0, -1], ref[k].fed[-1], atol=ATOL, rtol=1e-5)
            top = got[k].logits[0, -1].argmax()
            assert drafter.draft_to_target(top) == draft_to_target(w, ref[k].logits[-1].argmax())


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[4]], ids=lambda c: c.name)
def test_ttt_forward_equals_chain(case, tmp_path):
    """Step k at slot t of ttt_forward == the chain that prefilled slots 0..t and fed back k times with
    the shifted ids: proves the docs/eagle3.md §5 mask (causal step-0 keys + same-slot keys of steps 1..k)."""
    target, w, drafter, _ = _setup(case, tmp_path)
    t_len, steps, batch = 7, 3, 2
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, case.vocab, (batch, t_len + 1), generator=g)
    feats = torch.stack([_features(target, case, tokens[b, :t_len]) for b in range(batch)])
    ids = tokens[:, 1:]
    with torch.no_grad():
        outs = drafter.ttt_forward(ids, feats, steps)
    assert len(outs) == steps
    rc = case.ref_config()
    checked = 0
    for b in range(batch):
        for t in range(t_len):
            depth = min(steps, t_len - t)  # step k needs the id at slot t + k
            ref = chain(w, rc, ids[b, : t + 1].tolist(), feats[b, : t + 1], ids[b, t + 1 : t + depth].tolist(), depth)
            for k in range(depth):
                torch.testing.assert_close(outs[k].logits[b, t], ref[k].logits[-1], atol=ATOL, rtol=0,
                                           msg=lambda m, k=k, t=t: f"step {k} slot {t}: {m}")
                torch.testing.assert_close(outs[k].feedback[b, t], ref[k].fed[-1], atol=ATOL, rtol=1e-5)
                checked += 1
    assert checked == batch * sum(min(steps, t_len - t) for t in range(t_len))


def _chain_logits(drafter, target, case, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, case.vocab, (N_CTX + 1,), generator=g)
    fed = torch.randint(0, case.vocab, (DEPTH,), generator=g).tolist()
    feats = _features(target, case, tokens[:N_CTX])
    with torch.no_grad():
        return torch.stack([s.logits[0, -1] for s in _drifttool_chain(drafter, tokens[1:].tolist(), feats, fed, DEPTH)])


@pytest.mark.parametrize(
    "case,layout",
    [(CASES[3], "speculators"), (CASES[3], "safeailab"), (CASES[3], "specforge"),
     (CASES[5], "safeailab"), (CASES[5], "speculators"),
     (CASES[4], "specforge"), (CASES[4], "speculators"), (CASES[1], "speculators"), (CASES[1], "specforge")],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_save_drafter_round_trip(case, layout, tmp_path):
    target, _, drafter, _ = _setup(case, tmp_path)
    out = drifttool.save_drafter(drafter, tmp_path / f"saved-{layout}", layout=layout)
    again = drifttool.load_drafter(out, target=target)
    assert again.config.layout == layout
    assert again.config.flags() == drafter.config.flags()
    assert again.config.aux_layer_ids == drafter.config.aux_layer_ids
    for f in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "draft_vocab_size",
              "target_hidden_size", "rope_theta", "rope_scaling"):
        assert getattr(again.config, f) == getattr(drafter.config, f), f
    a, b = drafter.state_dict(), again.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    torch.testing.assert_close(_chain_logits(again, target, case), _chain_logits(drafter, target, case), atol=0, rtol=0)


def test_save_safeailab_refuses_eagle31(tmp_path):
    case = CASES[4]
    _, _, drafter, _ = _setup(case, tmp_path)
    with pytest.raises(drifttool.DriftError, match="safeailab"):
        drifttool.save_drafter(drafter, tmp_path / "x", layout="safeailab")


def test_assumptions_recorded(tmp_path):
    _, _, d, _ = _setup(CASES[3], tmp_path)  # SafeAILab: no rope_theta, no aux ids, no flags
    a = d.config.assumptions
    assert "absent" in a["rope"] and d.config.rope_theta == 10000.0
    assert "[2, 4, 5]" in a["aux_layer_ids"]
    assert "norm_before_residual" in a and "vLLM" in a["norm_before_residual"]
