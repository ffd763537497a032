"""The zoo trainers' shared scaffolding: schedule endpoints, atomic checkpoints, the wall-clock budget, and the
variant pair's shared initial weights."""

from __future__ import annotations

import math

import pytest
import torch

from training.ckpt import load_ckpt, save_ckpt
from training.drafters import VARIANTS, DrafterShape, variant_drafters
from training.schedule import Budget, adamw, warmup_cosine


def test_warmup_cosine_endpoints():
    assert warmup_cosine(1.0, 0.1, 0, 4, 0.0) == pytest.approx(0.25)
    assert warmup_cosine(1.0, 0.1, 3, 4, 0.0) == pytest.approx(1.0)
    assert warmup_cosine(1.0, 0.1, 4, 4, 0.5) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 2)))
    assert warmup_cosine(1.0, 0.1, 9, 4, 1.0) == pytest.approx(0.1)


def test_checkpoint_round_trip_replaces_the_previous(tmp_path):
    m = torch.nn.Linear(3, 2)
    opt = adamw(m.parameters(), 1e-2, (0.9, 0.95), 0.0)
    m(torch.ones(1, 3)).sum().backward()
    opt.step()
    ck = tmp_path / "ckpt"
    save_ckpt(ck, {"m.safetensors": m}, {"o.pt": opt}, {"step": 1})
    save_ckpt(ck, {"m.safetensors": m}, {"o.pt": opt}, {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no .tmp / .old left behind
    m2 = torch.nn.Linear(3, 2)
    opt2 = adamw(m2.parameters(), 1e-2, (0.9, 0.95), 0.0)
    assert load_ckpt(ck, {"m.safetensors": m2}, {"o.pt": opt2}) == {"step": 2}
    torch.testing.assert_close(m2.weight, m.weight, atol=0, rtol=0)
    torch.testing.assert_close(
        opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )
    assert load_ckpt(tmp_path / "none", {}, {}) is None


def test_budget_carries_elapsed_and_saves_when_due():
    saves = []
    clock = {"A": 100.0}
    b = Budget(clock, "A", 0.0, lambda: saves.append(dict(clock)))
    run = b.tick()
    assert clock["A"] == pytest.approx(100.0 + run) and clock["A"] >= 100.0
    b.checkpoint_if_due()
    assert len(saves) == 1
    never = Budget(clock, "A", 60.0, lambda: saves.append(None))
    never.checkpoint_if_due()
    assert len(saves) == 1


def test_variant_pair_shares_initial_weights():
    shape = DrafterShape(
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        intermediate_size=24,
        draft_vocab_size=10,
        aux_layer_ids=[0, 1],
    )

    def cfg(v):
        return shape.config(
            v,
            vocab_size=30,
            target_hidden_size=12,
            rms_norm_eps=1e-5,
            rope_theta=1e4,
            max_position_embeddings=64,
        )

    embed, d2t = torch.randn(30, 16), torch.arange(10)
    pair = variant_drafters(cfg, VARIANTS, 3, embed, d2t)
    a, b = pair["eagle3"].state_dict(), pair["eagle3.1"].state_dict()
    assert set(b) - set(a) == {"fc_norm.0.weight", "fc_norm.1.weight"}
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=k)
    assert not pair["eagle3.1"].embed_tokens.weight.requires_grad and (b["fc_norm.0.weight"] == 1).all()
    # the single-change ablations start from the same weights too (the 2x2: only the two flags differ)
    assert set(pair["fc_norm-only"].state_dict()) == set(b) and set(pair["norm_output-only"].state_dict()) == set(a)
    for v in ("fc_norm-only", "norm_output-only"):
        sd, c = pair[v].state_dict(), pair[v].config
        assert (c.fc_norm, c.norm_output) == (v == "fc_norm-only", v == "norm_output-only")
        for k in a:
            torch.testing.assert_close(sd[k], a[k], atol=0, rtol=0, msg=f"{v}: {k}")
    again = variant_drafters(cfg, ["eagle3"], 3, embed, d2t)["eagle3"].state_dict()
    torch.testing.assert_close(again["fc.weight"], a["fc.weight"], atol=0, rtol=0)
