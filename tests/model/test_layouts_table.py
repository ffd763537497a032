"""Table-driven checkpoint layouts: every entry round-trips through save/load, expected shapes are the module's
own, and the shape-only loader leaves the target alone (the caller points it at the aux layers)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import drifttool
from drifttool.model.checkpoint import expected_shapes, read_drafter
from drifttool.model.layouts import LAYOUTS, canonical_key, detect_layout, savable
from drifttool.model.tiny import tiny_drafter, tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target(vocab=64, hidden=32, layers=6, seed=3)


@pytest.mark.parametrize("layout", savable())
def test_each_savable_layout_round_trips(layout, target, tmp_path):
    d = tiny_drafter(target, fc_norm=layout != "safeailab", norm_output=layout != "safeailab")
    out = drifttool.save_drafter(d, tmp_path / layout, layout=layout)
    import json

    assert detect_layout(json.loads((out / "config.json").read_text())) == layout
    again = drifttool.load_drafter(out, target=target)
    assert again.config.layout == layout
    for k, v in d.state_dict().items():
        torch.testing.assert_close(again.state_dict()[k], v, atol=0, rtol=0, msg=k)


def test_layout_names_are_unique_and_nvidia_is_read_only():
    names = [lay.name for lay in LAYOUTS]
    assert len(set(names)) == len(names) and set(names) == {"speculators", "safeailab", "specforge", "nvidia"}
    assert "nvidia" not in savable()
    with pytest.raises(
        drifttool.DriftError, match="layout 'nvidia': can save speculators, specforge or safeailab"
    ):
        drifttool.save_drafter(
            tiny_drafter(tiny_target(vocab=64, hidden=32, layers=6, seed=3)),
            "/nonexistent-x",
            layout="nvidia",
        )


def test_renames_map_every_layouts_names():
    assert canonical_key("model.midlayer.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert canonical_key("draft_model.aux_norms.1.weight") == "fc_norm.1.weight"
    assert canonical_key("aux_norm.0.weight") == "fc_norm.0.weight"
    assert canonical_key("layers.0.mlp.up_proj.weight") == "layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize(
    "flags",
    [{}, {"fc_norm": True}, {"norm_before_fc": True}, {"use_aux_hidden_state": False}, {"qk_norm": True}],
)
def test_expected_shapes_are_the_modules_own(flags, target):
    cfg = dataclasses.replace(tiny_drafter(target).config, **flags)
    real = {k: tuple(v.shape) for k, v in drifttool.model.drafter.Eagle3Drafter(cfg).state_dict().items()}
    assert expected_shapes(cfg) == {**real, "t2d": (cfg.vocab_size,)}
    assert ("fc.weight" in real) == bool(cfg.num_aux)


def test_shape_only_loader_leaves_the_target_alone(target, tmp_path):
    d = tiny_drafter(target)
    d.config.aux_layer_ids = [1, 3, 6]
    out = drifttool.save_drafter(d, tmp_path / "s")
    before = list(target.aux_layer_ids)
    assert before != [1, 3, 6]
    m = read_drafter(out, target.shape())
    assert m.config.input_aux_layer_ids == [1, 3, 6] and target.aux_layer_ids == before
    drifttool.load_drafter(out, target=target)  # the public loader points the target at them
    assert target.aux_layer_ids == [1, 3, 6]
    target.set_aux_layer_ids(before)
