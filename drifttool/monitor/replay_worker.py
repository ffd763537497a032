"""The monitor's replay, off the serving path: a child process of vLLM's worker (`python -m
drifttool.monitor.replay_worker ...`) that takes spooled requests (DIR/spool/RUN/, oldest first, up to
REPLAY_BATCH at a time), replays each through drifttool's drafter exactly as `capture --engine vllm` does
(`replay_prompts`, the shard tables of `prompt_shard`), adds it to the rolling segments and the metrics, and
writes the metrics snapshot. A request that cannot be replayed is counted (`drifttool:replay_errors_total`) and
quarantined (DIR/spool/RUN/quarantine/, kept), never taking the batch's other requests with it; the served request
never waits for any of this. It exits when its parent closes its stdin (the worker ended)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import DriftError

POLL_S = 0.2
REPLAY_BATCH = 16  # spooled requests replayed side by side (each alone when the batch fails)
SNAPSHOT_S = 2.0
FAULT_ENV = "DRIFTTOOL_MONITOR_FAULT"  # tests: "replay" makes every replay raise (the error path, end to end)
FAULT_FILE = ".drifttool-test-fault"  # tests of a running server: DIR/.drifttool-test-fault holding "replay" does too


QUARANTINE = "quarantine"  # DIR/spool/RUN/quarantine/: requests that could not be replayed, kept (counted) not deleted
_UNREADABLE = object()  # the meta of a job whose meta file is not JSON
_JOB = re.compile(r"^job-(\d+)$")


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
        self.models = load_drafters([DrafterSpec(args.name, args.drafter)], self.info.shape(), "cpu", torch.float32)
        self.drafter = self.models[args.name]
        self.info.set_aux_layer_ids(self.drafter.config.input_aux_layer_ids)
        self.settings = RunSettings.of(depth=args.depth, sink=SinkSpec(), dtype=args.dtype)
        self.labels = {"model": args.model, "drafter": args.name}
        self.dir = folder  # the monitor's folder (its test-fault file)

    def manifest(self, sample: float) -> dict[str, Any]:
        from ..run.engines.vllm.crosscheck import tolerance
        from ..run.manifest import build_manifest

        st = self.settings
        cap = {**st.recorded({"path": "live requests (vllm serve, sampled)", "n_prompts": 0, "limit": None}),
               "max_new_tokens_rule": "the request's", "template_ids": list(self.info.template_ids),
               "engine": "vllm-serve-monitor", "shard_key": "DRAFTER:PROMPT",
               "sink_rule": "first:4 (the monitor does not read the target's attention)",
               "monitor": {"sample": sample, "prompt_ids": "a hash of vLLM's request id, never its text"},
               "vllm": {"replay_tolerance": tolerance(st.dtype)},
               "draft_sampling": "greedy (vLLM's draft_sample_method)"}
        return build_manifest(self.info, str(self.info.path), self.models, cap)

    def replay(self, jobs: list[Job]) -> list[tuple[Job, dict, dict, str | None]]:
        """(job, shard tables, sampled rows, replay problem or None) per job (checked, events loaded), all replayed
        side by side."""
        from ..run.engines.vllm.engine import VllmRun, prompt_shard
        from ..run.engines.vllm.replay import replay_prompts
        from ..run.hooks import Capture
        from ..run.probes import Probe
        from ..run.runner import prompt_seed

        if os.environ.get(FAULT_ENV) == "replay" or _fault_file(self.dir) == "replay":
            raise DriftError("replay failure injected for a test")
        st = self.settings
        run = VllmRun(None, self.info, str(self.info.path), st, {})
        evs = [j.events or [] for j in jobs]
        caps = [Capture(self.drafter, sink=st.sink, keep_rows=st.keep_rows, seed=prompt_seed(st.seed, j.meta["key"]),
                        full_every=st.full_every, recent=st.recent, template_ids=tuple(self.info.template_ids))
                for j in jobs]
        work = [(ev, j.meta["prompt_ids"], j.meta["output_ids"]) for ev, j in zip(evs, jobs)]
        out = []
        for j, ev, cap, (records, stats) in zip(jobs, evs, caps, replay_prompts(self.drafter, caps, work, st.depth)):
            probe = Probe(id=j.meta["key"], token_ids=j.meta["prompt_ids"], tags=["live"])
            res = SimpleNamespace(token_ids=j.meta["output_ids"], spec_decode_metrics=None)
            tabs, rows, problem = prompt_shard(run, self.name, self.drafter, probe, j.meta["prompt_ids"],
                                               len(j.meta["output_ids"]), res, ev, float("nan"), cap, records, stats)
            out.append((j, tabs, rows, problem))
        return out


def _fault_file(folder: Path) -> str:
    try:
        return (folder / FAULT_FILE).read_text().strip()
    except OSError:
        return ""


def serve(args: argparse.Namespace, stop: threading.Event) -> None:
    """Replay spooled requests until `stop` (the parent's stdin closed) and the spool is empty."""
    from .metrics import Aggregates
    from .segments import SegmentWriter
    from .settings import MonitorSettings

    s = MonitorSettings.parse(args.settings)
    spool, snap = s.dir / "spool" / args.run, s.dir / "metrics" / f"{args.run}-replay.json"
    rep = Replayer(args, s.dir)
    agg = Aggregates()
    for name in ("replayed", "replay_errors", "replay_quarantined", "replay_disagreements", "rounds",
                 "replay_lag_clamped"):  # present from the start, at 0
        agg.inc(name, rep.labels, 0)
    agg.write(snap)
    segs = SegmentWriter(s.dir / "segments", rep.manifest(s.sample), s.segment_requests, s.keep_segments, s.max_bytes)
    try:
        while True:
            jobs = pending(spool, REPLAY_BATCH)
            if not jobs:
                if stop.is_set():
                    return
                time.sleep(POLL_S)
                continue
            one_batch(rep, segs, agg, jobs)
            agg.write(snap)
    finally:
        segs.close()
        agg.write(snap)


def one_batch(rep: Replayer, segs, agg, jobs: list[Job]) -> None:
    """Replay, write and count one batch, request by request: a request that cannot be replayed (its meta, its
    events, its replay, its shard) is counted as a replay error and quarantined; the others are replayed, written
    and only then removed. Never raises."""
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
        try:
            _write(rep, segs, agg, j, *done)
        except Exception as e:  # noqa: BLE001 - the monitor must never stop on one request
            _fail(rep, agg, j, f"shard not written ({_why(e)})")
            continue
        j.remove()


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


def _write(rep: Replayer, segs, agg, j: Job, tabs: dict, rows: dict, problem: str | None) -> None:
    """One replayed request into its segment, then into the counts (the shard first: nothing is counted twice)."""
    from .metrics import OTHER_HISTOGRAMS

    segs.add(f"{rep.name}:{j.meta['key']}", tabs, rows, problem)
    agg.add_request(tabs["depths"], rep.labels)
    agg.inc("replayed", rep.labels)
    if problem is not None:
        agg.inc("replay_disagreements", rep.labels)
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
    try:
        while sys.stdin.buffer.read(1):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m drifttool.monitor.replay_worker")
    for name in ("--settings", "--run", "--target", "--drafter", "--name", "--model"):
        ap.add_argument(name, required=True)
    ap.add_argument("--depth", type=int, required=True)
    ap.add_argument("--dtype", default="float32")
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
        threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    try:
        serve(args, stop)
    except DriftError as e:
        print(f"drifttool monitor: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
