"""Hub ids (`org/name`) resolve through a local Hugging Face cache laid out here (offline): capture runs on them,
and a missing snapshot is one line that says how to fetch it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from drifttool.model.checkpoint import save_drafter
from drifttool.model.hub import looks_like_hub_id
from drifttool.model.tiny import tiny_drafter, tiny_target

REV = "0123456789abcdef0123456789abcdef01234567"


def _cache_entry(hub: Path, repo: str, src: Path) -> Path:
    """The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<rev>/...}."""
    root = hub / f"models--{repo.replace('/', '--')}"
    snap = root / "snapshots" / REV
    shutil.copytree(src, snap)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(REV)
    return snap


def _run(args, env):
    return subprocess.run([sys.executable, "-m", "drifttool.cli", *args], capture_output=True, text=True, env=env,
                          timeout=1800)


def test_hub_ids_from_the_local_cache(tmp_path):
    t = tiny_target(vocab=64, hidden=32, max_pos=256)
    t.model.save_pretrained(tmp_path / "src-target")
    save_drafter(tiny_drafter(t), tmp_path / "src-e3")
    hub = tmp_path / "hf" / "hub"
    snap_t = _cache_entry(hub, "acme/tiny-target", tmp_path / "src-target")
    _cache_entry(hub, "acme/tiny-e3", tmp_path / "src-e3")
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "a", "token_ids": list(range(1, 30))}) + "\n")
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path.cwd())}
    r = _run(["capture", "--target", "acme/tiny-target", "--drafter", "e3=acme/tiny-e3", "--probes",
              str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "x.drift"), "--depth", "3", "--max-new-tokens", "6",
              "--quiet"], env)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "x.drift" / "manifest.json").read_text())
    assert m["target"]["path"] == str(snap_t)  # the snapshot folder, not the id
    assert m["drafters"][0]["path"].endswith(REV)
    # missing snapshot, offline: one line naming the id and the command that fetches it, exit 2
    r = _run(["capture", "--target", "acme/not-cached", "--drafter", "e3=acme/tiny-e3", "--probes",
              str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "y.drift")], env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "acme/not-cached" in lines[0] and "huggingface-cli download acme/not-cached" in lines[0]


def test_hub_id_shape():
    assert looks_like_hub_id("meta-llama/Llama-3.1-8B-Instruct") and looks_like_hub_id("org/name@v1.0")
    assert not looks_like_hub_id("./rel/path") and not looks_like_hub_id("/abs/path") and not looks_like_hub_id("a/b/c")
