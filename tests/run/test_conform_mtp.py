"""`drifttool conform` on MTP heads (target folders with MTP layers, tests/support/mtp_fixtures.py): where engines
read a family differently (DeepSeek-V3's fed-back state in vLLM 0.32.0; an MTP layer's own embeddings) is a
static warning naming each engine's reading; on the hf engine a planted misread of the fed-back state is found per
depth and named by the diagnosis (CLI exit 1), and the head as declared is conformant (exit 0)."""

from __future__ import annotations

import json

import pytest

from drifttool.cli import main
from drifttool.run.conform import conform
from drifttool.run.conform_mtp import HF, VLLM_032
from tests.support import mtp_fixtures as fx
from tests.support.capture import write_probes

PROMPTS = [[5, 9, 14, 3, 22, 7, 30, 11], [2, 17, 8, 25, 13, 4, 19, 6, 28]]


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    root = tmp_path_factory.mktemp("mtpconf")
    folder = fx.write_target(root / "glm", fx.GLM, own_embed=False, own_head=False)
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": p, "max_new_tokens": 16}
                                             for i, p in enumerate(PROMPTS)])
    return root, folder, probes


def test_glm_head_as_declared_is_conformant_and_a_planted_feedback_misread_is_named(glm, capsys):
    root, folder, probes = glm
    ok = conform(str(folder), str(folder), str(probes), depth=4)
    assert ok.declared["layout"].startswith("MTP head (glm4_moe_mtp)")
    assert [(f.severity, f.code) for f in ok.findings] == [("info", "mtp_layer_reused")]  # depth 4 > 1 layer
    assert ok.divergence["agreement"] == 1.0 and ok.conformant
    # the engine feeds the post-norm state back (the EAGLE-3.1 reading), the checkpoint's family the block output
    bad = conform(str(folder), str(folder), str(probes), depth=4, engine_overrides={"norm_output": "true"})
    assert bad.per_depth[0]["agreement"] == 1.0  # depth 1 reads the target's hidden state: unaffected
    assert bad.divergence["agreement"] < 0.98 and not bad.conformant
    assert bad.diagnosis["verdict"].startswith("the engine ran this MTP head with post-norm hidden fed back")
    assert bad.diagnosis["best"]["agreement"] == 1.0
    base = ["conform", str(folder), "--target", str(folder), "--probes", str(probes), "--depth", "4"]
    capsys.readouterr()
    assert main([*base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conformant"]
    assert main([*base, "--engine-override", "norm_output=true"]) == 1
    out = capsys.readouterr().out
    assert "declared: layout MTP head (glm4_moe_mtp)" in out and "diagnosis: the engine ran this MTP head" in out


def test_deepseek_feedback_reading_differs_between_engines(tmp_path):
    folder = fx.write_target(tmp_path / "ds", fx.DEEPSEEK)
    probes = write_probes(tmp_path / "p.jsonl", [{"id": "a", "token_ids": PROMPTS[0], "max_new_tokens": 8}])
    rep = conform(str(folder), str(folder), str(probes), depth=3, run_diagnosis=False)
    f = {x.code: x for x in rep.findings}
    assert f["mtp_feedback_differs"].severity == "warning"
    assert "before shared_head.norm" in f["mtp_feedback_differs"].engines[HF]
    assert "post-norm" in f["mtp_feedback_differs"].engines[VLLM_032]
    assert f["mtp_layer_reused"].severity == "info"  # depth 3 > its one trained layer
    assert rep.divergence["agreement"] == 1.0 and not rep.conformant  # the hf engine agrees; the warning stands


def test_own_embeddings_that_differ_from_the_targets_are_a_warning(tmp_path):
    folder = fx.write_target(tmp_path / "glm", fx.GLM)  # the MTP layer with its own embed_tokens and head
    probes = write_probes(tmp_path / "p.jsonl", [{"id": "a", "token_ids": PROMPTS[1], "max_new_tokens": 8}])
    rep = conform(str(folder), str(folder), str(probes), depth=2, run_diagnosis=False)
    f = {x.code: x for x in rep.findings}
    assert "embed_tokens and lm_head" in f["mtp_own_embeddings"].message
    assert "_maybe_share_embeddings" in f["mtp_own_embeddings"].engines[VLLM_032]
