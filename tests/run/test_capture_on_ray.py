"""Capture sharded over a Ray cluster (issue #65): a local cluster of 2 CPU workers captures the same prompts as a
single-process run, and the trace is the same value for value (every table, every column, sorted by prompt and
round); each prompt was written once and its worker recorded; --resume after a partial run finishes only what is
missing; an unreachable address is one line."""

from __future__ import annotations

import json

import pytest

from drifttool.cli import main
from drifttool.trace.reader import read_trace
from tests.support.capture import build_models, prompt, write_probes
from tests.support.ray_capture import assert_same_trace, capture_args

ray = pytest.importorskip("ray")


def _capture(m, probes, out, *extra) -> int:
    return main(capture_args(m, probes, out, *extra))


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster of 2 CPUs for the module (`--ray local` joins it instead of starting its own)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, cluster):
    root = tmp_path_factory.mktemp("ray")
    m = build_models(root)
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(40 + i, 14 + 3 * i)}
                                             for i in range(6)])
    assert _capture(m, probes, root / "one.drift") == 0
    return root, m, probes


def test_two_ray_workers_write_the_same_trace_as_one_process(setup):
    root, m, probes = setup
    assert _capture(m, probes, root / "ray.drift", "--ray", "local", "--ray-workers", "2") == 0
    assert_same_trace(root / "one.drift", root / "ray.drift")
    man = json.loads((root / "ray.drift" / "manifest.json").read_text())
    place = man["ray"]["placement"]
    assert sorted(place) == [f"p{i}" for i in range(6)] and man["ray"]["workers"] == 2
    assert 1 <= len(set(place.values())) <= 2  # (a busy machine can leave one worker loading while the other takes all)
    assert sorted(read_trace(root / "ray.drift").table("prompts")["prompt_id"].astype(str).unique()) == sorted(place)


def test_resume_on_ray_finishes_only_what_is_missing(setup):
    root, m, probes = setup
    part = root / "part.jsonl"
    part.write_text("".join(probes.read_text().splitlines(keepends=True)[:2]))
    out = root / "resumed.drift"
    assert _capture(m, part, out, "--ray", "local", "--ray-workers", "1") == 0
    first = json.loads((out / "manifest.json").read_text())["ray"]["placement"]
    assert sorted(first) == ["p0", "p1"]
    # the same trace continued with the full suite would be another suite: resume the partial run instead
    man = json.loads((out / "manifest.json").read_text())
    man["status"] = "partial"
    (out / "manifest.json").write_text(json.dumps(man))
    assert _capture(m, part, out, "--ray", "local", "--ray-workers", "2", "--resume") == 0
    pr = read_trace(out).table("prompts")
    assert sorted(pr["prompt_id"].astype(str)) == ["p0", "p0", "p1", "p1"]  # two drafters x two prompts, once each
    after = json.loads((out / "manifest.json").read_text())["ray"]
    assert after["placement"] == first  # the resumed run (nothing left to do) keeps what the first recorded


def test_an_unreachable_cluster_and_missing_resources_are_one_line(tmp_path, capsys):
    """Before any model loads or anything is written (Ray alone retries an unreachable address for minutes)."""
    import time

    from drifttool.errors import DriftError
    from drifttool.run.engines.ray_pool import _reachable, connect

    t0 = time.monotonic()
    with pytest.raises(DriftError, match="cannot reach a Ray cluster there") as e:
        _reachable("127.0.0.1:1")
    assert "\n" not in str(e.value) and time.monotonic() - t0 < 600  # a hang guard: refused, not retried
    with pytest.raises(DriftError, match="expected HOST:PORT"):
        _reachable("nonsense")
    if ray.is_initialized():  # the module's cluster has 2 CPUs: 3 workers cannot be placed
        with pytest.raises(DriftError, match="lower --ray-workers"):
            connect("local", 3, 0)
