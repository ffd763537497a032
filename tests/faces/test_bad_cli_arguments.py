"""Every user error on the command line -> one clear line on stderr naming the file/field, exit code 2, no
traceback. Most cases call `drifttool.cli.main(argv)` in-process (the same code `python -m drifttool.cli`
runs; interpreter start-up costs seconds on this shared machine); one goes through a real subprocess."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from drifttool.cli import main
from drifttool.run.engines.hf import DrafterSpec, run_capture
from tests.support.capture import build_models, cli, prompt, write_probes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("clierr")
    p = build_models(root)
    suite = write_probes(root / "probes.jsonl", [{"id": "a", "token_ids": prompt(0, 8), "max_new_tokens": 4}])
    for name, depth in (("d2", 2), ("d3", 3)):
        run_capture(str(p["target"]), [DrafterSpec.parse(str(p["eagle3"]))], str(suite), str(root / f"{name}.drift"),
                    depth=depth, progress=False, compact=False)  # shards: the edits below damage one
    # broken inputs
    (root / "nolayout").mkdir()
    (root / "nolayout" / "config.json").write_text(json.dumps({"hidden_size": 32, "foo": 1}))
    shutil.copy(p["eagle3"] / "model.safetensors", root / "nolayout")
    (root / "empty.jsonl").write_text("\n// only a comment\n   \n")
    write_probes(root / "badline.jsonl", [{"id": "a", "token_ids": [1, 2]}])
    with open(root / "badline.jsonl", "a") as f:
        f.write('{"id": "b", "token_ids": [1, 2\n')
    write_probes(root / "noid.jsonl", [{"token_ids": [1, 2]}])
    write_probes(root / "oov.jsonl", [{"id": "ok", "token_ids": [1, 2]}, {"id": "oov", "token_ids": [1, 640]}])
    write_probes(root / "toolong.jsonl", [{"id": "big", "token_ids": [1, 2], "max_new_tokens": 600}])
    for name, edit in {
        "notjson": lambda t: (t / "manifest.json").write_text("{not json"),
        "future": lambda t: (t / "manifest.json").write_text(
            json.dumps(dict(json.loads((t / "manifest.json").read_text()), schema_version=99))),
        "noshard": lambda t: (t / "depths" / "part-00000.parquet").unlink(),
        "noaux": lambda t: (t / "aux" / "part-00000.parquet").unlink(),
        "truncshard": lambda t: (t / "rounds" / "part-00000.parquet").write_bytes(b"PAR1\x00\x01"),
    }.items():
        shutil.copytree(root / "d3.drift", root / f"{name}.drift")
        edit(root / f"{name}.drift")
    return {"root": root, **{k: str(v) for k, v in p.items()}, "probes": str(suite)}


def cap_args(e, **over) -> list[str]:
    a = {"--target": e["target"], "--drafter": e["eagle3"], "--probes": e["probes"],
         "--out": str(e["root"] / "new.drift"), "--depth": "2", "--quiet": None, **over}
    out = ["capture"]
    for k, v in a.items():
        if v is False:
            continue
        out += [k] if v is None else [k, v]
    return out


CASES = {
    # name: (argv builder, fragments the one line must contain)
    "missing target dir": (lambda e: cap_args(e, **{"--target": str(e["root"] / "nope")}), "nope"),
    "missing drafter dir": (lambda e: cap_args(e, **{"--drafter": str(e["root"] / "nodrafter")}), "nodrafter"),
    "wrong layout": (lambda e: cap_args(e, **{"--drafter": str(e["root"] / "nolayout")}), "unknown drafter layout"),
    "unknown --override key": (lambda e: [*cap_args(e), "--override", "bogus=true"], "bogus"),
    "unknown per-drafter override": (lambda e: cap_args(e, **{"--drafter": e["eagle3"] + "?colour=red"}), "colour"),
    # a typo names the --drafter it was given in and the key meant
    "mistyped per-drafter override": (lambda e: cap_args(e, **{"--drafter": "e3=" + e["eagle3"] + "?norm_ouput=true"}),
                                      "--drafter e3=", "did you mean norm_output?"),
    "mistyped --override": (lambda e: [*cap_args(e), "--override", "norm_outptu=true"], "did you mean norm_output?"),
    # a target folder given as a drafter: the folder named, and what to do
    "target as drafter": (lambda e: cap_args(e, **{"--drafter": e["target"]}), "target/config.json",
                          "give this folder as --target"),
    "bad override value": (lambda e: [*cap_args(e), "--override", "norm_output=maybe"], "norm_output"),
    # a window no integer parser reads as one: one line naming the override, not a traceback or a 0-slot window
    "superscript sliding_window": (lambda e: [*cap_args(e), "--override", "sliding_window=\u00b2"],
                                   "--override sliding_window="),
    "superscript trained_window": (lambda e: [*cap_args(e), "--override", "trained_window=\u00b2"],
                                   "--override trained_window="),
    "5000-digit trained_window": (lambda e: [*cap_args(e), "--override", "trained_window=" + "9" * 5000],
                                  "--override trained_window="),
    "sliding_window=00": (lambda e: [*cap_args(e), "--override", "sliding_window=00"], "sliding_window=00"),
    "--depth 0": (lambda e: cap_args(e, **{"--depth": "0"}), "--depth"),
    "--depth not a number": (lambda e: cap_args(e, **{"--depth": "x"}), "--depth"),
    "--mode unknown": (lambda e: cap_args(e, **{"--mode": "bogus"}), "--mode"),
    "bad --sink": (lambda e: cap_args(e, **{"--sink": "pos:x"}), "--sink"),
    # a repeated key is refused where the two cannot both hold, and an empty list is no "no sink" (issue #51)
    "repeated --sink first": (lambda e: cap_args(e, **{"--sink": "first:4;first:8"}), "'first' twice"),
    "empty --sink pos list": (lambda e: cap_args(e, **{"--sink": "pos:"}), "'pos:' lists no"),
    "empty --sink tok list": (lambda e: cap_args(e, **{"--sink": "tok:"}), "'tok:' lists no"),
    "repeated --override": (lambda e: [*cap_args(e), "--override", "norm_output=true", "--override",
                                       "norm_output=false"], "'norm_output' twice"),
    "repeated per-drafter override": (lambda e: cap_args(e, **{"--drafter": e["eagle3"] + "?fc_norm=1&fc_norm=0"}),
                                      "'fc_norm' twice"),
    "probes file missing": (lambda e: cap_args(e, **{"--probes": str(e["root"] / "none.jsonl")}), "none.jsonl"),
    "empty probe suite": (lambda e: cap_args(e, **{"--probes": str(e["root"] / "empty.jsonl")}), "empty"),
    "malformed probe line": (lambda e: cap_args(e, **{"--probes": str(e["root"] / "badline.jsonl")}),
                             "badline.jsonl:2"),
    "probe without id": (lambda e: cap_args(e, **{"--probes": str(e["root"] / "noid.jsonl")}), "'id'"),
    "probe token beyond vocab": (lambda e: cap_args(e, **{"--probes": str(e["root"] / "oov.jsonl")}),
                                 "probe 'oov': prompt: token id 640"),
    "probe beyond max positions": (lambda e: cap_args(e, **{"--probes": str(e["root"] / "toolong.jsonl")}),
                                   "max_position_embeddings"),
    "out exists": (lambda e: cap_args(e, **{"--out": str(e["root"] / "d2.drift")}), "--resume or --overwrite"),
    "resume with other settings": (lambda e: cap_args(e, **{"--out": str(e["root"] / "d3.drift"),
                                                            "--resume": None}), "different settings"),
    "out not .drift": (lambda e: cap_args(e, **{"--out": str(e["root"] / "plain")}), ".drift"),
    "info corrupt manifest": (lambda e: ["info", str(e["root"] / "notjson.drift")], "manifest.json"),
    "compare corrupt manifest": (lambda e: ["compare", str(e["root"] / "d3.drift"), str(e["root"] / "notjson.drift"),
                                            "--json"], "manifest.json"),
    "info future schema": (lambda e: ["info", str(e["root"] / "future.drift")], "schema_version 99"),
    "compare future schema": (lambda e: ["compare", str(e["root"] / "future.drift"), str(e["root"] / "d3.drift")],
                              "schema_version 99"),
    "info missing shard": (lambda e: ["info", str(e["root"] / "noshard.drift")], "part-00000.parquet"),
    "compare missing shard": (lambda e: ["compare", str(e["root"] / "d3.drift"), str(e["root"] / "noshard.drift"),
                                         "--json"], "part-00000.parquet"),
    "info missing aux shard": (lambda e: ["info", str(e["root"] / "noaux.drift")], "aux"),
    "info truncated shard": (lambda e: ["info", str(e["root"] / "truncshard.drift")], "part-00000.parquet"),
    "info not a trace": (lambda e: ["info", e["target"]], "manifest.json"),
    "info missing trace": (lambda e: ["info", str(e["root"] / "ghost.drift")], "ghost.drift"),
    "unknown command": (lambda e: ["capturre"], "capturre"),
    "unknown option": (lambda e: [*cap_args(e), "--colour"], "--colour"),
    "missing required option": (lambda e: ["capture", "--target", e["target"]],
                                "missing --drafter (or --drafter-series), --probes, --out"),
    "compare without traces": (lambda e: ["compare"], "Missing argument"),
    "compare incompatible depth": (lambda e: ["compare", str(e["root"] / "d2.drift"), str(e["root"] / "d3.drift")],
                                   "depth"),
}


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert lines[0].startswith("drifttool: error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_one_line_exit_2(env, case, capsys):
    build, *fragments = CASES[case]
    rc = main(build(env))
    err = capsys.readouterr().err
    assert rc == 2, err
    line = one_error_line(err)
    assert all(f in line for f in fragments), line
    assert not (env["root"] / "new.drift").exists()  # nothing was written for a rejected command


def test_nothing_written_for_rejected_captures(env):
    """The one failing capture that got as far as a writer must leave the existing trace intact."""
    m = json.loads((env["root"] / "d2.drift" / "manifest.json").read_text())
    assert m["status"] == "complete" and len(m["shards"]) == 1


def test_real_subprocess(env):
    """The process-level contract. (`capture` in a real subprocess, stderr included, is exercised by
    test_trace_crash_resume; each torch-importing interpreter costs 5-15 s on this shared machine.)"""
    r = cli("info", str(env["root"] / "notjson.drift"), timeout=1800)
    assert r.returncode == 2, r.stderr
    assert "not valid JSON" in one_error_line(r.stderr)
    assert r.stdout == ""


def test_module_entry_point():
    src = (Path(__file__).resolve().parents[2] / "drifttool" / "cli.py").read_text()
    assert 'if __name__ == "__main__":\n    sys.exit(main())' in src


def test_zoo_help_and_bare_zoo_print_help_without_building(monkeypatch, capsys):
    import training.build as zbuild

    monkeypatch.setattr(zbuild, "main", lambda argv: (_ for _ in ()).throw(AssertionError("build started")))
    for argv in (["zoo"], ["zoo", "--help"], ["zoo", "-h"]):
        assert main(argv) == 0, argv
        out = capsys.readouterr().out
        assert "fetch smollm2" in out and "build" in out
    assert main(["zoo", "bogus"]) == 2
    assert "zoo --help" in capsys.readouterr().err


def test_a_mistyped_bundled_suite_suggests_the_closest_and_lists_them(capsys):
    from drifttool.cli import main

    assert main(["capture", "--target", "t", "--drafter", "d", "--probes", "long_cod", "--out", "/tmp/x.drift"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'long_code'?" in err and "real/mt_chat" in err


def test_a_mistyped_override_is_refused_without_torch(env):
    """In a fresh interpreter: the refusal comes before torch is imported (seconds even on a busy machine)."""
    import subprocess
    import sys

    from tests.support.capture import child_env

    code = ("import sys; from drifttool.cli import main; "
            f"rc1 = main(['capture', '--target', {env['target']!r}, '--drafter', 'e3=' + {env['eagle3']!r} + "
            "'?norm_ouput=true', '--probes', 'quick', '--out', 'x.drift']); "
            f"rc2 = main(['capture', '--target', {env['target']!r}, '--drafter', {env['eagle3']!r}, '--override', "
            "'norm_outptu=1', '--probes', 'quick', '--out', 'x.drift']); "
            "print('RESULT', rc1, rc2, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800, env=child_env(),
                       cwd=env["root"])
    assert "RESULT 2 2 False" in r.stdout, (r.stdout, r.stderr)
    assert r.stderr.count("did you mean norm_output?") == 2
