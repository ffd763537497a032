"""Capture on Ray survives crashes (issue #65): on a local 2-CPU cluster joined by its address (as a multi-node user
runs it), a worker killed with SIGKILL mid-run loses only the prompt in hand, which another worker captures; a driver
killed with SIGKILL keeps every prompt it wrote, and `--resume` finishes only what is missing. Both end with a trace
equal value for value to a single-process capture of the same prompts, every prompt written once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from drifttool.cli import main
from drifttool.trace.reader import read_trace
from tests.support.capture import build_models, child_env, prompt, write_probes
from tests.support.ray_capture import assert_same_trace, capture_args

ray = pytest.importorskip("ray")
N = 10  # prompts: a kill after the first one lands leaves most of the run to do
HANG = 1800.0  # a hang guard only: the machine may be busy


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A local cluster of 2 CPUs started here; drivers in other processes join it by its address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    root = tmp_path_factory.mktemp("raycrash")
    m = build_models(root)
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(70 + i, 12 + 2 * i)}
                                             for i in range(N)])
    assert main(capture_args(m, probes, root / "one.drift")) == 0
    yield root, m, probes, ray.get_runtime_context().gcs_address
    ray.shutdown()


def _driver(m, probes, out, address: str, cwd=None, quiet: bool = True) -> subprocess.Popen:
    args = capture_args(m, probes, out, "--ray", address, "--ray-workers", "2", quiet=quiet)
    return subprocess.Popen([sys.executable, "-m", "drifttool.cli", *args], env=child_env(), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _done(out) -> list[str]:
    try:
        return json.loads((out / "manifest.json").read_text())["prompts_done"]
    except (OSError, ValueError, KeyError):
        return []


def _wait_for(out, n: int, proc: subprocess.Popen) -> list[str]:
    t0 = time.monotonic()
    while len(done := _done(out)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < HANG
        time.sleep(0.02)
    return done


def _workers() -> list[psutil.Process]:
    """The capture actors' processes (Ray titles them ray::_Worker...); the cluster holds at most 2."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if " ".join(p.info["cmdline"] or []).startswith("ray::_Worker"):
            found.append(p)
    return found


def _once_each(out) -> None:
    pr = read_trace(out).table("prompts")
    assert sorted(pr["prompt_id"].astype(str)) == sorted([f"p{i}" for i in range(N)] * 2)  # 2 drafters, once each


def test_a_worker_killed_mid_run_loses_only_its_prompt(setup):
    """Run from the models' folder with relative paths: the workers (whose working folder is another) load them."""
    root, m, probes, address = setup
    out = root / "worker_killed.drift"
    rel = {k: v.relative_to(root) for k, v in m.items()}
    proc = _driver(rel, probes.relative_to(root), out.relative_to(root), address, cwd=root, quiet=False)
    _wait_for(out, 1, proc)
    victim = _workers()[0]
    victim_pid = victim.pid
    victim.kill()
    done_at_kill = _done(out)
    assert len(done_at_kill) < N  # killed mid-run
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert f"capture: {N}/{N} prompts" in err and "; workers " in err  # one line for the cluster, per-worker rates
    assert_same_trace(root / "one.drift", out)
    _once_each(out)
    place = json.loads((out / "manifest.json").read_text())["ray"]["placement"]
    by_victim = [p for p, w in place.items() if w.endswith(f":{victim_pid}")]
    assert len(by_victim) <= len(done_at_kill) + 1  # only what it returned before it died (one may be in flight)
    assert sorted(place) == sorted(f"p{i}" for i in range(N))  # (the victim may have returned none: busy loading)
    assert any(not w.endswith(f":{victim_pid}") for w in place.values())  # the survivor took the rest


def test_a_driver_killed_and_resumed_finishes_only_what_is_missing(setup):
    root, m, probes, address = setup
    out = root / "driver_killed.drift"
    proc = _driver(m, probes, out, address)
    _wait_for(out, 2, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=HANG)
    man = json.loads((out / "manifest.json").read_text())
    kept = man["prompts_done"]
    assert man["status"] == "partial" and 2 <= len(kept) < N
    assert sorted(man["ray"]["placement"]) == sorted(kept)  # each kept prompt's worker committed with it
    t0 = time.monotonic()
    while _workers():  # Ray stops a dead driver's actors
        assert time.monotonic() - t0 < HANG
        time.sleep(0.2)
    # resumed from this process (joined to the same cluster): a fresh driver, as after a crash
    assert main(capture_args(m, probes, out, "--ray", address, "--ray-workers", "2", "--resume")) == 0
    assert_same_trace(root / "one.drift", out)
    _once_each(out)
    place = json.loads((out / "manifest.json").read_text())["ray"]["placement"]
    assert sorted(place) == sorted(f"p{i}" for i in range(N))
    assert all(place[p] == man["ray"]["placement"][p] for p in kept)  # the first run's record kept


def test_a_worker_that_cannot_load_the_models_is_one_line(setup, monkeypatch, capsys):
    """The driver sees the files, the workers' node does not (the folder moved once the driver loaded it)."""
    import shutil

    from drifttool.run.engines import ray_pool

    root, m, probes, address = setup
    work = root / "moving"
    shutil.copytree(m["target"], work / "target")
    connect = ray_pool.connect

    def moved_then_connect(*a, **kw):
        shutil.move(work / "target", work / "elsewhere")
        return connect(*a, **kw)

    monkeypatch.setattr(ray_pool, "connect", moved_then_connect)
    assert main(capture_args({**m, "target": work / "target"}, probes, root / "nofiles.drift", "--ray", address)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "a worker could not load the models" in err and "same path" in err, err
