"""A live monitor folder read as one pooled trace (issue #52, item 8): `compare DIR --pool` analyses all its
segments as one trace (every request once, the same rounds as the segments together), `compare DIR` one trace per
segment; segments of another setup, or a request in two segments, are refused in one line."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from typer.testing import CliRunner

from drifttool.cli import app
from drifttool.errors import DriftError
from drifttool.monitor import replay_worker
from drifttool.monitor.segments import segments
from drifttool.trace.pooled import PooledTrace
from drifttool.trace.reader import read_trace
from tests.monitor.test_monitor_offline import args, spool


@pytest.fixture(scope="module")
def live(served, tmp_path_factory):
    root, reqs = served
    mon = tmp_path_factory.mktemp("pool") / "mon"
    spool(mon, reqs, copies=2)  # 8 requests, 3 per segment: 3 segments
    assert replay_worker.main(args(root, mon, per=3)) == 0
    assert len(segments(mon / "segments")) == 3
    return mon


def test_compare_pools_a_monitor_folder_into_one_trace(live):
    parts = [read_trace(p) for p in segments(live / "segments")]
    r = CliRunner().invoke(app, ["compare", str(live), "--pool", "--json"], prog_name="drifttool")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    rows = out["summary"]
    assert len(rows) == 1 and rows[0]["prompts"] == 8  # one trace, every request once
    want = pd.concat([t.table("depths") for t in parts], ignore_index=True)
    pooled = PooledTrace([t.path for t in parts], "mon-pooled.drift")
    got = pooled.table("depths")
    assert len(got) == len(want) and got["prompt_id"].nunique() == 8
    assert pooled.manifest["counts"]["prompts"] == 8
    r = CliRunner().invoke(app, ["compare", str(live), "--json"], prog_name="drifttool")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["summary"]) == 3  # one per segment without --pool


def test_segments_of_another_setup_or_a_repeated_request_are_refused(live, tmp_path):
    segs = segments(live / "segments")
    other = tmp_path / "other.drift"
    shutil.copytree(segs[1], other)
    m = json.loads((other / "manifest.json").read_text())
    m["settings_hash"] = "0000"
    (other / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DriftError, match="other drafters, weights or capture settings"):
        PooledTrace([segs[0], other], "x.drift")
    with pytest.raises(DriftError, match="is also in"):
        PooledTrace([segs[0], segs[0]], "x.drift")
