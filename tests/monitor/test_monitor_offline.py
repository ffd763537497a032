"""The live monitor's parts without vLLM: requests recorded the way vLLM's worker records them (drifttool's own
chain on a tiny target, planted verdicts) are spooled as the worker spools them and replayed by the replay process.
Its /metrics text parses as Prometheus reads it and its per-depth values equal the trace segments' (the very
tables a capture stores, read back by the trace reader); no label carries prompt content; a failing replay is
counted, not fatal; a replay process killed with SIGKILL leaves only readable segments with whole shards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from drifttool import save_drafter
from drifttool.errors import DriftError
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.monitor import replay_worker
from drifttool.monitor.attach import request_key, sampled
from drifttool.monitor.metrics import context_labels, exposition, per_depth
from drifttool.monitor.segments import segments
from drifttool.monitor.settings import MonitorSettings
from drifttool.run.engines.vllm.events import write_events
from drifttool.trace.reader import read_trace
from tests.run.test_vllm_replay import K, record
from tests.support.capture import TINY, child_env

RUN = "testrun"
LABELS = {"model_name", "engine", "drafter", "depth", "context", "keys", "reason", "process", "le"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny target and EAGLE-3 drafter on disk, and four requests recorded as vLLM's worker records them."""
    root = tmp_path_factory.mktemp("served")
    t = tiny_target(**TINY)
    d = tiny_drafter(t, seed=1)
    t.model.save_pretrained(root / "target")
    save_drafter(d, root / "eagle3")
    g = torch.Generator().manual_seed(0)
    reqs = []
    for i, (n, accept) in enumerate([(9, [1, 0, 3]), (14, [4, 2]), (6, [0, 1]), (20, [2, 2, 4])]):
        prompt = torch.randint(3, 60, (n,), generator=g).tolist()
        events, out = record(d, t, prompt, 12 + 2 * i, accept, seed=i)
        reqs.append((f"chatcmpl-{i}", prompt, events, out))
    return root, reqs


def spool(folder, reqs, copies: int = 1) -> None:
    """DIR/spool/RUN/ as the worker's spool thread writes it: the events, then the meta file last."""
    sp = folder / "spool" / RUN
    sp.mkdir(parents=True, exist_ok=True)
    n = 0
    for _ in range(copies):
        for rid, prompt, events, out in reqs:
            n += 1
            base = sp / f"job-{n:09d}"
            key = request_key(f"{rid}-{n}")
            write_events({key: events}, base)
            base.with_suffix(".meta.json").write_text(json.dumps(
                {"key": key, "prompt_ids": prompt, "output_ids": out, "t_end": time.time()}))


def args(root, mon, **over) -> list[str]:
    s = MonitorSettings.parse(f"sample=1,dir={mon},segment_requests={over.get('per', 3)}")
    return ["--settings", s.to_env(), "--run", RUN, "--target", str(root / "target"), "--drafter",
            str(root / "eagle3"), "--name", "eagle3", "--model", "tiny", "--depth", str(K), "--no-stdin",
            "--nice", "0"]  # in-process: the default (10, serving first) would renice the test process for good


def test_settings_are_checked_whole_with_one_line_each(tmp_path):
    s = MonitorSettings.parse(f"sample=0.01, dir={tmp_path / 'm'}, queue=4")
    assert s.sample == 0.01 and s.queue == 4 and (tmp_path / "m").is_dir()
    assert MonitorSettings.parse(s.to_env()) == s
    bad = {"sample=0,dir=X": "outside (0, 1]", "sample=1.5,dir=X": "outside (0, 1]", "sample=0.1": "dir= is required",
           "sample=0.1,dir=X,speed=2": "unknown setting 'speed'", "sample=lots,dir=X": "not a number",
           "sample=0.1,dir=X,queue=0": "at least 1", "sample": "is not key=value"}
    for text, why in bad.items():
        with pytest.raises(DriftError) as e:
            MonitorSettings.parse(text.replace("X", str(tmp_path / "ok")))
        assert why in str(e.value) and "\n" not in str(e.value), text
    (tmp_path / "file").write_text("x")
    with pytest.raises(DriftError, match="not a writable folder"):
        MonitorSettings.parse(f"sample=1,dir={tmp_path / 'file' / 'sub'}")


def test_sampling_is_a_stable_fraction_and_keys_hide_the_request():
    ids = [f"chatcmpl-{i:05d}" for i in range(20000)]
    share = np.mean([sampled(i, 0.1) for i in ids])
    assert 0.09 < share < 0.11 and all(sampled(i, 1.0) for i in ids[:10])
    assert [sampled(i, 0.1) for i in ids[:50]] == [sampled(i, 0.1) for i in ids[:50]]
    assert request_key("chatcmpl-7") != request_key("chatcmpl-8") and "chatcmpl" not in request_key("chatcmpl-7")


def test_replay_exports_the_segments_numbers_on_prometheus_text(served, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)
    assert replay_worker.main(args(root, mon)) == 0
    segs = segments(mon / "segments")
    assert len(segs) == 2 and not list((mon / "spool" / RUN).glob("job-*"))  # 4 requests, 3 per segment
    traces = [read_trace(p) for p in segs]
    assert sum(len(t.table("prompts")) for t in traces) == 4
    dd = pd.concat([t.table("depths") for t in traces])
    fams = {f.name: f for f in text_string_to_metric_families(exposition(mon / "metrics", RUN))}
    for col, (name, _, _) in per_depth().items():
        fam = fams["drifttool:" + name]
        for d in range(1, K + 1):
            got = {s.name.rsplit("_", 1)[1]: s.value for s in fam.samples
                   if s.labels.get("depth") == str(d) and s.name.endswith(("_sum", "_count"))}
            want = dd.loc[dd.depth == d, col].to_numpy(np.float64)
            want = want[np.isfinite(want)]
            assert got.get("count", 0) == len(want), (name, d)
            if len(want):
                assert got["sum"] / got["count"] == pytest.approx(want.mean(), abs=1e-5), (name, d)
    acc = {}
    for s in fams["drifttool:draft_accepted"].samples:  # summed over the context buckets
        acc[s.labels["depth"]] = acc.get(s.labels["depth"], 0) + s.value
    for d in range(1, K + 1):
        assert acc[str(d)] == int(dd.loc[dd.depth == d, "accepted"].sum())
    assert {s.value for s in fams["drifttool:replayed"].samples} == {4.0}
    allowed = {"model_name": {"tiny"}, "engine": {"0"}, "drafter": {"eagle3"}, "depth": {str(d) for d in range(1, K + 1)},
               "context": set(context_labels()), "keys": {"sink", "self", "matched", "self_nonsink", "matched_nonsink"}, "process": {"replay"},
               "reason": {"disk_full", "permission", "write_error"}}
    for f in fams.values():  # every label is one of these names with one of these values: no prompt content, no id
        for s in f.samples:
            assert set(s.labels) <= LABELS, s
            for k, v in s.labels.items():
                assert v in allowed[k] if k in allowed else (k == "le" and (v == "+Inf" or float(v) >= 0)), s


def test_a_failing_replay_is_counted_and_the_spool_drained(served, tmp_path, monkeypatch):
    from prometheus_client.parser import text_string_to_metric_families

    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)
    monkeypatch.setenv(replay_worker.FAULT_ENV, "replay")
    assert replay_worker.main(args(root, mon)) == 0
    fams = {f.name: f for f in text_string_to_metric_families(exposition(mon / "metrics", RUN))}
    assert [s.value for s in fams["drifttool:replay_errors"].samples] == [4.0]
    assert [s.value for s in fams["drifttool:replayed"].samples] == [0.0]  # present from the start, at 0
    assert not list((mon / "spool" / RUN).glob("job-*"))


def test_sigkill_leaves_only_readable_segments_with_whole_shards(served, tmp_path):
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs, copies=15)  # 60 requests, 2 per segment
    cmd = [sys.executable, "-m", "drifttool.monitor.replay_worker", *args(root, mon, per=2)]
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.time()
    while len(segments(mon / "segments")) < 3 and proc.poll() is None and time.time() - t0 < 1800:  # a hang guard
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    segs = segments(mon / "segments")
    assert len(segs) >= 3
    shards = 0
    for p in segs:
        t = read_trace(p)  # every segment reads, the one open at the kill as a partial trace
        pr = t.table("prompts")
        assert set(t.table("rounds")["prompt_id"]) <= set(pr["prompt_id"])  # no rounds of an unlisted shard
        shards += len(pr)
        assert t.manifest["status"] in ("partial", "complete")
    assert 4 <= shards < 60


def test_ops_files_query_only_series_the_monitor_exports(served, tmp_path):
    """The Grafana dashboard and the alert rules parse, every alert has its parts, and every drifttool series
    they query is one the replay exports (vLLM's are checked against a real server in tests/run/test_vllm_monitor.py)."""
    from prometheus_client.parser import text_string_to_metric_families

    from drifttool.monitor import opsfiles

    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)
    assert replay_worker.main(args(root, mon)) == 0
    from drifttool.monitor.attach import worker_counters

    worker_counters({"model_name": "tiny", "engine": "0", "drafter": "eagle3"}).write(mon / "metrics" / f"{RUN}-worker.json")
    exported = {s.name for f in text_string_to_metric_families(exposition(mon / "metrics", RUN)) for s in f.samples}
    queried = opsfiles.queried_series()
    assert {q for q in queried if q.startswith("drifttool:")} <= exported, sorted(
        q for q in queried if q.startswith("drifttool:") and q not in exported)
    assert any(q.startswith("vllm:") for q in queried) and len(opsfiles.grafana_exprs()) >= 8
    for rule in opsfiles.alert_rules():
        if "record" in rule:
            assert set(rule) == {"record", "expr"}
            continue
        assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule) and rule["annotations"]["summary"]


def test_the_dashboard_reads_a_live_folder_and_its_new_segments(served, tmp_path, monkeypatch):
    """`drifttool dashboard DIR` on the monitor's folder: the segments there now, and on the next run the ones the
    monitor wrote since."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from tests.dashboard.test_dashboard_apptest import APP

    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)
    assert replay_worker.main(args(root, mon)) == 0  # 4 requests: 2 segments
    monkeypatch.setattr(sys, "argv", [str(APP), str(mon)])
    at = AppTest.from_file(str(APP), default_timeout=1800)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Live: 2 segment(s)" in c.value for c in at.sidebar.caption)
    spool(mon, reqs[:2])
    assert replay_worker.main(args(root, mon)) == 0
    at.run()
    assert not at.exception and any("Live: 3 segment(s)" in c.value for c in at.sidebar.caption)


def test_a_recording_error_never_reaches_vllms_step():
    """The recorder in monitor mode (on_error set): an error in drifttool's bookkeeping is reported and vLLM's
    proposer and sampler return their own results; in capture mode the same error stops the run."""
    from types import SimpleNamespace

    from drifttool.run.engines.vllm.recorder import VllmRecorder

    class Model(torch.nn.Module):
        def combine_hidden_states(self, h):
            return h

        def forward(self, input_ids, positions, hidden_states):
            return hidden_states

    class Proposer:
        method = "eagle3"

        def __init__(self):
            self.model = Model()

        def propose(self, target_hidden_states, common_attn_metadata, token_indices_to_sample=None):
            self.model(torch.tensor([1]), torch.tensor([0]), target_hidden_states[:1])
            return torch.tensor([[5, 6]])

    class Sampler(torch.nn.Module):
        def forward(self, metadata, draft_probs, logits):
            return SimpleNamespace(sampled_token_ids=torch.tensor([[5, -1]]))

    def runner(batch=None):  # by default a batch without its request list: the recorder's own lookup fails
        return SimpleNamespace(drafter=Proposer(), rejection_sampler=Sampler(), input_batch=batch or SimpleNamespace())

    call = dict(target_hidden_states=torch.zeros(3, 4),
                common_attn_metadata=SimpleNamespace(query_start_loc_cpu=torch.tensor([0, 3])))
    md = SimpleNamespace(num_draft_tokens=[2], draft_token_ids=torch.tensor([5, 6]), target_logits_indices=[0, 1])
    r, errors = runner(), []
    rec = VllmRecorder(r)
    rec.on_error = errors.append
    rec.attach()
    assert r.drafter.propose(**call).tolist() == [[5, 6]]
    assert r.rejection_sampler(md, None, torch.zeros(2, 8)).sampled_token_ids.tolist() == [[5, -1]]
    assert len(errors) == 3 and all(isinstance(e, AttributeError) for e in errors) and rec.events == {}  # 3 hooks
    warm = runner(SimpleNamespace(req_ids=[]))  # vLLM's warm-up / profile runs: steps without a real request
    rec = VllmRecorder(warm)
    rec.want, rec.on_error = (lambda rid: True), errors.append
    rec.attach()
    assert warm.drafter.propose(**call).tolist() == [[5, 6]] and len(errors) == 3 and rec.events == {}
    r2 = runner(SimpleNamespace(req_ids=[]))  # a capture: the same step is an error that stops the run
    VllmRecorder(r2).attach()
    with pytest.raises(DriftError, match="requests in a step"):
        r2.drafter.propose(**call)
