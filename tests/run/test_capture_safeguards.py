"""A capture's safeguards: --resume refuses a trace of other weights or settings (the identity), one writer per
trace folder in every writer mode, NaN drafter activations stop the capture."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from drifttool import save_drafter
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace.reader import read_manifest
from drifttool.trace.writer import TraceWriter
from tests.support.capture import TINY, build_models, child_env, prompt, write_probes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    m = build_models(root)
    t = tiny_target(**TINY)
    save_drafter(tiny_drafter(t, seed=7), root / "other_e3")  # same config as eagle3, other weights
    tiny_target(**TINY, seed=11).model.save_pretrained(root / "other_target")  # same config, other weights
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 8), "max_new_tokens": 4}
                                            for i in range(2)])
    return {"root": root, **m, "probes": probes}


def cap(env, out: Path, drafter=None, target=None, **kw) -> Path:
    return run_capture(str(target or env["target"]), [DrafterSpec.parse(f"d={drafter or env['eagle3']}")],
                       str(env["probes"]), str(out), depth=2, max_new_tokens=4, progress=False, **kw)


@pytest.fixture(scope="module")
def partial(env):
    """A trace with one of its two prompts done."""
    return cap(env, env["root"] / "partial.drift", limit=1)


def resume_fails(env, partial, tmp_path, *fragments, **kw) -> None:
    out = tmp_path / "t.drift"
    shutil.copytree(partial, out)
    with pytest.raises(DriftError) as e:
        cap(env, out, resume=True, **kw)
    msg = str(e.value)
    assert "\n" not in msg and "--resume" in msg, msg
    for f in fragments:
        assert f in msg, (f, msg)
    assert len(read_manifest(out)["shards"]) == 1  # nothing appended


# --- resume identity ---------------------------------------------------------------------------------------------

def test_resume_refuses_other_drafter_weights(env, partial, tmp_path):
    resume_fails(env, partial, tmp_path, "drafters.d.weights", drafter=env["root"] / "other_e3", limit=1)


def test_resume_refuses_other_target_weights(env, partial, tmp_path):
    resume_fails(env, partial, tmp_path, "target.weights", target=env["root"] / "other_target", limit=1)


@pytest.mark.parametrize("kw,field", [({"device": "cpu:0"}, "capture.device"), ({"limit": 2}, "capture.probes.limit"),
                                      ({"keep_rows": 1}, "capture.keep_rows")])
def test_resume_refuses_other_settings(env, partial, tmp_path, kw, field):
    resume_fails(env, partial, tmp_path, field, **{"limit": 1, **kw})


def test_resume_accepts_a_copied_checkpoint(env, partial, tmp_path):
    """Same weights in another folder (mtimes not preserved): the same checkpoint, so resume continues."""
    d = tmp_path / "copy_e3"
    d.mkdir()
    for f in Path(env["eagle3"]).iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "t.drift"
    shutil.copytree(partial, out)
    cap(env, out, drafter=d, resume=True, limit=1)
    assert read_manifest(out)["status"] == "complete"


def test_resume_refuses_a_manifest_without_identity(env, partial, tmp_path):
    import json

    out = tmp_path / "t.drift"
    shutil.copytree(partial, out)
    m = json.loads((out / "manifest.json").read_text())
    del m["identity"]
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DriftError, match="no 'identity'"):
        cap(env, out, resume=True, limit=1)


def test_resume_cli_names_the_difference(env, partial, tmp_path, capsys):
    out = tmp_path / "t.drift"
    shutil.copytree(partial, out)
    rc = main(["capture", "--target", str(env["target"]), "--drafter", f"d={env['root'] / 'other_e3'}", "--probes",
               str(env["probes"]), "--out", str(out), "--depth", "2", "--max-new-tokens", "4", "--limit", "1",
               "--resume", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "drafters.d.weights" in err, err


# --- one lock for every writer mode ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["overwrite", "resume", "new"])
def test_second_writer_is_refused(tmp_path, mode):
    man = {"capture": {}, "drafters": [], "target": {}, "identity": {"k": 1}}
    first = TraceWriter(tmp_path / "x.drift", man)
    with pytest.raises(DriftError, match="another capture is writing"):
        TraceWriter(tmp_path / "x.drift", man, overwrite=mode == "overwrite", resume=mode == "resume")
    first.finish()  # releases the lock
    TraceWriter(tmp_path / "x.drift", man, overwrite=True).finish()


def test_lock_held_by_another_process(env, tmp_path, capsys):
    """A real second process writing the trace: `capture --overwrite` refuses with one line; once it is gone
    (the OS releases its lock even on kill -9) the overwrite runs."""
    out = tmp_path / "x.drift"
    cap(env, out)
    code = ("import sys; from drifttool.trace.writer import TraceWriter; "
            f"w = TraceWriter({str(out)!r}, {{}}, overwrite=True); print('locked', flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=child_env())
    try:
        assert p.stdout.readline().strip() == "locked"
        argv = ["capture", "--target", str(env["target"]), "--drafter", f"d={env['eagle3']}", "--probes",
                str(env["probes"]), "--out", str(out), "--depth", "2", "--max-new-tokens", "4", "--overwrite", "--quiet"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "another capture is writing" in err, err
    finally:
        p.kill()
        p.wait()
    assert main(argv) == 0 and read_manifest(out)["status"] == "complete"


# --- NaN drafter activations stop the capture -------------------------------------------------------------------

def test_nan_activations_stop_the_capture(env, tmp_path, capsys):
    """Finite weights whose activations overflow to inf/NaN: one line naming the drafter; nothing marked complete."""
    d = tmp_path / "hot"
    shutil.copytree(env["eagle3"], d)
    sd = load_file(str(d / "model.safetensors"))
    sd["layers.0.mlp.down_proj.weight"] = torch.full_like(sd["layers.0.mlp.down_proj.weight"], 3e38)
    save_file(sd, str(d / "model.safetensors"))
    out = tmp_path / "x.drift"
    rc = main(["capture", "--target", str(env["target"]), "--drafter", f"hot={d}", "--probes", str(env["probes"]),
               "--out", str(out), "--depth", "2", "--max-new-tokens", "4", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "drafter 'hot'" in err and "NaN or inf" in err and "probe 'p0'" in err, err
    assert read_manifest(out)["status"] == "partial" and not read_manifest(out)["shards"]


def test_the_targets_shared_prompt_work_is_recorded_once_per_prompt(tmp_path):
    """prompts.prefill_s: with several drafters the target's prompt forward (generate) or teacher-forced pass is
    shared and so in no drafter's wall_s; it is recorded on each of the prompt's rows, positive; a single drafter
    runs its own (inside its wall_s): 0."""
    import drifttool
    from drifttool.run.engines.hf import DrafterSpec, run_capture

    m = build_models(tmp_path)
    probes = write_probes(tmp_path / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 24), "max_new_tokens": 4}
                                                 for i in range(2)])
    both = [DrafterSpec("e3", str(m["eagle3"])), DrafterSpec("e31", str(m["eagle31"]))]
    for mode in ("generate", "teacher-forced"):
        out = run_capture(str(m["target"]), both, str(probes), str(tmp_path / f"{mode}.drift"), depth=3, mode=mode,
                          progress=False)
        pr = drifttool.load(out).prompts
        assert (pr["prefill_s"] > 0).all(), pr
        assert (pr.groupby("prompt_id")["prefill_s"].nunique() == 1).all()  # one shared value per prompt
    out = run_capture(str(m["target"]), both[:1], str(probes), str(tmp_path / "one.drift"), depth=3, progress=False)
    assert (drifttool.load(out).prompts["prefill_s"] == 0).all()
