"""Smoke run of the whole zoo pipeline at toy sizes: every stage runs, outputs load the way users load them."""

from __future__ import annotations

import json

import torch

from training import build as zbuild
from training import data as zdata
from training.train_drafter import DrafterSpec
from training.train_target import TargetSpec


def test_held_out_modules_never_train():
    held = {p.name for p in zdata.held_out_paths()}
    assert len(held) >= 10
    assert not held & {p.name for p in zdata.training_files(max_bytes=3_000_000)}


def test_zoo_pipeline_smoke(tmp_path):
    torch.set_num_threads(1)
    out, work = tmp_path / "models", tmp_path / "build"
    tspec = TargetSpec(hidden_size=32, num_attention_heads=2, head_dim=16, num_key_value_heads=2, intermediate_size=64)
    dspec = DrafterSpec(hidden_size=32, num_attention_heads=2, head_dim=16, num_key_value_heads=2,
                        intermediate_size=64, draft_vocab_size=256)
    index = zbuild.build(
        out, work, max_bytes=400_000, target_steps=(4, 4), drafter_steps=4,
        target_args={"spec": tspec, "batch_tokens": 1024, "eval_windows": 4},
        drafter_args={"spec": dspec, "batch_tokens": 1024, "eval_windows": 2},
        log=lambda m: None,
    )
    assert set(index["targets"]) == {"plain", "sink"}

    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from drifttool.model.drafter import Eagle3Drafter

    for name in ("plain", "sink"):
        tdir = out / name / "target"
        model = AutoModelForCausalLM.from_pretrained(tdir)
        tok = PreTrainedTokenizerFast.from_pretrained(tdir)
        ids = tok("def f(x):\n    return x\n", return_tensors="pt").input_ids
        assert ids[0, 0].item() == 0  # BOS prepended
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        report = json.loads((tdir / "report.json").read_text())
        assert len(report["attn_pos0_per_layer"]) == tspec.num_hidden_layers and report["heldout_loss"] > 0

        feats = torch.cat([hs[i] for i in (1, 2, 3)], -1)
        for variant in ("eagle3", "eagle3.1"):
            ddir = out / name / variant
            assert "mean_leading_agreements" in json.loads((ddir / "report.json").read_text())
            try:
                from drifttool.model.checkpoint import load_drafter
            except ImportError:
                continue
            drafter = load_drafter(ddir, target=tdir)
            assert isinstance(drafter, Eagle3Drafter)
            assert drafter.config.fc_norm == drafter.config.norm_output == (variant == "eagle3.1")
            steps = drafter.ttt_forward(ids[:, 1:], feats[:, :-1], 2)
            assert steps[1].logits.shape == (1, ids.shape[1] - 1, dspec.draft_vocab_size)
            assert torch.isfinite(steps[1].logits).all()

    # resumable: a second build finds every stage done and returns at once
    again = zbuild.build(out, work, max_bytes=400_000, target_steps=(4, 4), drafter_steps=4,
                         target_args={"spec": tspec}, drafter_args={"spec": dspec}, log=lambda m: None)
    assert again["targets"].keys() == index["targets"].keys()
