"""Two data-parallel engines of one `vllm serve` (engine labels 0 and 1) keep their monitor state apart: their own
run ids (spool folder, spool job names, snapshot file, spool lock), their own segments (each engine's replay names
and prunes its own), and neither takes the other's live spool as an earlier run's leftovers. Before, both used the
server's run id: one engine's sampled request overwrote the other's, and the second replay died on the spool lock
with a raw BlockingIOError."""

from __future__ import annotations

from drifttool.monitor.attach import run_id
from drifttool.monitor.metrics import Aggregates, exposition
from drifttool.monitor.replay_worker import hold, leftover_runs
from drifttool.monitor.segments import SegmentWriter, segments


def test_each_engine_has_its_own_run_and_both_snapshots_are_served(tmp_path):
    assert run_id("1700000000-42", "0") == "1700000000-42"
    e1 = run_id("1700000000-42", "1")
    assert e1 == "1700000000-42-e1"
    for run, engine in (("1700000000-42", "0"), (e1, "1")):
        a = Aggregates()
        a.inc("samples", {"model_name": "m", "engine": engine, "drafter": "d"}, 3)
        a.write(tmp_path / f"{run}-worker.json")
    text = exposition(tmp_path, "1700000000-42")  # the API server's collector reads the server start's files
    got = [ln for ln in text.splitlines() if ln.startswith("drifttool:samples_total{")]
    assert len(got) == 2 and all(ln.endswith(" 3.0") for ln in got)


def test_engines_write_and_prune_their_own_segments(tmp_path):
    folder = tmp_path / "segments"
    w0 = SegmentWriter(folder, {"x": 0}, keep=1)
    w1 = SegmentWriter(folder, {"x": 1}, keep=1, engine=1)
    p0, p1 = w0._next_path(), w1._next_path()
    assert p0.name == "seg-000001.drift" and p1.name == "seg-e1-000001.drift"
    for p in (p0, p1, folder / "seg-000002.drift"):
        p.mkdir(parents=True)
        (p / "manifest.json").write_text("{}")
    assert segments(folder) == [p0, p1, folder / "seg-000002.drift"]  # readers see every engine's
    assert w1._next_path().name == "seg-e1-000002.drift" and w0._next_path().name == "seg-000003.drift"
    w0.prune()  # keep 1 of its own: removes seg-000001 only, never engine 1's
    assert not p0.exists() and p1.exists()


def test_a_sibling_engines_spool_is_not_a_leftover(tmp_path):
    root = tmp_path / "spool"
    for name in ("1700000000-42", "1700000000-42-e1", "1600000000-7"):
        (root / name).mkdir(parents=True)
    # engine 1 has not locked its spool yet; engine 0's replay must not take it (nor its own)
    assert [p.name for p in leftover_runs(root, "1700000000-42")] == ["1600000000-7"]
    assert [p.name for p in leftover_runs(root, "1700000000-42-e1")] == ["1600000000-7"]
    fh = hold(root / "1600000000-7")  # a live earlier server's run: locked, so not a leftover either
    try:
        assert leftover_runs(root, "1700000000-42") == []
    finally:
        fh.close()


def test_the_quarantine_is_bounded(tmp_path):
    """A replay that fails on every request moved each to quarantine/ and kept it forever; now the newest 64 stay
    (each request's files together), the older ones are removed."""
    from drifttool.monitor.replay_worker import QUARANTINE_KEEP, prune_quarantine

    q = tmp_path / "quarantine"
    q.mkdir()
    for i in range(QUARANTINE_KEEP + 10):
        for suffix in (".json", ".safetensors", ".meta.json"):
            (q / f"job-{i}{suffix}").write_text("x")
    assert prune_quarantine(q) == 10
    left = sorted({f.name.split(".", 1)[0] for f in q.iterdir()}, key=lambda b: int(b.split("-")[1]))
    assert len(left) == QUARANTINE_KEEP and left[0] == "job-10" and len(list(q.iterdir())) == 3 * QUARANTINE_KEEP
