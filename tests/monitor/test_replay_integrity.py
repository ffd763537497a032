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
