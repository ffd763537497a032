"""Hardening: every bad input, through the CLI, the Python API and the dashboard loader, ends in ONE clear line
naming the file/field at fault and what was expected (CLI: exit code 2, no traceback on stderr).

Complements tests/model/test_bad_checkpoints.py (checkpoint errors through the API) and
tests/faces/test_bad_cli_arguments.py (flag and trace errors through the CLI): here the checkpoint errors go through `drifttool capture`, the trace errors through
`drifttool.load` and the dashboard's loader, plus what neither covers (inf features, unwritable output, disk
full, incompatible traces, paths outside the dashboard's traces, zero-round traces). Tiny models, built once."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

import drifttool as dt
from drifttool.analysis.views import build_view, load_trace
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.model.tiny import tiny_target
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.run.records import _empty_tables
from drifttool.trace.reader import read_manifest, read_table
from drifttool.trace.schema import TABLES
from drifttool.trace.writer import TraceWriter
from tests.support.capture import TINY, build_models, prompt, write_probes

APP = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard"


# --- fixtures: tiny models, broken copies, traces -------------------------------------------------------------

def _drafter_copy(src: Path, dst: Path, config=None, tensors=None) -> str:
    shutil.copytree(src, dst)
    if config:
        c = json.loads((dst / "config.json").read_text())
        config(c)
        (dst / "config.json").write_text(json.dumps(c))
    if tensors:
        sd = load_file(str(dst / "model.safetensors"))
        tensors(sd)
        save_file(sd, str(dst / "model.safetensors"))
    return str(dst)


class _Opaque:
    """An object a weights-only load refuses (a plain tensor .bin loads; this one would need full unpickling)."""


def _to_pickle(d: Path) -> None:
    torch.save({**load_file(str(d / "model.safetensors")), "x": _Opaque()}, d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    m = build_models(root)
    e3 = m["eagle3"]
    for name, kw in {"wide": {"hidden": 48}, "vocab80": {"vocab": 80}}.items():
        tiny_target(**{**TINY, **kw}, seed=3).model.save_pretrained(root / name)
    inf = tiny_target(**TINY, seed=3)
    with torch.no_grad():  # finite weights whose hidden states overflow float32: layer 1's input is inf/NaN
        mlp = inf.model.model.layers[0].mlp
        mlp.up_proj.weight.fill_(1e4)
        mlp.down_proj.weight.fill_(1e36)
    inf.model.save_pretrained(root / "inf")
    d = {
        "noweights": _drafter_copy(e3, root / "d_noweights"),
        "emptyst": _drafter_copy(e3, root / "d_emptyst"),
        "corruptst": _drafter_copy(e3, root / "d_corruptst"),
        "notjson": _drafter_copy(e3, root / "d_notjson"),
        "nofield": _drafter_copy(e3, root / "d_nofield", config=lambda c: c["transformer_layer_config"].pop("hidden_size")),
        "shape": _drafter_copy(e3, root / "d_shape", tensors=lambda sd: sd.update({"fc.weight": torch.zeros(32, 95)})),
        "dtype": _drafter_copy(e3, root / "d_dtype", tensors=lambda sd: sd.update(
            {"norm.weight": sd["norm.weight"].to(torch.int32)})),
        "layout": _drafter_copy(e3, root / "d_layout", config=lambda c: c.clear() or c.update(
            architectures=["MedusaModel"], medusa_num_heads=4)),
        "bothnorms": _drafter_copy(e3, root / "d_bothnorms", config=lambda c: c.update(fc_norm=True,
                                                                                      norm_before_fc=True)),
        "auxdeep": _drafter_copy(e3, root / "d_auxdeep", config=lambda c: c.update(
            eagle_aux_hidden_state_layer_ids=[1, 2, 9])),
        "pickle": _drafter_copy(e3, root / "d_pickle"),
    }
    (Path(d["noweights"]) / "model.safetensors").unlink()
    (Path(d["emptyst"]) / "model.safetensors").write_bytes(b"")
    (Path(d["corruptst"]) / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}xx")
    (Path(d["notjson"]) / "config.json").write_text('{"speculators_model_type": "eagle3", ')
    _to_pickle(Path(d["pickle"]))
    probes = {
        "ok": write_probes(root / "ok.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 8), "max_new_tokens": 6}
                                                for i in range(3)]),
        "long": write_probes(root / "long.jsonl", [{"id": "huge", "token_ids": prompt(9, 600)}]),
        "blank": root / "blank.jsonl",
        "latin1": root / "latin1.jsonl",
    }
    probes["blank"].write_text("\n\n// a comment only\n")
    probes["latin1"].write_bytes('{"id": "caf\xe9", "text": "x"}\n'.encode("latin-1"))
    (root / "afile").write_text("a regular file, not a folder")
    # a valid trace, and broken copies of it
    good = run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={e3}")], str(probes["ok"]), str(root / "good.drift"),
                       depth=2, max_new_tokens=6, progress=False, compact=False)  # shards: the edits below damage one
    traces = {"good": good}

    def broken(name, edit):
        t = root / f"{name}.drift"
        shutil.copytree(good, t)
        edit(t)
        traces[name] = t

    def edit_manifest(fn):
        def f(t):
            mm = json.loads((t / "manifest.json").read_text())
            fn(mm)
            (t / "manifest.json").write_text(json.dumps(mm))
        return f

    broken("future", edit_manifest(lambda mm: mm.update(schema_version=7)))
    broken("truncated", lambda t: (t / "rounds" / "part-00001.parquet").write_bytes(
        (t / "rounds" / "part-00001.parquet").read_bytes()[:300]))
    broken("noheads", lambda t: shutil.rmtree(t / "heads"))
    broken("othermode", edit_manifest(lambda mm: mm["capture"].update(mode="teacher-forced")))
    broken("othersink", edit_manifest(lambda mm: mm["capture"].update(sink={"first_n": 1, "positions": [],
                                                                             "token_ids": []})))
    broken("linkout", lambda t: (t / "tokenizer.json").symlink_to(root / "ok.jsonl"))
    # zero drafted rounds: an empty complete trace, and one whose only prompt ended before a round
    man = read_manifest(good)
    base = {k: man[k] for k in ("target", "drafters", "capture", "settings_hash")}
    w = TraceWriter(root / "empty.drift", base)
    w.finish()
    w = TraceWriter(root / "norounds.drift", base)
    tabs = _empty_tables("e3", "p0", [1, 2, 3], 512)
    tabs["prompts"] = pd.DataFrame([{"drafter": "e3", "prompt_id": "p0", "tags": "", "prompt_len": 8,
                                     "n_generated": 1, "n_rounds": 0, "accepted_total": 0,
                                     "mean_acceptance_length": float("nan"), "wall_s": 0.01}])  # as captured
    w.add("p0", tabs)
    w.finish()
    traces.update(empty=root / "empty.drift", norounds=root / "norounds.drift")
    return {"root": root, **{k: str(v) for k, v in m.items()}, "d": d, "probes": probes, "traces": traces,
            "wide": str(root / "wide"), "vocab80": str(root / "vocab80"), "inf": str(root / "inf")}


def one_line(msg: str, *fragments: str) -> str:
    assert msg and "\n" not in msg.strip() and "Traceback" not in msg, msg
    for f in fragments:
        assert f in msg, (f, msg)
    return msg


def cli_fails(argv: list[str], capsys, *fragments: str) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("drifttool: error: "), err
    return one_line(lines[0], *fragments)


def api_fails(fn, *fragments: str) -> str:
    with pytest.raises(DriftError) as e:
        fn()
    return one_line(str(e.value), *fragments)


def capture_argv(e, out="new.drift", target=None, drafter=None, probes=None, *extra) -> list[str]:
    return ["capture", "--target", target or e["target"], "--drafter", drafter or e["eagle3"], "--probes",
            probes or e["probes"]["ok"], "--out", str(e["root"] / out), "--depth", "2", "--quiet", *extra]


# --- 1. checkpoints and targets through `drifttool capture` ---------------------------------------------------

CAPTURE_CASES = {
    # case: (argv builder, fragments the one line must contain)
    "drafter without weights": (lambda e: capture_argv(e, drafter=e["d"]["noweights"]), ["d_noweights", "no *.safetensors"]),
    "empty safetensors": (lambda e: capture_argv(e, drafter=e["d"]["emptyst"]), ["model.safetensors", "empty file"]),
    "corrupt safetensors": (lambda e: capture_argv(e, drafter=e["d"]["corruptst"]),
                            ["d_corruptst/model.safetensors", "corrupt safetensors"]),
    "config.json not JSON": (lambda e: capture_argv(e, drafter=e["d"]["notjson"]),
                             ["d_notjson/config.json", "not valid JSON"]),
    "missing required field": (lambda e: capture_argv(e, drafter=e["d"]["nofield"]),
                               ["config.json", "transformer_layer_config", "'hidden_size'"]),
    "wrong tensor shape": (lambda e: capture_argv(e, drafter=e["d"]["shape"]),
                           ["d_shape", "'fc.weight'", "[32, 95]", "expected [32, 96]"]),
    "tensor dtype mismatch": (lambda e: capture_argv(e, drafter=e["d"]["dtype"]),
                              ["d_dtype", "'norm.weight'", "int32", "floating-point"]),
    "unknown layout": (lambda e: capture_argv(e, drafter=e["d"]["layout"]), ["config.json", "unknown drafter layout"]),
    "fc_norm + norm_before_fc in config": (lambda e: capture_argv(e, drafter=e["d"]["bothnorms"]),
                                           ["d_bothnorms/config.json", "mutually exclusive"]),
    "fc_norm + norm_before_fc by override": (lambda e: capture_argv(e, drafter=e["eagle31"] + "?norm_before_fc=true"),
                                             ["--override", "fc_norm and norm_before_fc", "mutually exclusive"]),
    "target hidden size mismatch": (lambda e: capture_argv(e, target=e["wide"]),
                                    ["eagle3/config.json", "target_hidden_size 32", "hidden_size 48"]),
    "target vocab mismatch": (lambda e: capture_argv(e, target=e["vocab80"]),
                              ["eagle3/config.json", "vocab_size 64", "vocabulary 80"]),
    "aux layer beyond target depth": (lambda e: capture_argv(e, drafter=e["d"]["auxdeep"]),
                                      ["eagle_aux_hidden_state_layer_ids", "layer id 9", "4 layers"]),
    "pickle .bin drafter": (lambda e: capture_argv(e, drafter=e["d"]["pickle"]),
                            ["pytorch_model.bin", "weights-only", "never unpickles", "safetensors"]),
    "prompt beyond max positions": (lambda e: capture_argv(e, probes=e["probes"]["long"]),
                                    ["long.jsonl", "probe 'huge'", "max_position_embeddings 512"]),
    "empty probe suite": (lambda e: capture_argv(e, probes=e["probes"]["blank"]), ["blank.jsonl", "empty"]),
    "probe suite not UTF-8": (lambda e: capture_argv(e, probes=e["probes"]["latin1"]), ["latin1.jsonl", "UTF-8"]),
    "inf target features": (lambda e: capture_argv(e, target=e["inf"]),
                            ["inf", "probe 'p0'", "NaN or inf", "hidden states"]),
    "negative depth": (lambda e: [*capture_argv(e)[:-3], "--depth", "-3", "--quiet"], ["--depth", "-3", ">= 1"]),
    "output under a regular file": (lambda e: capture_argv(e, out="afile/x.drift"),
                                    ["afile/x.drift", "cannot create the trace folder"]),
}


@pytest.mark.parametrize("case", list(CAPTURE_CASES))
def test_capture_bad_input(env, case, capsys):
    build, fragments = CAPTURE_CASES[case]
    cli_fails(build(env), capsys, *fragments)
    shutil.rmtree(env["root"] / "new.drift", ignore_errors=True)  # a capture failing mid-run leaves a partial trace


# --- 2. probe lines (the parser under every entry point) -----------------------------------------------------

BAD_LINES = {
    "no id": ('{"text": "x"}', "'id'"),
    "two prompt kinds": ('{"id": "a", "text": "x", "token_ids": [1]}', "exactly one of"),
    "empty text": ('{"id": "a", "text": ""}', "'text'"),
    "negative token id": ('{"id": "a", "token_ids": [1, -2]}', "'token_ids'"),
    "messages not a list": ('{"id": "a", "messages": "hi"}', "'messages'"),
    "cut zero": ('{"id": "a", "text": "x", "cut": [0]}', "'cut'"),
    "keep middle": ('{"id": "a", "text": "x", "keep": "middle"}', "'keep'"),
    "tags not a list": ('{"id": "a", "text": "x", "tags": "code"}', "'tags'"),
    "max_new_tokens 0": ('{"id": "a", "text": "x", "max_new_tokens": 0}', "'max_new_tokens'"),
    "unknown source kind": ('{"id": "a", "source": {"url": "http://x"}}', "unknown source kind"),
    "not an object": ("[1, 2]", "JSON object"),
    "truncated line": ('{"id": "a", "text": "x"', "not valid JSON"),
    "duplicate id": ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}', "duplicate probe id 'a'"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_malformed_probe_line(case, tmp_path):
    line, fragment = BAD_LINES[case]
    p = tmp_path / "suite.jsonl"
    p.write_text('{"id": "ok", "text": "fine"}\n' + line + "\n")
    from drifttool.run.probes import load_suite

    msg = api_fails(lambda: load_suite(p), str(p), fragment)
    if case != "duplicate id":
        assert f"{p}:2" in msg  # names the line


# --- 3. the Python API -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(env):
    t = dt.load_target(env["target"])
    return t, dt.load_drafter(env["eagle3"], target=t)


def test_api_pickle_target(env, tmp_path):
    t = tmp_path / "t"
    shutil.copytree(env["target"], t)
    torch.save(load_file(str(t / "model.safetensors")), t / "pytorch_model.bin")
    (t / "model.safetensors").unlink()
    api_fails(lambda: dt.load_target(t), str(t), "pickle", "safetensors")


def test_api_target_config_not_json(env, tmp_path):
    t = tmp_path / "t"
    shutil.copytree(env["target"], t)
    (t / "config.json").write_text("{'single': 'quotes'}")
    api_fails(lambda: dt.load_target(t), "config.json", "not valid JSON")


@pytest.mark.parametrize("depth", [0, -1])
def test_api_depth(live, depth):
    t, d = live
    api_fails(lambda: dt.capture(d, t, depth=depth), "depth", str(depth), ">= 1")


def test_api_run_capture_depth_zero(env):
    api_fails(lambda: run_capture(env["target"], [DrafterSpec.parse(env["eagle3"])], str(env["probes"]["ok"]),
                                  str(env["root"] / "zero.drift"), depth=0, progress=False), "--depth", ">= 1")
    assert not (env["root"] / "zero.drift").exists()


def test_api_live_prompt_beyond_max_positions(live):
    t, d = live
    with dt.capture(d, t, depth=2) as cap:
        api_fails(lambda: cap.run(list(range(3, 60)) * 10), "prompt", "max_position_embeddings 512")


def test_api_inf_features(env, live):
    _, d = live
    inf = dt.load_target(env["inf"])
    with dt.capture(d, inf, depth=2) as cap:
        api_fails(lambda: cap.run(prompt(0, 6)), "target features", "NaN or inf")


@pytest.mark.parametrize("name,fragments", [
    ("future", ["manifest.json", "schema_version 7", "newer", "upgrade drifttool"]),
    ("truncated", ["rounds/part-00001.parquet", "corrupt or truncated Parquet"]),
    ("noheads", ["heads/part-00000.parquet", "missing", "table 'heads'"]),
])
def test_api_bad_trace(env, name, fragments):
    def use():
        t = dt.load(env["traces"][name])
        t.rounds, t.heads  # noqa: B018
    api_fails(use, *fragments)


@pytest.mark.parametrize("other,field", [("othermode", "mode"), ("othersink", "sink")])
def test_api_compare_incompatible(env, other, field):
    a, b = env["traces"]["good"], env["traces"][other]
    api_fails(lambda: dt.compare_many([a, b]), f"{other}.drift", f"capture {field}", "must share depth, mode and sink")


def test_disk_full_keeps_completed_shards(env, monkeypatch, capsys):
    """ENOSPC while writing the second shard: one line, exit 2; the first shard stays listed and readable, nothing of
    the failed shard remains, and --resume completes the trace."""
    out = env["root"] / "full.drift"
    argv = capture_argv(env, out="full.drift")
    from drifttool.trace import writer as writer_mod

    orig = writer_mod.write_parquet

    def full(df, table, path):
        if "part-00001" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return orig(df, table, path)

    monkeypatch.setattr(writer_mod, "write_parquet", full)
    cli_fails(argv, capsys, "full.drift", "shard part-00001", "No space left on device",
              "1 completed prompts are kept", "--resume")
    monkeypatch.undo()
    m = read_manifest(out)
    assert m["status"] == "partial" and m["prompts_done"] == ["p0"] and len(m["shards"]) == 1
    for name in TABLES:
        read_table(out, name)
    assert not list(out.rglob("*part-00001*")) and not list(out.rglob("*.tmp"))
    assert main([*argv, "--resume"]) == 0
    assert read_manifest(out)["status"] == "complete" and len(read_manifest(out)["shards"]) == 3


# --- 4. the dashboard's loader ---------------------------------------------------------------------------------

@pytest.fixture
def dash(env, monkeypatch):
    """drifttool.dashboard.lib with the dashboard's command line naming every fixture trace (as `drifttool dashboard` does)."""
    pytest.importorskip("streamlit")
    monkeypatch.setattr(sys, "argv", ["dashboard.py", *map(str, env["traces"].values())])
    from drifttool.dashboard import lib as dashlib

    return dashlib


@pytest.mark.parametrize("name,fragments", [
    ("future", ["manifest.json", "schema_version 7", "upgrade drifttool"]),
    ("truncated", ["rounds/part-00001.parquet", "corrupt or truncated Parquet"]),
    ("noheads", ["heads/part-00000.parquet", "missing"]),
    ("linkout", ["tokenizer.json", "outside the trace folder", "refused"]),
])
def test_dashboard_bad_trace(env, dash, name, fragments):
    path = env["traces"][name]
    one_line(dash._check(*dash._key(Path(path))), *fragments)  # what the page shows as st.error
    if name != "linkout":
        api_fails(lambda: load_trace(path), *fragments)  # drifttool.analysis.views, the loader under the pages


def test_dashboard_refuses_paths_it_was_not_given(env, dash):
    other = env["root"] / "elsewhere.drift"
    shutil.copytree(env["traces"]["good"], other)
    one_line(dash._check(*dash._key(other)), "elsewhere.drift", "not one of the trace folders", "refused")
    assert dash._check(*dash._key(Path(env["traces"]["good"]))) is None
    assert dash.confine(other, given=[other]) == other.resolve()


@pytest.mark.parametrize("other,field", [("othermode", "mode"), ("othersink", "sink")])
def test_dashboard_incompatible_traces(env, other, field):
    traces = [load_trace(env["traces"]["good"]), load_trace(env["traces"][other])]
    api_fails(lambda: build_view(traces), f"capture {field}", "must share")


# --- 5. zero drafted rounds: empty tables and a note, never a crash ------------------------------------------

@pytest.mark.parametrize("name", ["empty", "norounds"])
def test_zero_round_trace(env, name, capsys):
    path = str(env["traces"][name])
    assert main(["info", path]) == 0
    assert main(["compare", path]) == 0
    assert "no drafted rounds" in capsys.readouterr().out
    assert main(["compare", path, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert any("no drafted rounds" in n for n in js["notes"]) and js["per_depth"] == [] and js["predictors"] == []
    assert js["summary"][0]["drafts"] == 0 and js["summary"][0]["mean_acceptance_length"] is None
    # check: a rule without data fails (exit 1), it does not crash
    assert main(["check", path, "--rule", "acceptance_length>=1", "--rule", "self_mass@depth2<=1"]) == 1
    assert "no drafted rounds" in capsys.readouterr().out
    assert main(["compare", path, str(env["traces"]["good"]), "--json"]) == 0  # beside a normal trace
    capsys.readouterr()
    v = build_view([load_trace(path)])
    assert v.per_depth.empty and v.summary.empty and v.predictors().empty
    assert v.head_means.empty and v.aux_summary.empty and v.by_context.empty


def test_zero_round_trace_in_the_dashboard(env, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(sys, "argv", [str(APP / "app.py"), str(env["traces"]["norounds"])])
    at = AppTest.from_file(str(APP / "app.py"), default_timeout=1800)
    at.run()
    assert not at.exception and not at.error
    assert any("no drafted rounds" in w.value for w in at.warning)
    for page in ("depth", "rejection"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, page
