"""Aux layer ids: vLLM's reading by default (id i = the input of layer i = HF hidden_states[i]; id L = the last
layer's output before the final norm), recorded; `aux_convention=output` (ModelOpt / SpecForge hooks, SGLang's
explicit ids) and `aux_ids=...` overrides; and norm_before_residual read as vLLM reads each layout."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

import drifttool
from drifttool.model.tiny import tiny_target
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import chain

L = 8
CASE = Case("speculators-aux-L", "speculators", kv_heads=2, aux=[1, 4, L], target_layers=L, seed=21)


def _target():
    return tiny_target(vocab=CASE.vocab, hidden=CASE.target_hidden, layers=L, heads=4, kv_heads=2, seed=321)


def _residual_stream(target, tokens) -> list[torch.Tensor]:
    """Inputs of layers 0..L-1 and the last layer's output, from a copy of the HF model whose final norm is
    replaced by the identity (so HF's hidden_states[L] is the un-normalised output)."""
    m = copy.deepcopy(target.model)
    m.model.norm = torch.nn.Identity()
    with torch.no_grad():
        return [h[0] for h in m(input_ids=tokens[None], output_hidden_states=True).hidden_states]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    target = _target()
    w = CASE.weights(target.input_embeddings())
    return target, w, write(CASE, w, tmp_path_factory.mktemp("aux") / "d")


def test_id_L_is_the_last_layers_output_before_the_final_norm(folder):
    target, w, path = folder
    d = drifttool.load_drafter(path, target=target)
    assert d.config.aux_layer_ids == [1, 4, L] and d.config.aux_convention == "input"
    tokens = torch.randint(0, CASE.vocab, (7,), generator=torch.Generator().manual_seed(1))
    hs = _residual_stream(target, tokens)
    target.reset()
    feats = target.forward(tokens).features
    torch.testing.assert_close(feats, torch.cat([hs[1], hs[4], hs[L]], -1), atol=1e-6, rtol=0)
    # and the drafter on those features is the reference drafter
    ref = chain(w, CASE.ref_config(), tokens[1:].tolist() + [3], feats, [5, 6], 3)
    cache = d.new_cache()
    with torch.no_grad():
        got = d(torch.tensor([tokens[1:].tolist() + [3]]), feats[None], torch.arange(7)[None], cache, True)
    torch.testing.assert_close(got.logits[0], ref[0].logits, atol=1e-5, rtol=0)


def test_output_convention_override_shifts_ids_and_is_recorded(folder, tmp_path):
    target, _, path = folder
    conf = json.loads((path / "config.json").read_text())
    conf["eagle_aux_hidden_state_layer_ids"] = [0, 3, L - 1]  # as a layer-output hook names the same layers
    out = tmp_path / "o"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(conf))
    (out / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    d = drifttool.load_drafter(out, target=target, overrides={"aux_convention": "output"})
    assert d.config.input_aux_layer_ids == [1, 4, L] and target.aux_layer_ids == [1, 4, L]
    assert d.config.overrides["aux_convention"] == {"checkpoint": "input", "override": "output"}
    tokens = torch.arange(3, 10)
    hs = _residual_stream(target, tokens)
    target.reset()
    torch.testing.assert_close(target.forward(tokens).features, torch.cat([hs[1], hs[4], hs[L]], -1),
                               atol=1e-6, rtol=0)
    from drifttool.run.engines.hf import drafter_identity

    ident = drafter_identity("d", d)
    assert ident["aux_convention"] == "output" and ident["aux_layer_ids_read"] == [1, 4, L]
    # saved for vLLM: ids written in its (input) convention, so vLLM and a reload read the same layers
    again = drifttool.load_drafter(drifttool.save_drafter(d, tmp_path / "saved"), target=target)
    assert again.config.aux_layer_ids == [1, 4, L] and again.config.aux_convention == "input"


def test_aux_ids_override_and_errors(folder):
    target, _, path = folder
    d = drifttool.load_drafter(path, target=target, overrides={"aux_ids": "2,5,7"})
    assert d.config.aux_layer_ids == [2, 5, 7] and target.aux_layer_ids == [2, 5, 7]
    with pytest.raises(drifttool.DriftError, match=r"layer id 9 .* \(0\.\.8; 8 = the last layer's output\)"):
        drifttool.load_drafter(path, target=target, overrides={"aux_ids": "1,4,9"})
    with pytest.raises(drifttool.DriftError, match="aux_convention=outputs: expected input or output"):
        drifttool.load_drafter(path, target=target, overrides={"aux_convention": "outputs"})
    with pytest.raises(drifttool.DriftError, match="aux_ids=a,b"):
        drifttool.load_drafter(path, target=target, overrides={"aux_ids": "a,b"})
    with pytest.raises(drifttool.DriftError, match="fc.weight"):  # two ids for a three-chunk fc
        drifttool.load_drafter(path, target=target, overrides={"aux_ids": "1,2"})


@pytest.mark.parametrize("layout,want", [("speculators", True), ("safeailab", False), ("specforge", False)])
def test_norm_before_residual_absent_is_read_as_vllm_reads_it(tmp_path, layout, want):
    case = dataclasses.replace(CASE, layout=layout, aux=None if layout == "safeailab" else [1, 4, 6])
    target = _target()
    path = write(case, case.weights(target.input_embeddings()), tmp_path / layout)
    conf = json.loads((path / "config.json").read_text())
    conf.pop("norm_before_residual", None)
    (path / "config.json").write_text(json.dumps(conf))
    d = drifttool.load_drafter(path, target=target)
    assert d.config.norm_before_residual is want
    assert d.config.assumptions["norm_before_residual"] == f"absent: {str(want).lower()} (as vLLM reads a {layout} config)"


def test_speculators_flags_inside_the_layer_config_are_ignored_as_vllm_ignores_them(folder, tmp_path):
    target, _, path = folder
    conf = json.loads((path / "config.json").read_text())
    conf["transformer_layer_config"]["norm_output"] = True  # vLLM reads the flags from the top level only
    out = tmp_path / "x"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(conf))
    (out / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    d = drifttool.load_drafter(out, target=target)
    assert d.config.norm_output is False and "ignored" in d.config.assumptions["norm_output"]
