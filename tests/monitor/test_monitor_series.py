"""What /metrics carries (issue #52): every series present at 0 before the first request, vLLM's label names, a
bounded context label, HELP texts as sentences, fewer series than before (578 at K = 4 when the mass histograms
were exported), and the drift verdict's quantities recomputable from the exported sums: the recency-matched ratio
per depth equals `analysis.verdict.recency_ratio` on the segments the replay wrote, the sink retention equals the
per-draft mean sink mass at depth k over depth 1 of the same rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from drifttool.analysis.verdict import recency_ratio
from drifttool.monitor import replay_worker
from drifttool.monitor.metrics import Aggregates, context_bucket, context_labels, exposition, helps
from drifttool.monitor.segments import segments
from drifttool.trace.reader import read_trace
from tests.monitor.test_monitor_offline import RUN, args, spool
from tests.run.test_vllm_replay import K

BEFORE = 578  # series at K = 4 before this change (measured on a real server, issue #52)


def families(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_series_is_present_at_zero_before_any_request_and_there_are_fewer(tmp_path):
    from drifttool.monitor.attach import worker_counters

    labels = {"model_name": "m", "engine": "0", "drafter": "d"}
    rep = Aggregates()
    replay_worker.counters_at_zero(rep, labels, 4)
    rep.write(tmp_path / f"{RUN}-replay.json")
    worker_counters(labels).write(tmp_path / f"{RUN}-worker.json")
    fams = families(exposition(tmp_path, RUN))
    samples = [s for f in fams.values() for s in f.samples if not s.name.endswith("_created")]
    print(f"series at K = 4: {len(samples)} (before: {BEFORE})")
    assert len(samples) < BEFORE
    from pathlib import Path

    assert f"**{len(samples)} series at K = 4**" in (Path(__file__).parents[2] / "docs" / "monitor.md").read_text()
    acc = [s for s in fams["drifttool:draft_accepted"].samples]
    assert {(s.labels["depth"], s.labels["context"]) for s in acc} == {
        (str(d), c) for d in range(1, 5) for c in context_labels()} and all(s.value == 0 for s in acc)
    for name in ("drifttool:self_lift", "drifttool:fed_back_rms", "drifttool:attention_mass"):
        assert {s.labels["depth"] for s in fams[name].samples} == {"1", "2", "3", "4"}, name
    assert all(s.labels.get("model_name") == "m" and s.labels.get("engine") == "0"
               for f in fams.values() for s in f.samples if f.name != "drifttool:metrics_files_skipped")
    beat = [s for s in fams["drifttool:heartbeat_timestamp_seconds"].samples]
    assert {s.labels["process"] for s in beat} == {"worker", "replay"} and all(s.value > 1.7e9 for s in beat)


def test_help_texts_are_sentences():
    for name, text in helps().items():
        assert text[0].isupper() and text.rstrip().endswith("."), (name, text)


def test_the_context_label_is_bounded():
    got = context_bucket(np.array([0, 1024, 1025, 2048, 4000, 8192, 16384, 16385, 10**7]))
    assert list(got) == ["0-1k", "0-1k", "1k-2k", "1k-2k", "2k-4k", "4k-8k", "8k-16k", "16k+", "16k+"]
    assert len(context_labels()) == 6


def test_the_exported_sums_give_the_verdicts_recency_ratio_and_sink_retention(served, tmp_path):
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs, copies=2)
    assert replay_worker.main(args(root, mon, per=16)) == 0
    from drifttool.analysis.nonsink import read_heads, with_nonsink

    dd = pd.concat([with_nonsink(t.table("depths"), read_heads(t)) for t in map(read_trace, segments(mon / "segments"))])
    dd["group"] = dd["prompt_id"]  # each request its own group (the pooled ratio does not depend on grouping)
    assert len(dd) and dd["matched_mass"].notna().any()
    fams = families(exposition(mon / "metrics", RUN))
    sums: dict[tuple[str, str], float] = {}
    for s in fams["drifttool:attention_mass"].samples:
        key = (s.labels["keys"], s.labels["depth"])
        sums[key] = sums.get(key, 0.0) + s.value
    drafts: dict[str, float] = {}
    for s in fams["drifttool:drafts"].samples:
        drafts[s.labels["depth"]] = drafts.get(s.labels["depth"], 0.0) + s.value
    checked = 0
    for k in range(2, K + 1):
        want = recency_ratio(dd, k)["value"]
        if not np.isfinite(want):
            continue
        assert sums[("self_nonsink", str(k))] / sums[("matched_nonsink", str(k))] == pytest.approx(want, rel=1e-5), k
        checked += 1
        sink = dd.groupby("depth")["sink_mass"].mean()
        assert (sums[("sink", str(k))] / drafts[str(k)]) / (sums[("sink", "1")] / drafts["1"]) == pytest.approx(
            sink[k] / sink[1], rel=1e-5)
    assert checked >= 1
    ctx = {s.labels["context"] for s in fams["drifttool:drafts"].samples if s.value > 0}
    assert ctx == set(context_bucket(dd["context_len"].to_numpy()))  # the rows' own buckets, nothing else
