"""The monitor under faults an operator meets (issue #52): a full disk mid-run (on a real, small tmpfs where this
machine may mount one; a library's own write exception everywhere), a SIGTERM with requests still spooled, a restart
that finds an earlier run's leftovers (replayed at most to the spool bound, counted, removed), a live run beside it
(never taken), and the replay child outliving its parent (it must not). Nothing sampled is lost silently: every
request is either in a segment, still spooled, or counted under a reason."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from drifttool.monitor import replay_worker
from drifttool.monitor.attach import Finished, WorkerMonitor, request_key, worker_counters
from drifttool.monitor.logs import OncePerKind
from drifttool.monitor.metrics import read_snapshots
from drifttool.monitor.segments import segments
from drifttool.monitor.settings import MonitorSettings
from drifttool.trace.reader import read_trace
from tests.monitor.test_monitor_offline import RUN, args, spool
from tests.support.capture import child_env

LABELS = {"model_name": "tiny", "engine": "0", "drafter": "eagle3"}


@contextlib.contextmanager
def small_disk(path: Path, size: str = "6m"):
    """A real tmpfs of `size` at `path` (root and mount needed; the test is skipped where they are not)."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): the fault-injection test "
                    "beside this one covers the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path) -> Path:
    """Write a ballast file until the filesystem is full; returns it (delete it to give the space back)."""
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (64 << 10, 4096, 1):  # to the last byte: the smallest write fails too
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        with pytest.raises(OSError) as e:
            os.write(fd, b"\0")
        assert e.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return ballast


def worker(mon: Path, bound: int = 64) -> WorkerMonitor:
    """The worker's spool half as vLLM's worker runs it (no vLLM: recorder and child are not needed here)."""
    w = object.__new__(WorkerMonitor)
    w.s = MonitorSettings.parse(f"sample=1,dir={mon},spool={bound}")
    w.run, w.spool = RUN, mon / "spool" / RUN
    w.spool.mkdir(parents=True, exist_ok=True)
    w.labels, w.agg = dict(LABELS), worker_counters(LABELS)
    w.snapshot, w.seq, w.stopping = mon / "metrics" / f"{RUN}-worker.json", 0, threading.Event()
    w.log = OncePerKind()
    import queue

    w.q = queue.Queue(maxsize=8)
    return w


def jobs(reqs, n: int) -> list[Finished]:
    return [Finished(request_key(f"{rid}-{i}"), ev, prompt, out, time.time())
            for i, (rid, prompt, ev, out) in enumerate((reqs * n)[:n])]


def dropped(agg, reason: str) -> float:
    return agg.counters.get(("samples_dropped", tuple(sorted({**LABELS, "reason": reason}.items()))), 0.0)


def until(cond, timeout: float = 600.0) -> None:  # a hang guard, not a speed bar
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.05)


def counters(mon: Path, run: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for snap in read_snapshots(mon / "metrics", run):
        for c in snap["counters"]:
            key = c["name"] + (f"[{c['labels']['reason']}]" if "reason" in c["labels"] else "")
            out[key] = out.get(key, 0.0) + c["value"]
    return out


def test_a_full_disk_is_counted_and_the_spool_recovers_when_space_returns(served, tmp_path, capfd):
    """While the disk is full the counts keep reaching the scrape (the snapshot is mirrored on memory-backed
    storage), a failed snapshot is not called a dropped request, and the log says each kind of failure once."""
    import shutil

    from drifttool.monitor.metrics import mirror_dir

    root, reqs = served
    with small_disk(tmp_path / "disk") as disk:
        mon = disk / "mon"
        w = worker(mon)
        t = threading.Thread(target=w._spool_loop, daemon=True)
        t.start()
        try:
            first, *rest = jobs(reqs, 4)
            w.q.put(first)
            until(lambda: len(list(w.spool.glob("job-*.meta.json"))) == 1)
            ballast = fill(disk)
            for j in rest[:2]:
                w.q.put(j)
            until(lambda: dropped(w.agg, "disk_full") == 2)
            left = sorted(f.name for f in w.spool.iterdir())
            assert all(n.startswith("job-000000001") for n in left), left  # no half-written job stays behind
            assert t.is_alive()  # the spool thread lives on
            # during the fault, as a scrape reads it: both drops and the failed snapshot writes, a fresh heartbeat
            until(lambda: counters(mon, RUN).get("samples_dropped[disk_full]") == 2
                  and counters(mon, RUN).get("snapshot_write_errors[disk_full]", 0) >= 1)
            beat = [g["value"] for snap in read_snapshots(mon / "metrics", RUN) for g in snap["gauges"]
                    if g["name"] == "heartbeat_timestamp_seconds"]
            assert beat and time.time() - max(beat) < 10
            err = capfd.readouterr().err
            assert err.count("spool write failed") == 1, err  # two drops, one line (the second held back)
            assert "snapshot not written" in err and "samples_dropped" not in err.split("snapshot not written")[1]
            ballast.unlink()
            t_back = time.time()
            w.q.put(rest[2])
            until(lambda: (w.spool / "job-000000004.meta.json").exists())
            until(lambda: (snap := json.loads(w.snapshot.read_text())) and any(
                g["name"] == "heartbeat_timestamp_seconds" and g["value"] >= t_back for g in snap["gauges"]))
            c = counters(mon, RUN)
            assert c["samples_dropped[disk_full]"] == 2 and c["samples"] == 0  # (samples counts in finished())
            assert not (mirror_dir(mon / "metrics") / f"{RUN}-worker.json").exists()  # the disk's copy again
        finally:
            w.stopping.set()
            t.join(5)
            shutil.rmtree(mirror_dir(mon / "metrics"), ignore_errors=True)


def test_a_librarys_own_write_exception_is_counted_not_fatal(served, tmp_path, monkeypatch):
    """safetensors raises SafetensorError (not an OSError) when it cannot write: counted as write_error."""
    from safetensors import SafetensorError

    from drifttool.run.engines.vllm import events

    root, reqs = served
    w = worker(tmp_path / "mon")
    real = events.write_events
    monkeypatch.setattr(events, "write_events", lambda *a, **k: (_ for _ in ()).throw(SafetensorError("I/O error")))
    a, b = jobs(reqs, 2)
    w._spool(a)
    assert dropped(w.agg, "write_error") == 1 and not list(w.spool.iterdir())
    monkeypatch.setattr(events, "write_events", real)
    w._spool(b)
    assert len(list(w.spool.glob("job-*.meta.json"))) == 1


def test_the_spool_bound_counts_earlier_runs_leftovers(served, tmp_path):
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs)  # 4 requests of run RUN
    w = worker(mon, bound=5)
    w.run, w.spool = "later", mon / "spool" / "later"
    w.spool.mkdir()
    a, b = jobs(reqs, 2)
    w._spool(a)
    w._spool(b)
    assert dropped(w.agg, "spool_full") == 1 and len(list(w.spool.glob("job-*.meta.json"))) == 1


def test_a_replay_on_a_full_disk_keeps_requests_and_writes_them_when_space_returns(served, tmp_path, monkeypatch):
    root, reqs = served
    monkeypatch.setattr(replay_worker, "BACKOFF_S", 0.2)
    with small_disk(tmp_path / "disk", "24m") as disk:
        mon = disk / "mon"
        spool(mon, reqs)
        argv = args(root, mon)
        ballast = fill(disk)
        a = replay_worker.argparse.Namespace(**{k.lstrip("-").replace("-", "_"): v for k, v in zip(
            argv[:-1:2], argv[1:-1:2])}, engine="0", dtype="float32", threads=1)
        a.depth = int(a.depth)
        stop = threading.Event()
        t = threading.Thread(target=replay_worker.serve, args=(a, stop), daemon=True)
        t.start()
        time.sleep(4)  # the replay runs and fails to write, again and again
        assert len(list((mon / "spool" / RUN).glob("job-*.meta.json"))) == 4  # nothing lost, nothing quarantined
        during = counters(mon, RUN)  # as a scrape reads it while the disk is full (the mirrored snapshot)
        assert during.get("replay_write_errors[disk_full]", 0) >= 1, during
        assert not (mon / "spool" / RUN / "quarantine").exists()
        assert len(list((mon / "segments").glob("seg-*"))) <= 1  # no empty segment folder per retry
        ballast.unlink()
        until(lambda: not list((mon / "spool" / RUN).glob("job-*.meta.json")), 120)
        stop.set()
        t.join(60)
        assert not t.is_alive()
        c = counters(mon, RUN)
        assert c["replayed"] == 4 and c["replay_errors"] == 0 and c["replay_write_errors[disk_full]"] >= 1, c
        assert sum(len(read_trace(p).table("prompts")) for p in segments(mon / "segments")) == 4


_SPAWNED: list = []  # processes (Popen, or pids) a test started: killed after it, whether it passed or failed


@pytest.fixture(autouse=True)
def _reap_children():
    """A failing test used to leave its replay child running (one ran 17+ minutes): every process a test started
    is killed when it ends."""
    yield
    while _SPAWNED:
        p = _SPAWNED.pop()
        with contextlib.suppress(ProcessLookupError, OSError, subprocess.TimeoutExpired):
            if isinstance(p, int):  # a pid: only while it is still the replay (never a reused pid)
                if b"replay_worker" in Path(f"/proc/{p}/cmdline").read_bytes():
                    os.kill(p, signal.SIGKILL)
            elif p.poll() is None:
                p.kill()
                p.wait(10)


def child(root, mon, run: str, per: int = 2, stdin: bool = True) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "drifttool.monitor.replay_worker",
           *[x if x != RUN else run for x in args(root, mon, per=per)]]
    if stdin:
        cmd.remove("--no-stdin")
    p = subprocess.Popen(cmd, env=child_env(), stdin=subprocess.PIPE if stdin else None,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _SPAWNED.append(p)
    return p


def test_sigterm_leaves_pending_requests_spooled_and_the_next_start_replays_them(served, tmp_path):
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs, copies=15)  # 60 requests
    proc = child(root, mon, RUN)
    until(lambda: len(segments(mon / "segments")) >= 2 or proc.poll() is not None, 180)
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    left = len(list((mon / "spool" / RUN).glob("job-*.meta.json")))
    done = sum(len(read_trace(p).table("prompts")) for p in segments(mon / "segments"))
    assert left > 0 and done + left == 60  # every request either written or still spooled
    assert replay_worker.main([x if x != RUN else "next" for x in args(root, mon, per=8)]) == 0
    c = counters(mon, "next")
    assert c["leftovers_replayed"] == left and c["leftovers_dropped"] == 0 and c["replay_errors"] == 0
    # an earlier run's requests count as leftovers only: replayed never exceeds this run's samples (none here)
    assert c["replayed"] == 0 and counters(mon, RUN)["replayed"] + c["leftovers_replayed"] == 60
    assert not (mon / "spool" / RUN).exists()  # the earlier run's folder, emptied, is removed


def test_leftovers_beyond_the_bound_are_dropped_and_counted_and_a_live_run_is_left_alone(served, tmp_path):
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs, copies=3)  # 12 requests of a dead run
    live = mon / "spool" / "zz-live"
    live.mkdir()
    (live / "job-000000001.meta.json").write_text("{}")
    with open(live / replay_worker.LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # another server's replay holds its run
        a = [x if x != RUN else "next" for x in args(root, mon, per=4)]
        s = MonitorSettings.parse(f"sample=1,dir={mon},segment_requests=4,spool=5")
        a[a.index("--settings") + 1] = s.to_env()
        assert replay_worker.main(a) == 0
    c = counters(mon, "next")
    assert c["leftovers_replayed"] == 5 and c["leftovers_dropped"] == 7
    assert not (mon / "spool" / RUN).exists() and (live / "job-000000001.meta.json").exists()


def test_the_replay_child_does_not_outlive_its_parent(served, tmp_path):
    """The worker killed with SIGKILL: its replay child stops (PR_SET_PDEATHSIG and the closed stdin)."""
    root, reqs = served
    mon = tmp_path / "mon"
    spool(mon, reqs, copies=30)
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time\n"
            f"cmd = {[sys.executable, '-m', 'drifttool.monitor.replay_worker', *[x for x in args(root, mon) if x != '--no-stdin']]!r}\n"
            "p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], env=child_env())
    _SPAWNED.append(parent)
    until(lambda: pidfile.exists() and pidfile.read_text().strip(), 60)
    pid = int(pidfile.read_text())
    _SPAWNED.insert(0, pid)  # the grandchild too, should the test fail before it is gone
    until(lambda: len(segments(mon / "segments")) >= 1, 180)
    parent.kill()
    parent.wait(10)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(OSError):  # a zombie re-parented to init: reaped by it, treat as gone
            if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                return True
        return False

    until(gone, 120)
