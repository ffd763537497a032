"""The monitor's replay never exports a wrong count (issue #51): a spooled request's meta is validated before
anything is counted (a `t_end` that is not a number is one counted error, not a replay and an error), a lag from a
clock ahead of the monitor's is clamped to 0 and counted (no negative lag sum)."""

from __future__ import annotations

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from drifttool.monitor import replay_worker
from drifttool.monitor.metrics import exposition
from tests.monitor.test_monitor_offline import RUN, args, served, spool  # noqa: F401 - `served` is a fixture


def families(mon) -> dict:
    return {f.name: f for f in text_string_to_metric_families(exposition(mon / "metrics", RUN))}


def value(fams: dict, name: str, suffix: str = "") -> float:
    return sum(s.value for s in fams[f"drifttool:{name}"].samples if s.name.endswith(suffix))


def edit_meta(mon, n: int, **fields) -> None:
    f = mon / "spool" / RUN / f"job-{n:09d}.meta.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), **fields}))


def test_a_bad_t_end_is_one_error_and_a_clock_ahead_is_clamped(served, tmp_path):  # noqa: F811
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)
    edit_meta(mon, 2, t_end="soon")  # not a number: counted once, as an error
    edit_meta(mon, 3, t_end=time.time() + 3600)  # a clock an hour ahead of the monitor's
    assert replay_worker.main(args(root, mon)) == 0
    fams = families(mon)
    assert value(fams, "replayed") == 3 and value(fams, "replay_errors") == 1  # 4 requests, each counted once
    assert value(fams, "replay_lag_seconds", "_count") == 3
    assert 0 <= value(fams, "replay_lag_seconds", "_sum") < 600
    assert value(fams, "replay_lag_clamped") == 1


# --- per-request isolation in the spool (issue #51, item 5) -----------------------------------------------------

def spool_at(mon, reqs, first: int, width: int = 9) -> list:
    """The requests spooled as the worker spools them, numbered from `first`; their job bases."""
    from drifttool.monitor.attach import request_key
    from drifttool.run.engines.vllm.events import write_events

    sp = mon / "spool" / RUN
    sp.mkdir(parents=True, exist_ok=True)
    out = []
    for n, (rid, prompt, events, outp) in enumerate(reqs, start=first):
        base = sp / f"job-{n:0{width}d}"
        key = request_key(f"{rid}-{n}")
        write_events({key: events}, base)
        base.with_suffix(".meta.json").write_text(json.dumps(
            {"key": key, "prompt_ids": prompt, "output_ids": outp, "t_end": time.time()}))
        out.append(base)
    return out


def replayed_prompts(mon) -> int:
    from drifttool.monitor.segments import segments
    from drifttool.trace.reader import read_trace

    return sum(len(read_trace(p).table("prompts")) for p in segments(mon / "segments"))


def test_one_bad_request_never_takes_the_good_ones_with_it(served, tmp_path):  # noqa: F811
    root, reqs = served
    mon = tmp_path / "mon"
    good = spool_at(mon, reqs, 1)
    bad = spool_at(mon, reqs[:3], 5)
    st = bad[0].with_suffix(".safetensors")
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])  # truncated safetensors
    meta = bad[1].with_suffix(".meta.json")
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "key"}))
    for suffix in (".json", ".safetensors"):  # the events files missing
        bad[2].with_suffix(suffix).unlink()
    assert replay_worker.main(args(root, mon)) == 0
    fams = families(mon)
    assert value(fams, "replayed") == len(good) and value(fams, "replay_errors") == 3
    assert value(fams, "replay_quarantined") == 3
    assert replayed_prompts(mon) == len(good)
    q = mon / "spool" / RUN / "quarantine"
    assert {p.name.split(".")[0] for p in q.glob("job-*")} == {b.name for b in bad}  # kept, not deleted
    assert not list((mon / "spool" / RUN).glob("job-*"))


def test_a_replay_that_fails_for_one_request_replays_the_others_alone(served, tmp_path, monkeypatch):  # noqa: F811
    root, reqs = served
    mon = tmp_path / "mon"
    bases = spool_at(mon, reqs, 1)
    poison = json.loads(bases[1].with_suffix(".meta.json").read_text())["key"]
    orig = replay_worker.Replayer.replay

    def replay(self, jobs):
        if any(j.meta["key"] == poison for j in jobs):
            raise RuntimeError("this request's replay fails")
        return orig(self, jobs)

    monkeypatch.setattr(replay_worker.Replayer, "replay", replay)
    assert replay_worker.main(args(root, mon)) == 0
    fams = families(mon)
    assert value(fams, "replayed") == 3 and value(fams, "replay_errors") == 1 and replayed_prompts(mon) == 3
    assert (mon / "spool" / RUN / "quarantine" / (bases[1].name + ".meta.json")).is_file()


def test_unreadable_metas_never_starve_good_jobs(served, tmp_path):  # noqa: F811
    root, reqs = served
    mon = tmp_path / "mon"
    sp = mon / "spool" / RUN
    sp.mkdir(parents=True)
    for n in range(1, 17):  # 16 metas that do not parse, oldest first
        (sp / f"job-{n:09d}.meta.json").write_text("{not json")
    spool_at(mon, reqs, 17)
    assert replay_worker.main(args(root, mon)) == 0
    fams = families(mon)
    assert value(fams, "replayed") == 4 and value(fams, "replay_errors") == 16 and replayed_prompts(mon) == 4
    assert not list(sp.glob("job-*"))


def test_names_have_no_fixed_width(served, tmp_path):  # noqa: F811
    from drifttool.monitor.segments import SegmentWriter, segments

    root, reqs = served
    mon = tmp_path / "mon"
    late = spool_at(mon, reqs[:1], 10**9, width=9)  # job-1000000000: ten digits
    early = spool_at(mon, reqs[1:2], 999_999_999)
    jobs = replay_worker.pending(mon / "spool" / RUN, 16)
    assert [j.base for j in jobs] == [*early, *late]  # oldest first by number, not by text
    folder = tmp_path / "segs"
    (folder / "seg-999999.drift").mkdir(parents=True)
    (folder / "seg-999999.drift" / "manifest.json").write_text("{}")
    (folder / "seg-1000001.drift").mkdir()  # created, its manifest not yet written: no segment yet
    assert segments(folder) == [folder / "seg-999999.drift"]
    w = SegmentWriter(folder, {"x": 1})
    assert w._next_path() == folder / "seg-1000002.drift"


# --- a collector never breaks a scrape (issue #51, item 7) ------------------------------------------------------

def test_a_bad_metrics_file_is_skipped_and_counted_never_the_scrape(tmp_path):
    from drifttool.monitor.metrics import Aggregates, Collector

    folder = tmp_path / "metrics"
    good = Aggregates()
    good.inc("replayed", {"model_name": "m", "drafter": "d"}, 3)
    good.observe("replay_lag_seconds", {"model_name": "m", "drafter": "d"}, [1.0, 2.0], (0.5, 5.0))
    good.write(folder / f"{RUN}-replay.json")
    bad = {"list": [1, 2], "number": 7, "counters-not-list": {"counters": {"a": 1}},
           "counter-without-value": {"counters": [{"name": "replayed", "labels": {}}]},
           "histogram-short-counts": {"histograms": [{"name": "h", "labels": {}, "buckets": [1, 2], "counts": [1],
                                                      "sum": 1, "count": 1}]},
           "labels-not-object": {"counters": [{"name": "x", "labels": [1], "value": 1}]}}
    for i, body in enumerate(bad.values()):
        (folder / f"{RUN}-bad{i}.json").write_text(json.dumps(body))
    (folder / f"{RUN}-torn.json").write_text("{not json")
    fams = {f.name: f for f in text_string_to_metric_families(exposition(folder, RUN))}
    assert value(fams, "replayed") == 3 and value(fams, "replay_lag_seconds", "_count") == 2
    assert value(fams, "metrics_files_skipped") == len(bad) + 1
    assert list(Collector(folder, RUN).collect())  # the collector itself yields, never raises
