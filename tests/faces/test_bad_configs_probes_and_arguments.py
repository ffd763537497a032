"""Bad values in what a capture is given, through the API and the CLI: strict drafter config fields, corrupt
targets, no silent coercions (probe lines, capture flags, token ids), stdlib-only `source`, API argument types
at the call. Each case is one DriftError line naming the field."""

from __future__ import annotations

import json
import shutil
import sysconfig
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import drifttool as dt
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.run.probes import load_suite
from drifttool.trace.sinks import SinkSpec
from tests.support.capture import TINY, build_models, prompt, write_probes

ZOO = Path(dt.__file__).resolve().parent / "zoo" / "models" / "plain"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    m = build_models(root)
    probes = write_probes(root / "p.jsonl", [{"id": "p0", "token_ids": prompt(0, 8), "max_new_tokens": 4}])
    return {"root": root, **m, "probes": probes}


@pytest.fixture(scope="module")
def live(env):
    t = dt.load_target(env["target"])
    return t, dt.load_drafter(env["eagle3"], target=t)


def one_line(fn, *fragments: str) -> str:
    with pytest.raises(DriftError) as e:
        fn()
    msg = str(e.value)
    assert msg and "\n" not in msg, msg
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


def edited(env, tmp_path, config=None, tensors=None, src="eagle3") -> Path:
    d = tmp_path / "d"
    shutil.copytree(env[src], d)
    if config:
        c = json.loads((d / "config.json").read_text())
        config(c)
        (d / "config.json").write_text(json.dumps(c))
    if tensors:
        sd = load_file(str(d / "model.safetensors"))
        tensors(sd)
        save_file(sd, str(d / "model.safetensors"))
    return d


def layer(key, value):
    return lambda c: c["transformer_layer_config"].__setitem__(key, value)


def top(key, value):
    return lambda c: c.__setitem__(key, value)


# --- strict config fields ---------------------------------------------------------------------------------------

CONFIGS = {
    "norm_output 'false'": (top("norm_output", "false"), ["'norm_output'", "'false'", "JSON boolean"]),
    "fc_norm 'true'": (top("fc_norm", "true"), ["'fc_norm'", "JSON boolean"]),
    "norm_before_fc 0": (top("norm_before_fc", 0), ["'norm_before_fc'", "JSON boolean"]),
    "norm_before_residual 'no'": (top("norm_before_residual", "no"), ["'norm_before_residual'", "JSON boolean"]),
    "hidden_size 'abc'": (layer("hidden_size", "abc"), ["'hidden_size'", "'abc'", "integer"]),
    "num_attention_heads 0": (layer("num_attention_heads", 0), ["'num_attention_heads'", ">= 1"]),
    "aux ids 3": (top("eagle_aux_hidden_state_layer_ids", 3), ["eagle_aux_hidden_state_layer_ids", "list"]),
    "aux ids '123'": (top("eagle_aux_hidden_state_layer_ids", "123"), ["eagle_aux_hidden_state_layer_ids", "'123'"]),
    "aux ids [1, true]": (top("eagle_aux_hidden_state_layer_ids", [1, True, 3]), ["eagle_aux_hidden_state_layer_ids"]),
    "rope_theta 'abc'": (layer("rope_theta", "abc"), ["'rope_theta'", "finite number"]),
    "rope_scaling without factor": (layer("rope_scaling", {"rope_type": "linear"}), ["rope_scaling", "'factor'"]),
    "negative eps": (layer("rms_norm_eps", -1), ["'rms_norm_eps'", "> 0"]),
    "max_position_embeddings 0": (layer("max_position_embeddings", 0), ["'max_position_embeddings'", ">= 1"]),
    "draft vocab > target vocab": (top("draft_vocab_size", 80), ["draft_vocab_size 80", "vocab_size 64"]),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_config_field(env, live, tmp_path, case):
    edit, fragments = CONFIGS[case]
    d = edited(env, tmp_path, config=edit)
    one_line(lambda: dt.load_drafter(d, target=live[0]), "config.json", *fragments)


def test_d2t_many_to_one(env, live, tmp_path):
    def squash(sd):  # a 48-token draft vocabulary whose ids 0 and 1 both map to target token 0
        sd["d2t"] = torch.zeros(48, dtype=torch.int64)
        sd["d2t"][1] = -1
        sd["lm_head.weight"] = sd["lm_head.weight"][:48].clone()

    d = edited(env, tmp_path, config=top("draft_vocab_size", 48), tensors=squash)
    one_line(lambda: dt.load_drafter(d, target=live[0]), "'d2t'", "all to target token 0", "one-to-one")


def test_tensor_in_two_weight_files(env, live, tmp_path):
    d = edited(env, tmp_path)
    save_file({"model.norm.weight": load_file(str(d / "model.safetensors"))["norm.weight"]}, str(d / "extra.safetensors"))
    one_line(lambda: dt.load_drafter(d, target=live[0]), "model.safetensors", "'norm.weight'", "also in extra.safetensors")


# --- corrupt targets -------------------------------------------------------------------------------------------

def _target(env, tmp_path, edit) -> Path:
    t = tmp_path / "t"
    shutil.copytree(env["target"], t)
    edit(t)
    return t


def _config(key, value):
    def f(t):
        c = json.loads((t / "config.json").read_text())
        c[key] = value
        (t / "config.json").write_text(json.dumps(c))
    return f


TARGETS = {
    "garbage safetensors": (lambda t: (t / "model.safetensors").write_bytes(b"\xff" * 64), ["model.safetensors", "corrupt"]),
    "truncated safetensors": (lambda t: (t / "model.safetensors").write_bytes((t / "model.safetensors").read_bytes()[:5000]),
                              ["model.safetensors", "corrupt or truncated"]),
    "num_hidden_layers -1": (_config("num_hidden_layers", -1), ["config.json", "'num_hidden_layers'", ">= 1"]),
    "hidden_size 'abc'": (_config("hidden_size", "abc"), ["config.json", "'hidden_size'"]),
    "unknown activation": (_config("hidden_act", "nope"), ["cannot load as an HF causal LM"]),
    "tensor in two files": (lambda t: save_file({"lm_head.weight": torch.zeros(64, 32)}, str(t / "extra.safetensors")),
                            ["model.safetensors", "'lm_head.weight'", "also in extra.safetensors"]),
}


@pytest.mark.parametrize("case", list(TARGETS))
def test_corrupt_target(env, tmp_path, capsys, case):
    edit, fragments = TARGETS[case]
    t = _target(env, tmp_path, edit)
    one_line(lambda: dt.load_target(t), *fragments)
    rc = main(["capture", "--target", str(t), "--drafter", str(env["eagle3"]), "--probes", str(env["probes"]),
               "--out", str(tmp_path / "x.drift"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err


# --- no silent coercions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("line,fragment", [
    ('{"id": "a", "token_ids": [3, true]}', "'token_ids'"),
    ('{"id": "a", "token_ids": [3, 4.0]}', "'token_ids'"),
    ('{"id": "a", "token_ids": [3], "max_new_tokens": true}', "'max_new_tokens'"),
    ('{"id": "a", "token_ids": [3, 4], "cut": true}', "'cut'"),
    ('{"id": true, "token_ids": [3]}', "'id'"),
])
def test_probe_booleans(tmp_path, line, fragment):
    p = tmp_path / "s.jsonl"
    p.write_text(line + "\n")
    one_line(lambda: load_suite(p), fragment)


@pytest.mark.parametrize("flags,fragment", [
    (["--limit", "-1"], "--limit"), (["--limit", "0"], "--limit"), (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--max-new-tokens", "-3"], "--max-new-tokens"), (["--temperature", "nan"], "--temperature"),
    (["--temperature", "-1"], "--temperature"), (["--keep-rows", "-1"], "--keep-rows"),
])
def test_capture_flags(env, tmp_path, capsys, flags, fragment):
    out = tmp_path / "x.drift"
    rc = main(["capture", "--target", str(env["target"]), "--drafter", str(env["eagle3"]), "--probes",
               str(env["probes"]), "--out", str(out), "--quiet", *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and fragment in err, err
    assert not out.exists()  # refused before anything is written (it wrote an empty "complete" trace)


@pytest.mark.parametrize("ids,fragment", [([3, 4.7, 5], "4.7"), ([3, True, 5], "True"), ("3 4", "list of token ids")])
def test_api_token_ids(live, ids, fragment):
    t, d = live
    if not isinstance(ids, str):  # a string is text for cap.run
        with dt.capture(d, t, depth=2, max_new_tokens=4) as cap:
            one_line(lambda: cap.run(ids), "prompt", fragment)
    one_line(lambda: dt.speculate(t, d, ids, depth=2, max_new_tokens=4), fragment)


def test_huge_text_refused_before_tokenizing(tmp_path, capsys):
    """A 3 MB text line (no cut) against a 1024-position target: refused at once, not after tokenizing it."""
    p = write_probes(tmp_path / "big.jsonl", [{"id": "big", "text": "word " * 600_000}])
    t0 = time.perf_counter()
    rc = main(["capture", "--target", str(ZOO / "target"), "--drafter", str(ZOO / "eagle3"), "--probes", str(p),
               "--out", str(tmp_path / "x.drift"), "--quiet"])
    took = time.perf_counter() - t0
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "probe 'big'" in err and "3000000 characters" in err and "max_position_embeddings" in err, err
    assert took < 30, took  # tokenizing it first took minutes


# --- `source` reads standard-library modules only -----------------------------------------------------------

def test_stdlib_source_cannot_read_other_files(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("API_KEY = 'hunter2'\n")
    for name in (str(tmp_path / "secret"), "../" * 12 + str(tmp_path / "secret").lstrip("/"), "secret",
                 "difflib/../../secret", "site-packages.x", 7):
        p = tmp_path / "s.jsonl"
        p.write_text(json.dumps({"id": "a", "source": {"stdlib_module": name}}) + "\n")
        one_line(lambda p=p: load_suite(p), "stdlib_module")
    p.write_text('{"id": "a", "source": {"stdlib_module": "difflib"}}\n{"id": "b", "source": {"stdlib_module": "email.parser"}}\n')
    texts = [pr.text for pr in load_suite(p)]
    assert "SequenceMatcher" in texts[0] and "class Parser" in texts[1]
    # the stdlib's own test package (not in sys.stdlib_module_names) is stdlib source too; paths still are not
    p.write_text('{"id": "a", "source": {"stdlib_module": "test.test_ast"}}\n')
    if (Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_ast.py").is_file():
        assert "class AST_Tests" in load_suite(p)[0].text
    p.write_text('{"id": "a", "source": {"stdlib_module": "test/../../secret"}}\n')
    one_line(lambda p=p: load_suite(p), "stdlib_module")


# --- API argument types at the call ----------------------------------------------------------------------------

@pytest.mark.parametrize("kw,fragment", [
    ({"depth": "8"}, "depth"), ({"depth": 2.5}, "depth"), ({"depth": True}, "depth"), ({"sink": "4"}, "sink"),
    ({"max_new_tokens": "4"}, "max_new_tokens"), ({"seed": 1.5}, "seed"), ({"mode": "fast"}, "mode"),
])
def test_api_capture_arguments(live, kw, fragment):
    t, d = live
    one_line(lambda: dt.capture(d, t, **{"depth": 2, **kw}), fragment)


def test_api_capture_needs_a_drafter(live, env):
    one_line(lambda: dt.capture(str(env["eagle3"]), live[0]), "drafter", "load_drafter")


@pytest.mark.parametrize("kw,fragment", [({"depth": "8"}, "--depth"), ({"depth": 2.5}, "--depth"),
                                         ({"sink": "4"}, "--sink"), ({"limit": True}, "--limit")])
def test_api_run_capture_arguments(env, tmp_path, kw, fragment):
    one_line(lambda: run_capture(env["target"], [DrafterSpec.parse(str(env["eagle3"]))], str(env["probes"]),
                                 str(tmp_path / "x.drift"), progress=False, **kw), fragment)
    assert not (tmp_path / "x.drift").exists()


def test_valid_arguments_still_run(live):
    t, d = live
    with dt.capture(d, t, depth=2, max_new_tokens=4, sink=SinkSpec.parse("2")) as cap:
        res = cap.run(prompt(1, 8))
    assert res.rounds and TINY["vocab"] == 64
