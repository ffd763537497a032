"""Every bad input gives one DriftError whose single-line message names the file / field at fault."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import drifttool
from drifttool import DriftError
from drifttool.model.tiny import tiny_drafter, tiny_target
from tests.support.ckpt_writer import Case, write

SPEC = Case("base", "speculators", hidden=32, heads=4, kv_heads=2, target_hidden=32, aux=[1, 2, 3],
            target_layers=4, draft_vocab=48, seed=21)
SAFE = Case("safe", "safeailab", hidden=32, heads=4, kv_heads=4, target_hidden=32, target_layers=6, rope="absent",
            seed=22)


@pytest.fixture(scope="module")
def target():
    return tiny_target(vocab=64, hidden=32, layers=6, heads=4, kv_heads=2, seed=5)


@pytest.fixture
def spec_dir(tmp_path, target):
    return write(SPEC, SPEC.weights(target.input_embeddings()), tmp_path / "spec")


@pytest.fixture
def safe_dir(tmp_path, target):
    return write(SAFE, SAFE.weights(target.input_embeddings()), tmp_path / "safe")


def _fails(*must_contain, **kw):
    """Call load_drafter and return the one-line DriftError message, checking it names what it should."""
    path = kw.pop("path")
    with pytest.raises(DriftError) as e:
        drifttool.load_drafter(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.strip() == msg and msg
    for s in must_contain:
        assert s in msg, (s, msg)
    return msg


def _edit_config(d, fn):
    p = d / "config.json"
    c = json.loads(p.read_text())
    fn(c)
    p.write_text(json.dumps(c))


def _edit_tensors(d, fn):
    p = d / "model.safetensors"
    sd = load_file(str(p))
    fn(sd)
    save_file(sd, str(p))


def test_valid_checkpoints_load(spec_dir, safe_dir, target):
    assert drifttool.load_drafter(spec_dir, target=target).config.layout == "speculators"
    assert drifttool.load_drafter(safe_dir, target=target).config.layout == "safeailab"


def test_missing_dir(tmp_path):
    _fails(str(tmp_path / "nope"), "does not exist", path=tmp_path / "nope")


def test_missing_config(spec_dir):
    (spec_dir / "config.json").unlink()
    _fails("config.json", "missing", path=spec_dir)


def test_config_not_json(spec_dir):
    (spec_dir / "config.json").write_text('{"speculators_model_type": "eagle3",')
    _fails(str(spec_dir / "config.json"), "not valid JSON", path=spec_dir)


def test_config_not_an_object(spec_dir):
    (spec_dir / "config.json").write_text("[1, 2]")
    _fails("config.json", "JSON object", path=spec_dir)


def test_unknown_layout(spec_dir):
    (spec_dir / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32}))
    _fails("config.json", "unknown drafter layout", path=spec_dir)


def test_unsupported_speculators_type(spec_dir):
    _edit_config(spec_dir, lambda c: c.update(speculators_model_type="medusa"))
    _fails("speculators_model_type", "medusa", path=spec_dir)


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"])
def test_missing_required_field_speculators(spec_dir, target, field):
    _edit_config(spec_dir, lambda c: c["transformer_layer_config"].pop(field))
    _fails("config.json", "transformer_layer_config", repr(field), path=spec_dir, target=target)


def test_missing_transformer_layer_config(spec_dir, target):
    _edit_config(spec_dir, lambda c: c.pop("transformer_layer_config"))
    _fails("config.json", "transformer_layer_config", path=spec_dir, target=target)


def test_missing_required_field_safeailab(safe_dir, target):
    _edit_config(safe_dir, lambda c: c.pop("intermediate_size"))
    _fails(str(safe_dir / "config.json"), "'intermediate_size'", path=safe_dir, target=target)


def test_no_aux_ids_and_no_target(safe_dir):
    _fails("eagle_aux_hidden_state_layer_ids", "target", path=safe_dir)


@pytest.mark.parametrize("key", ["layers.0.mlp.up_proj.weight", "fc.weight"])
def test_missing_tensor(spec_dir, target, key):
    _edit_tensors(spec_dir, lambda sd: sd.pop(key))
    _fails(str(spec_dir), repr(key), "missing tensor", path=spec_dir, target=target)


def test_missing_lm_head_with_a_reduced_vocab(spec_dir, target):
    """Without lm_head the target's is taken (as vLLM shares it), which cannot serve a reduced draft vocab."""
    _edit_tensors(spec_dir, lambda sd: sd.pop("lm_head.weight"))
    _fails(str(spec_dir), "no lm_head.weight", "[64, 32]", path=spec_dir, target=target)


def test_missing_tensor_safeailab_names_the_key(safe_dir, target):
    _edit_tensors(safe_dir, lambda sd: sd.pop("midlayer.self_attn.k_proj.weight"))
    _fails("self_attn.k_proj.weight", "missing tensor", path=safe_dir, target=target)


@pytest.mark.parametrize("key,shape", [("fc.weight", (32, 95)), ("layers.0.self_attn.q_proj.weight", (32, 32)),
                                       ("embed_tokens.weight", (63, 32)), ("d2t", (47,))])
def test_wrong_tensor_shape(spec_dir, target, key, shape):
    def f(sd):
        sd[key] = torch.zeros(shape, dtype=sd[key].dtype)
    _edit_tensors(spec_dir, f)
    _fails(repr(key), "shape", str(list(shape)), path=spec_dir, target=target)


def test_float_tensor_with_int_dtype(spec_dir, target):
    _edit_tensors(spec_dir, lambda sd: sd.update({"layers.0.self_attn.v_proj.weight":
                                                  sd["layers.0.self_attn.v_proj.weight"].round().long()}))
    _fails("'layers.0.self_attn.v_proj.weight'", "dtype", "int64", path=spec_dir, target=target)


def test_d2t_float_dtype(spec_dir, target):
    _edit_tensors(spec_dir, lambda sd: sd.update(d2t=sd["d2t"].float()))
    _fails("'d2t'", "dtype", path=spec_dir, target=target)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_or_inf_weights(spec_dir, target, bad):
    def f(sd):
        sd["layers.0.mlp.down_proj.weight"][3, 5] = bad
    _edit_tensors(spec_dir, f)
    _fails("'layers.0.mlp.down_proj.weight'", "NaN", path=spec_dir, target=target)


def test_d2t_out_of_range(spec_dir, target):
    _edit_tensors(spec_dir, lambda sd: sd.update(d2t=sd["d2t"] + 64))
    _fails("'d2t'", "outside the target vocabulary", path=spec_dir, target=target)


def test_small_draft_vocab_without_d2t(spec_dir, target):
    _edit_tensors(spec_dir, lambda sd: (sd.pop("d2t"), sd.pop("t2d")))
    _fails("draft_vocab_size", "'d2t'", path=spec_dir, target=target)


def test_unexpected_tensor(spec_dir, target):
    _edit_tensors(spec_dir, lambda sd: sd.update({"layers.1.mlp.up_proj.weight": torch.zeros(2, 2)}))
    _fails("unexpected tensor", "'layers.1.mlp.up_proj.weight'", path=spec_dir, target=target)


def test_fc_norm_and_norm_before_fc_in_config(spec_dir, target):
    _edit_config(spec_dir, lambda c: c.update(fc_norm=True, norm_before_fc=True))
    _fails("config.json", "fc_norm", "norm_before_fc", "mutually exclusive", path=spec_dir, target=target)


def test_fc_norm_and_norm_before_fc_via_override(tmp_path, target):
    case = Case("c31", "speculators", hidden=32, heads=4, kv_heads=2, aux=[1, 2, 3], target_layers=4,
                flags={"fc_norm": True, "norm_output": True}, seed=23)
    d = write(case, case.weights(None), tmp_path / "c31")
    _fails("--override", "mutually exclusive", path=d, target=target, overrides={"norm_before_fc": True})


def test_unknown_override_key(spec_dir, target):
    _fails("--override", "norm_outputs", "norm_output", path=spec_dir, target=target,
           overrides={"norm_outputs": True})


def test_bad_override_value(spec_dir, target):
    _fails("--override", "norm_output=maybe", path=spec_dir, target=target, overrides={"norm_output": "maybe"})


def test_pickle_only_refused(spec_dir, target):
    sd = load_file(str(spec_dir / "model.safetensors"))
    (spec_dir / "model.safetensors").unlink()
    torch.save(sd, spec_dir / "model.pt")
    msg = _fails("model.pt", "pickle", "safetensors", path=spec_dir, target=target)
    assert "arbitrary code" in msg  # says why


class _Payload:
    """Any object beyond tensors and plain containers: loading it would need full unpickling."""


def test_bin_with_objects_refused(spec_dir, target):
    sd = load_file(str(spec_dir / "model.safetensors"))
    (spec_dir / "model.safetensors").unlink()
    torch.save({**sd, "extra": _Payload()}, spec_dir / "pytorch_model.bin")
    _fails("pytorch_model.bin", "weights-only", "never unpickles", path=spec_dir, target=target)


def test_no_weights_at_all(spec_dir, target):
    (spec_dir / "model.safetensors").unlink()
    _fails(str(spec_dir), "no *.safetensors (or pytorch_model.bin)", path=spec_dir, target=target)


def test_empty_safetensors(spec_dir, target):
    (spec_dir / "model.safetensors").write_bytes(b"")
    _fails("model.safetensors", "empty", path=spec_dir, target=target)


@pytest.mark.parametrize("blob", [b"\x00" * 64, b"\xff\xff\xff\xff\x00\x00\x00\x00{not json", b"garbage"])
def test_corrupt_safetensors(spec_dir, target, blob):
    (spec_dir / "model.safetensors").write_bytes(blob)
    _fails("model.safetensors", "corrupt", path=spec_dir, target=target)


def test_truncated_safetensors(spec_dir, target):
    p = spec_dir / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    _fails("model.safetensors", "corrupt", path=spec_dir, target=target)


def test_target_hidden_size_mismatch(spec_dir):
    wide = tiny_target(vocab=64, hidden=48, layers=4, seed=6)
    _fails("config.json", "target_hidden_size 32", "48", path=spec_dir, target=wide)


def test_target_hidden_size_mismatch_safeailab(safe_dir):
    """No target_hidden_size field: fc is sized from hidden_size (as SafeAILab/vLLM do) and the message
    is about the target, not an fc.weight shape."""
    wide = tiny_target(vocab=64, hidden=48, layers=6, seed=6)
    _fails("config.json", "target_hidden_size 32", "48", path=safe_dir, target=wide)


def test_vocab_mismatch(spec_dir):
    other = tiny_target(vocab=80, hidden=32, layers=4, seed=6)
    _fails("config.json", "vocab_size 64", "80", path=spec_dir, target=other)


def test_aux_layer_beyond_target_depth(spec_dir):
    _edit_config(spec_dir, lambda c: c.update(eagle_aux_hidden_state_layer_ids=[1, 3, 9]))
    shallow = tiny_target(vocab=64, hidden=32, layers=6, seed=6)
    before = list(shallow.aux_layer_ids)
    _fails("eagle_aux_hidden_state_layer_ids", "9", "6 layers", path=spec_dir, target=shallow)
    assert shallow.aux_layer_ids == before  # a refused drafter leaves the target as it was


def test_no_embed_and_no_target(safe_dir):
    _edit_config(safe_dir, lambda c: c.update(eagle_aux_hidden_state_layer_ids=[1, 2, 3]))
    _fails("embed_tokens", "target", path=safe_dir)


def test_no_embed_and_target_of_other_width(tmp_path):
    """SafeAILab-style (no embed_tokens) drafter with H != Ht: the target's embeddings cannot be used."""
    case = Case("narrow", "safeailab", hidden=32, target_hidden=48, heads=4, kv_heads=4, target_layers=6,
                rope="absent", seed=24)
    wide = tiny_target(vocab=64, hidden=48, layers=6, seed=6)
    d = write(case, case.weights(torch.zeros(64, 32)), tmp_path / "narrow")
    _fails("embed_tokens", "[64, 48]", "[64, 32]", path=d, target=wide)


def test_unsupported_rope_type(spec_dir, target):
    _edit_config(spec_dir, lambda c: c["transformer_layer_config"].update(rope_scaling={"rope_type": "yarn", "factor": 2}))
    _fails("rope", "yarn", path=spec_dir, target=target)


def test_bad_dtype(spec_dir, target):
    _fails("--dtype", "float8", path=spec_dir, target=target, dtype="float8")


def test_target_folder_errors(tmp_path):
    _fails("target folder does not exist", path=tmp_path, target=tmp_path / "no-target")
    t = tmp_path / "t"
    t.mkdir()
    with pytest.raises(DriftError, match="config.json"):
        drifttool.load_target(t)
    (t / "config.json").write_text("{}")
    (t / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(DriftError, match="pickle"):
        drifttool.load_target(t)


@pytest.fixture(scope="module")
def pair():
    t = tiny_target(vocab=64, hidden=32, layers=4, max_pos=32, seed=7)
    return t, tiny_drafter(t)


def test_prompt_longer_than_max_positions(pair):
    t, d = pair
    with pytest.raises(DriftError, match="max_position_embeddings 32") as e:
        drifttool.speculate(t, d, list(range(40)), depth=3, max_new_tokens=4)
    assert "\n" not in str(e.value) and "prompt" in str(e.value)
    # prompt alone fits but prompt + generation does not
    with pytest.raises(DriftError, match="max_position_embeddings"):
        drifttool.speculate(t, d, list(range(20)), depth=4, max_new_tokens=16)


@pytest.mark.parametrize("depth", [0, -2])
def test_bad_depth(pair, depth):
    t, d = pair
    with pytest.raises(DriftError, match="--depth") as e:
        drifttool.speculate(t, d, [1, 2, 3], depth=depth)
    assert "\n" not in str(e.value)


def test_bad_prompt_and_mode(pair):
    t, d = pair
    for kw, pat in [({"prompt_ids": []}, "empty"), ({"prompt_ids": [1, 64]}, "outside the target vocabulary"),
                    ({"prompt_ids": [1], "mode": "tree"}, "--mode"),
                    ({"prompt_ids": [1], "mode": "teacher-forced", "temperature": 1.0}, "teacher-forced")]:
        with pytest.raises(DriftError, match=pat):
            drifttool.speculate(t, d, **kw)


def test_save_unknown_layout(tmp_path, pair):
    with pytest.raises(DriftError, match="layout"):
        drifttool.save_drafter(pair[1], tmp_path / "x", layout="medusa")
    shutil.rmtree(tmp_path / "x", ignore_errors=True)
