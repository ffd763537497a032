"""The monitor's replay, off the serving path: a child process of vLLM's worker (`python -m
drifttool.monitor.replay_worker ...`) that takes spooled requests (DIR/spool/RUN/, oldest first, up to
REPLAY_BATCH at a time), replays each through drifttool's drafter exactly as `capture --engine vllm` does
(`replay_prompts`, the shard tables of `prompt_shard`), adds it to the rolling segments and the metrics, and
writes the metrics snapshot. A request that cannot be replayed is counted (`drifttool:replay_errors_total`) and
quarantined (DIR/spool/RUN/quarantine/, kept), never taking the batch's other requests with it; the served request
never waits for any of this. A write that fails (a full disk, no permission) is counted and the request stays
spooled, retried when the cause goes. It stops, after the batch in hand, when its parent closes its stdin (the worker
ended), on SIGTERM, or when its parent dies (Linux: PR_SET_PDEATHSIG): what is still spooled stays on disk, and the
next server start replays an earlier run's leftovers first (at most the spool bound, counted, then removed)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DriftError
from .logs import OncePerKind
from .metrics import WRITE_REASONS

POLL_S = 0.2
REPLAY_BATCH = 16  # spooled requests replayed side by side (each alone when the batch fails)
SNAPSHOT_S = 2.0
FAULT_ENV = "DRIFTTOOL_MONITOR_FAULT"  # tests: "replay" makes every replay raise (the error path, end to end)
FAULT_FILE = ".drifttool-test-fault"  # tests of a running server: DIR/.drifttool-test-fault holding "replay" does too


QUARANTINE = "quarantine"  # DIR/spool/RUN/quarantine/: requests that could not be replayed, kept (counted) not deleted
QUARANTINE_KEEP = 64  # the newest this many quarantined requests are kept for a look; older ones removed (bounded)
_UNREADABLE = object()  # the meta of a job whose meta file is not JSON
_JOB = re.compile(r"^job-(\d+)$")
LOG = OncePerKind()  # the replay's repeated failures (segments, snapshots), told once a minute per kind


@dataclass
class Job:
    base: Path  # DIR/spool/RUN/job-N (.safetensors / .json: the events; .meta.json: written last); N any width
    meta: Any  # the meta file's JSON (checked by meta_problem before use), or _UNREADABLE
    events: list | None = None  # the request's recorded events, read by `load_events`

    def remove(self) -> None:
        """The job's files, once its request is in a segment."""
        for suffix in (".meta.json", ".json", ".safetensors"):
            self.base.with_suffix(suffix).unlink(missing_ok=True)

    def quarantine(self) -> None:
        """The job's files moved (never deleted) to the spool's quarantine folder, out of the replay's way."""
        q = self.base.parent / QUARANTINE
        for suffix in (".json", ".safetensors", ".meta.json"):  # the meta last: a half-moved job is not pending
            f = self.base.with_suffix(suffix)
            try:
                q.mkdir(mode=0o700, exist_ok=True)
                os.replace(f, q / f.name)
            except FileNotFoundError:
                continue
            except OSError:  # cannot be moved: out of the way all the same, else it would block the spool
                f.unlink(missing_ok=True)
        prune_quarantine(q)


def prune_quarantine(q: Path, keep: int = QUARANTINE_KEEP) -> int:
    """At most `keep` requests in a quarantine folder, the oldest (by name order, job numbers rising) removed with
    all their files: a replay that fails on every request no longer fills the disk. Returns how many went."""
    if not q.is_dir():
        return 0
    bases = sorted({f.name.split(".", 1)[0] for f in q.iterdir() if f.is_file() and not f.is_symlink()},
                   key=lambda b: (int(_JOB.match(b).group(1)) if _JOB.match(b) else sys.maxsize, b))
    gone = bases[:max(0, len(bases) - keep)]
    for b in gone:
        for f in q.glob(f"{b}.*"):
            f.unlink(missing_ok=True)
    return len(gone)


def _plain(f: Path) -> bool:
    """A regular file, not a link: nothing planted in the spool is followed elsewhere."""
    return not f.is_symlink() and f.is_file()


def _order(meta: Path) -> tuple[int, str]:
    m = _JOB.match(meta.name.removesuffix(".meta.json"))
    return (int(m.group(1)) if m else sys.maxsize, meta.name)


def pending(spool: Path, limit: int) -> list[Job]:
    """Spooled requests whose meta file (written last) exists, oldest first by number (no fixed width); an
    unreadable meta is a job too (quarantined by the batch, so it cannot starve the good ones behind it)."""
    out = []
    for meta in sorted(spool.glob("job-*.meta.json"), key=_order):
        if len(out) >= limit:
            break
        try:
            data: Any = json.loads(meta.read_text()) if _plain(meta) else _UNREADABLE
        except ValueError:
            data = _UNREADABLE
        except OSError:  # gone between listing and reading
            continue
        out.append(Job(meta.with_name(meta.name.removesuffix(".meta.json")), data))
    return out


def load_events(job: Job) -> str | None:
    """Read the job's recorded events for its key into `job.events`; what is wrong with them, or None."""
    from ..run.engines.vllm.events import read_events

    links = [f.name for f in (job.base.with_suffix(".json"), job.base.with_suffix(".safetensors"))
             if f.exists() and not _plain(f)]
    if links:
        return f"events file {links[0]} is not a regular file (a link is not followed)"
    try:
        evs = read_events(job.base)
    except Exception as e:  # noqa: BLE001 - a truncated or missing events file is this request's problem only
        return f"events unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if job.meta["key"] not in evs:
        return f"events hold no request {job.meta['key']!r} (they hold {len(evs)} other(s))"
    job.events = evs[job.meta["key"]]
    return None


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in v)


def sample_tag(meta: dict) -> str:
    """The prompt's tag saying why it was sampled (a spool written before the selections: uniform)."""
    from .sampling import REASONS

    why = meta.get("sample", "uniform")
    return f"sample:{why if why in REASONS else 'uniform'}"


def meta_problem(meta: Any) -> str | None:
    """What is wrong with a spooled request's meta file (None: nothing), checked before anything is counted: the
    key, the token ids and the end time the replay and its lag read."""
    if meta is _UNREADABLE:
        return "meta file is not valid JSON (or not a regular file)"
    if not isinstance(meta, dict):
        return f"meta is a JSON {type(meta).__name__}; expected an object"
    if not isinstance(meta.get("key"), str) or not meta["key"]:
        return "field 'key' missing or not a non-empty string"
    for k in ("prompt_ids", "output_ids"):
        if not _ids(meta.get(k)):
            return f"field {k!r} missing or not a list of token ids (integers >= 0)"
    if not meta["prompt_ids"]:
        return "field 'prompt_ids' is empty"
    t = meta.get("t_end")
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        return f"field 't_end' is {t!r}; expected the request's end time as a number (seconds since the epoch)"
    return None


def lag(t_end: float, now: float) -> tuple[float, bool]:
    """Seconds from a request's end to now, and whether it was clamped to 0 (the worker's clock ahead of ours)."""
    d = now - float(t_end)
    return (0.0, True) if d < 0 else (d, False)


class Replayer:
    """The drafter and settings of one served drafter, loaded once; `replay(jobs)` -> shards and metrics."""

    def __init__(self, args: argparse.Namespace, folder: Path):
        import torch

        from ..run.drafters import DrafterSpec, load_drafters
        from ..run.engines.vllm.target_info import TargetInfo
        from ..run.runner import RunSettings
        from ..trace.sinks import SinkSpec

        torch.set_num_threads(max(1, args.threads))
        self.info = TargetInfo(args.target)
        self.name = args.name
        # the server's dtype (attach passes vLLM's model dtype): a bf16 server's features replayed through a float32
        # drafter differ from vLLM's bf16 drafter by bf16 rounding alone, and were flagged as disagreements
        self.settings = RunSettings.of(depth=args.depth, sink=SinkSpec(), dtype=args.dtype)
        self.models = load_drafters([DrafterSpec(args.name, args.drafter)], self.info.shape(), "cpu",
                                    self.settings.torch_dtype)
        self.drafter = self.models[args.name]
        self.info.set_aux_layer_ids(self.drafter.config.input_aux_layer_ids)
        self.labels = {"model_name": args.model, "engine": args.engine, "drafter": args.name}
        self.dir = folder  # the monitor's folder (its test-fault file)
        self.rejection = str(getattr(args, "rejection", "standard"))  # the server's rejection_sample_method

    def manifest(self, sample: float, every: float = 0.0, long: int = 0) -> dict[str, Any]:
        from ..run.engines.vllm.crosscheck import tolerance
        from ..run.manifest import build_manifest

        st = self.settings
        cap = {**st.recorded({"path": "live requests (vllm serve, sampled)", "n_prompts": 0, "limit": None}),
               "max_new_tokens_rule": "the request's", "template_ids": list(self.info.template_ids),
               "engine": "vllm-serve-monitor", "shard_key": "DRAFTER:PROMPT",
               "sink_rule": "first:4 (the monitor does not read the target's attention)",
               "monitor": {"sample": sample, "every": every, "long": long,
                           "selected": "prompts tagged sample:cadence or sample:long were selected, not drawn "
                                       "uniformly (sample:uniform)",
                           "prompt_ids": "a hash of vLLM's request id, never its text"},
               "vllm": {"replay_tolerance": tolerance(st.dtype)},
               "draft_sampling": "greedy (vLLM's draft_sample_method)",
               "rejection": self.rejection}
        return build_manifest(self.info, str(self.info.path), self.models, cap)

    def replay(self, jobs: list[Job]) -> list[tuple[Job, dict, dict, str | None]]:
        """(job, shard tables, sampled rows, replay problem or None) per job (checked, events loaded), all replayed
        side by side, exactly as `capture --engine vllm` replays (engine.replay_served)."""
        from ..run.engines.vllm.engine import Served, replay_served
        from ..run.probes import Probe

        if os.environ.get(FAULT_ENV) == "replay" or _fault_file(self.dir) == "replay":
            raise DriftError("replay failure injected for a test")
        served = [Served(Probe(id=j.meta["key"], token_ids=j.meta["prompt_ids"], tags=["live", sample_tag(j.meta)]),
                         j.meta["prompt_ids"],
                         len(j.meta["output_ids"]), j.meta["output_ids"], j.events or []) for j in jobs]
        out = replay_served(self.settings, self.info.template_ids, self.name, self.drafter, served)
        return [(j, tabs, rows, problem) for j, (_, tabs, rows, problem, _) in zip(jobs, out)]


def _fault_file(folder: Path) -> str:
    try:
        return (folder / FAULT_FILE).read_text().strip()
    except OSError:
        return ""


LOCK = ".replaying"  # DIR/spool/RUN/.replaying: held (flock) by the run's replay process while it lives
BACKOFF_S = 5.0  # after a failed segment write: wait before replaying again (the disk is full, say)


def hold(spool: Path):
    """Take this run's spool lock for the life of the process (another server's start sees the run as live)."""
    import fcntl

    spool.mkdir(parents=True, exist_ok=True)
    fh = open(spool / LOCK, "a")  # noqa: SIM115 - held until the process exits
    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fh


def _dead(run: Path) -> bool:
    """An earlier run's spool whose replay process is gone (its lock free, or never taken)."""
    import fcntl

    f = run / LOCK
    if not f.exists():
        return True
    try:
        with open(f, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fh, fcntl.LOCK_UN)
        return True
    except OSError:
        return False


def server_start(run: str) -> str:
    """The server start a run id belongs to (a data-parallel engine's `-eK` suffix dropped: monitor/attach.run_id)."""
    return re.sub(r"-e\d+$", "", run)


def leftover_runs(root: Path, run: str) -> list[Path]:
    """Earlier runs' spool folders under DIR/spool/ (not this server start's: its other engines' spools may not be
    locked yet; not a live server's), oldest name first."""
    if not root.is_dir():
        return []
    mine = server_start(run)
    return sorted(p for p in root.iterdir() if server_start(p.name) != mine and p.is_dir() and not p.is_symlink()
                  and _dead(p))


def counters_at_zero(agg, labels: dict[str, str], depth: int) -> None:
    """Every series the replay writes, present from the start at 0 (the reasons: metrics.write_reason's)."""
    for name in ("replayed", "replay_errors", "replay_quarantined", "replay_disagreements", "rounds",
                 "replay_lag_clamped", "leftovers_replayed", "leftovers_dropped"):
        agg.inc(name, labels, 0)
    for reason in WRITE_REASONS:
        agg.inc("replay_write_errors", {**labels, "reason": reason}, 0)
        agg.inc("snapshot_write_errors", {**labels, "process": "replay", "reason": reason}, 0)
    agg.zero_depths(labels, depth)
    agg.set("last_replay_timestamp_seconds", {**labels, "process": "replay"}, 0)
    agg.set("heartbeat_timestamp_seconds", {**labels, "process": "replay"}, time.time())


class Snapshot:
    """The replay's metrics snapshot, written with its heartbeat; a failed write is counted, never fatal."""

    def __init__(self, agg, labels: dict[str, str], path: Path):
        self.agg, self.labels, self.path, self.last = agg, labels, path, 0.0

    def write(self) -> None:
        from .metrics import write_reason

        self.last = time.time()
        self.agg.set("heartbeat_timestamp_seconds", {**self.labels, "process": "replay"}, self.last)
        e = self.agg.write_kept(self.path)  # a full disk: kept in memory-backed storage, still scraped
        if e is not None:
            reason = write_reason(e)
            self.agg.inc("snapshot_write_errors", {**self.labels, "process": "replay", "reason": reason})
            self.agg.write_kept(self.path)
            LOG.tell(f"snapshot:{reason}", f"metrics snapshot not written ({_why(e)}); its counts are served from "
                     "memory-backed storage meanwhile (drifttool:snapshot_write_errors_total)")

    def due(self) -> bool:
        return time.time() - self.last >= SNAPSHOT_S


def serve(args: argparse.Namespace, stop: threading.Event, drain: bool = False) -> None:
    """Replay earlier runs' leftovers, then this run's spooled requests until `stop` (after the batch in hand; with
    `drain`, only once the spool is empty too)."""
    from .metrics import Aggregates
    from .segments import SegmentWriter
    from .settings import MonitorSettings

    s = MonitorSettings.parse(args.settings, probe=False)
    spool, snap_path = s.dir / "spool" / args.run, s.dir / "metrics" / f"{args.run}-replay.json"
    try:
        lock = hold(spool)  # noqa: F841 - held while this process lives
    except BlockingIOError:
        print(f"drifttool monitor: {spool}: another replay process holds this run's spool; this one stops (no "
              "request is lost: the other replays them)", file=sys.stderr, flush=True)
        return 0
    rep = Replayer(args, s.dir)
    agg = Aggregates()
    counters_at_zero(agg, rep.labels, args.depth)
    snap = Snapshot(agg, rep.labels, snap_path)
    snap.write()
    segs = SegmentWriter(s.dir / "segments", rep.manifest(s.sample, s.every, s.long), s.segment_requests, s.keep_segments, s.max_bytes,
                         engine=int(args.engine) if str(args.engine).isdigit() else 0)
    try:
        replay_leftovers(rep, segs, agg, snap, spool.parent, args.run, s.spool, threading.Event() if drain else stop)
        while not (stop.is_set() and not drain):
            jobs = pending(spool, REPLAY_BATCH)
            if not jobs:
                if stop.is_set():
                    return
                if snap.due():
                    snap.write()
                time.sleep(POLL_S)
                continue
            if one_batch(rep, segs, agg, jobs) and not stop.is_set():
                snap.write()
                stop.wait(BACKOFF_S)
            snap.write()
    finally:
        try:
            segs.close()
        except Exception as e:  # noqa: BLE001 - the open segment stays a partial trace, readable
            print(f"drifttool monitor: the open segment was not finished ({_why(e)}); it stays a partial trace",
                  file=sys.stderr, flush=True)
        snap.write()


def replay_leftovers(rep, segs, agg, snap, root: Path, run: str, bound: int, stop: threading.Event) -> None:
    """Earlier runs' spooled requests (a restart, a SIGTERM that killed their replay): at most `bound` replayed
    (counted as leftovers_replayed), the rest removed (leftovers_dropped), then each run's folder removed (one with
    a quarantine is kept for a look, its pending jobs gone)."""
    import shutil

    budget = bound
    for folder in leftover_runs(root, run):
        jobs = pending(folder, sys.maxsize)
        while jobs and budget > 0 and not stop.is_set():
            batch, jobs = jobs[: min(REPLAY_BATCH, budget)], jobs[min(REPLAY_BATCH, budget):]
            if one_batch(rep, segs, agg, batch, leftover=True):
                return  # segments cannot be written: the rest waits for the next start
            budget -= len(batch)
            snap.write()
        if stop.is_set():
            return
        for j in jobs:
            j.remove()
            agg.inc("leftovers_dropped", rep.labels)
        for f in list(folder.iterdir()):  # what a kill left half-written: events without a meta, temporary files
            if f.is_file() and f.name != LOCK:
                f.unlink(missing_ok=True)
        if not (folder / QUARANTINE).exists():
            shutil.rmtree(folder, ignore_errors=True)
        else:
            (folder / LOCK).unlink(missing_ok=True)
    snap.write()


def one_batch(rep: Replayer, segs, agg, jobs: list[Job], leftover: bool = False) -> bool:
    """Replay, write and count one batch, request by request: a request that cannot be replayed (its meta, its
    events, its replay, its shard) is counted as a replay error and quarantined; the others are replayed, written
    and only then removed. A shard that cannot be written for lack of space or permission leaves its request
    spooled (counted under replay_write_errors, retried later): returns True then. Never raises."""
    from .metrics import write_reason

    blocked = False
    ready = []
    for j in jobs:
        why = meta_problem(j.meta) or load_events(j)
        if why is None:
            ready.append(j)
        else:
            _fail(rep, agg, j, why)
    for j, done in _replayed(rep, ready):
        if isinstance(done, str):
            _fail(rep, agg, j, done)
            continue
        if blocked:
            continue  # the disk is full: the rest of the batch stays spooled too
        try:
            _write(rep, segs, agg, j, *done, leftover=leftover)
        except Exception as e:  # noqa: BLE001 - the monitor must never stop on one request
            reason = write_reason(e)
            if reason in ("disk_full", "permission"):
                agg.inc("replay_write_errors", {**rep.labels, "reason": reason})
                LOG.tell(f"segment:{reason}", f"{j.base.name}: segment not written ({_why(e)}); kept in the spool, "
                         f"retried in {BACKOFF_S:g} s")
                blocked = True
                continue
            _fail(rep, agg, j, f"shard not written ({_why(e)})")
            continue
        j.remove()
    return blocked


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _replayed(rep: Replayer, jobs: list[Job]) -> list[tuple[Job, tuple | str]]:
    """Each job with (tables, rows, problem) or why its replay failed: side by side, and when that fails, each
    request alone (one failing request never fails the others)."""
    if not jobs:
        return []
    try:
        return [(j, (tabs, rows, problem)) for j, tabs, rows, problem in rep.replay(jobs)]
    except Exception as e:  # noqa: BLE001
        if len(jobs) == 1:
            return [(jobs[0], f"replay failed ({_why(e)})")]
    return [pair for j in jobs for pair in _replayed(rep, [j])]


def _write(rep: Replayer, segs, agg, j: Job, tabs: dict, rows: dict, problem: str | None,
           leftover: bool = False) -> None:
    """One replayed request into its segment, then into the counts (the shard first: nothing is counted twice)."""
    from .metrics import OTHER_HISTOGRAMS

    segs.add(f"{rep.name}:{j.meta['key']}", tabs, rows, problem)
    agg.add_request(tabs["depths"], rep.labels, tabs.get("heads"))
    agg.inc("leftovers_replayed" if leftover else "replayed", rep.labels)  # replayed <= this run's samples
    agg.set("last_replay_timestamp_seconds", {**rep.labels, "process": "replay"}, time.time())
    if problem is not None:
        agg.inc("replay_disagreements", rep.labels)
    if leftover:
        return  # an earlier run's request: its lag is the restart's, not the replay's
    seconds, clamped = lag(j.meta["t_end"], time.time())
    if clamped:
        agg.inc("replay_lag_clamped", rep.labels)
    agg.observe("replay_lag_seconds", rep.labels, seconds, OTHER_HISTOGRAMS["replay_lag_seconds"][0])


def _fail(rep: Replayer, agg, j: Job, why: str) -> None:
    """A request that cannot be replayed: counted, one line, its files quarantined (kept for a look, out of the way)."""
    agg.inc("replay_errors", rep.labels)
    agg.inc("replay_quarantined", rep.labels)
    print(f"drifttool monitor: {j.base.name}: {why}; not replayed, moved to {j.base.parent / QUARANTINE}",
          file=sys.stderr, flush=True)
    j.quarantine()


def _watch_stdin(stop: threading.Event) -> None:
    try:  # os.read, not sys.stdin: a daemon thread blocked in a buffered read aborts the interpreter's exit
        fd = sys.stdin.fileno()
        while os.read(fd, 1):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def python_ancestors(pid: int | None = None) -> list[tuple[int, str]]:
    """(pid, start time) of the processes above `pid` (default: this one) that run this very interpreter, nearest
    first, read from /proc (Linux; [] elsewhere): vLLM's worker, engine core and API server above the replay, not the
    shell that started them. The start time tells a reused pid from the process itself."""
    out, me = [], Path(f"/proc/{pid or os.getpid()}")
    try:
        exe = os.readlink(me / "exe")
        cur = _stat(me)[1]
        while cur > 1 and os.readlink(f"/proc/{cur}/exe") == exe:
            start, parent, _ = _stat(Path(f"/proc/{cur}"))
            out.append((cur, start))
            cur = parent
    except (OSError, ValueError, IndexError):
        pass
    return out


def _stat(proc: Path) -> tuple[str, int, str]:
    """(start time, parent pid, state) from /proc/PID/stat (fields after the command name, which may hold spaces)."""
    rest = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    return rest[19], int(rest[1]), rest[0]


def alive(pid: int, start: str) -> bool:
    """The process that started at `start` still runs (a zombie, killed but not yet reaped by its parent, does not)."""
    try:
        began, _, state = _stat(Path(f"/proc/{pid}"))
    except (OSError, ValueError, IndexError):
        return False
    return began == start and state not in ("Z", "X")


def _watch_ancestors(stop: threading.Event, ancestors: list[tuple[int, str]], every: float = 2.0) -> None:
    """Stop when any process above us dies (a kill -9 of vLLM's API server leaves its engine core, and so this
    process's own parent, alive: the replay must not outlive the server)."""
    while not stop.wait(every):
        if not all(alive(p, t) for p, t in ancestors):
            print("drifttool monitor: the vLLM server above this replay is gone; the replay stops (stop vLLM's "
                  "remaining processes with `kill -- -PGID`, docs/monitor.md)", file=sys.stderr, flush=True)
            stop.set()
            return


def _die_with_parent() -> None:
    """Linux: SIGTERM when the worker that started us dies, however it dies (kill -9 included), so the replay
    never outlives its server; elsewhere the closed stdin does it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the call
            os.kill(os.getpid(), signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m drifttool.monitor.replay_worker")
    for name in ("--settings", "--run", "--target", "--drafter", "--name", "--model"):
        ap.add_argument(name, required=True)
    ap.add_argument("--engine", default="0", help="vLLM's engine index (the engine label)")
    ap.add_argument("--depth", type=int, required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rejection", default="standard")  # vLLM's rejection_sample_method (recorded)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-stdin", action="store_true", help="run until the spool is empty (tests, one-off replay)")
    ap.add_argument("--nice", type=int, default=10, help="scheduling niceness: serving comes first (0: as the server)")
    args = ap.parse_args(argv)
    if args.nice and hasattr(os, "nice"):
        os.nice(args.nice)
    stop = threading.Event()
    if args.no_stdin:
        stop.set()
    else:
        _die_with_parent()
        threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
        threading.Thread(target=_watch_ancestors, args=(stop, python_ancestors()), daemon=True).start()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the batch in hand is finished; the rest stays spooled
    try:
        serve(args, stop, drain=args.no_stdin)
    except DriftError as e:
        print(f"drifttool monitor: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
