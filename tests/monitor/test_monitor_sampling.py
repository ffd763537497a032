"""The monitor's selections beside the uniform sample (issue #63, item 7): at least one request every `every`
seconds, every request with a prompt of at least `long` tokens; each request decided once and tagged with its
reason in its segment, and `compare` says when a segment pools selected requests with uniform ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

from drifttool.errors import DriftError
from drifttool.monitor import replay_worker
from drifttool.monitor.sampling import Sampler, uniform
from drifttool.monitor.segments import segments
from drifttool.monitor.settings import MonitorSettings
from drifttool.trace.reader import read_trace
from tests.monitor.test_monitor_offline import RUN, args, spool


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_quiet_low_sample_server_still_records_one_request_per_period():
    clock = Clock()
    s = Sampler(0.01, every=60.0, clock=clock)
    ids = [f"req-{i}" for i in range(600)]  # one request a second for ten minutes
    kept = []
    for i, rid in enumerate(ids):
        clock.t = float(i)
        if s.keep(rid):
            kept.append((i, s.reason(rid)))
    cadence = [i for i, why in kept if why == "cadence"]
    gaps = np.diff([i for i, _ in kept])
    assert cadence and len(kept) >= 10 and gaps.max() <= 60  # never a minute without a recorded request
    assert {why for _, why in kept} <= {"uniform", "cadence"}
    assert all(s.keep(rid) == (s.reason(rid) is not None) for rid in ids)  # decided once, the same answer later
    off = Sampler(0.01, clock=clock)
    assert [off.keep(r) for r in ids] == [uniform(r, 0.01) for r in ids]  # no selection: the uniform rule alone


def test_long_prompts_are_kept_and_the_decision_is_made_once():
    s = Sampler(0.0001, long=1000)
    assert s.keep("a", lambda: 1200) and s.reason("a") == "long"
    assert not s.keep("b", lambda: 10) and s.reason("b") is None
    assert not s.keep("b", lambda: 5000)  # decided at first sight
    assert s.finish("a") == "long" and s.finish("a") is None


def test_the_selection_settings_are_checked(tmp_path):
    s = MonitorSettings.parse(f"sample=0.01,dir={tmp_path / 'm'},every=30,long=4096")
    assert (s.every, s.long) == (30.0, 4096) and MonitorSettings.parse(s.to_env()) == s
    for bad in ("every=-1", "long=-5", "every=nan"):
        with pytest.raises(DriftError, match="must be 0"):
            MonitorSettings.parse(f"sample=0.01,dir={tmp_path / 'm'},{bad}")


def test_a_selected_request_is_tagged_in_its_segment_and_compare_says_so(served, tmp_path, capsys):
    from drifttool.cli import main

    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)
    metas = sorted((mon / "spool" / RUN).glob("job-*.meta.json"))
    for m, why in zip(metas, ("uniform", "cadence", "long")):  # as the worker writes them
        meta = json.loads(m.read_text())
        m.write_text(json.dumps({**meta, "sample": why}))
    assert replay_worker.main(args(root, mon, per=8)) == 0
    (seg,) = segments(mon / "segments")
    tags = sorted(read_trace(seg).table("prompts")["tags"].astype(str))
    assert sum("sample:cadence" in t for t in tags) == 1 and sum("sample:long" in t for t in tags) == 1
    assert sum("sample:uniform" in t for t in tags) == len(tags) - 2  # a meta without a reason: uniform
    assert main(["compare", str(seg), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("2 of" in n and "selected by the monitor's policy" in n for n in notes), notes
