"""The monitor's replay, off the serving path: a child process of vLLM's worker (`python -m
drifttool.monitor.replay_worker ...`) that takes spooled requests (DIR/spool/RUN/, oldest first, up to
REPLAY_BATCH at a time), replays each through drifttool's drafter exactly as `capture --engine vllm` does
(`replay_prompts`, the shard tables of `prompt_shard`), adds it to the rolling segments and the metrics, and
writes the metrics snapshot. A failing replay is counted (`drifttool:replay_errors_total`) and skipped; the served
request never waits for any of this. It exits when its parent closes its stdin (the worker ended)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import DriftError

POLL_S = 0.2
SNAPSHOT_S = 2.0
FAULT_ENV = "DRIFTTOOL_MONITOR_FAULT"  # tests: "replay" makes every replay raise (the error path, end to end)
FAULT_FILE = ".drifttool-test-fault"  # tests of a running server: DIR/.drifttool-test-fault holding "replay" does too


@dataclass
class Job:
    base: Path  # DIR/spool/RUN/job-NNNNNNNNN (.safetensors / .json: the events; .meta.json: written last)
    meta: dict[str, Any]

    def remove(self) -> None:
        for suffix in (".meta.json", ".json", ".safetensors"):
            self.base.with_suffix(suffix).unlink(missing_ok=True)


def pending(spool: Path, limit: int) -> list[Job]:
    """Spooled requests whose meta file (written last) exists, oldest first."""
    out = []
    for meta in sorted(spool.glob("job-*.meta.json"))[:limit]:
        try:
            out.append(Job(meta.with_name(meta.name.removesuffix(".meta.json")), json.loads(meta.read_text())))
        except (OSError, ValueError):
            continue
    return out


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in v)


def meta_problem(meta: Any) -> str | None:
    """What is wrong with a spooled request's meta file (None: nothing), checked before anything is counted: the
    key, the token ids and the end time the replay and its lag read."""
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
        """(job, shard tables, sampled rows, replay problem or None) per job, all replayed side by side."""
        from ..run.engines.vllm.engine import VllmRun, prompt_shard
        from ..run.engines.vllm.events import read_events
        from ..run.engines.vllm.replay import replay_prompts
        from ..run.hooks import Capture
        from ..run.probes import Probe
        from ..run.runner import prompt_seed

        if os.environ.get(FAULT_ENV) == "replay" or _fault_file(self.dir) == "replay":
            raise DriftError("replay failure injected for a test")
        st = self.settings
        run = VllmRun(None, self.info, str(self.info.path), st, {})
        evs = [next(iter(read_events(j.base).values()), []) for j in jobs]
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
    for name in ("replayed", "replay_errors", "replay_disagreements", "rounds", "replay_lag_clamped"):  # from the start, at 0
        agg.inc(name, rep.labels, 0)
    agg.write(snap)
    segs = SegmentWriter(s.dir / "segments", rep.manifest(s.sample), s.segment_requests, s.keep_segments, s.max_bytes)
    try:
        while True:
            jobs = pending(spool, 16)
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
    """Replay, write and count one batch; any failure counts each job as a replay error (never raises)."""
    from .metrics import OTHER_HISTOGRAMS

    good = []
    for j in jobs:  # a bad meta is one counted error before anything else is counted for it
        why = meta_problem(j.meta)
        if why is None:
            good.append(j)
            continue
        agg.inc("replay_errors", rep.labels)
        print(f"drifttool monitor: {j.base.name}.meta.json: {why}; request not replayed", file=sys.stderr, flush=True)
    try:
        done = rep.replay(good) if good else []
        for j, tabs, rows, problem in done:
            segs.add(f"{rep.name}:{j.meta['key']}", tabs, rows, problem)
            agg.add_request(tabs["depths"], rep.labels)
            agg.inc("replayed", rep.labels)
            if problem is not None:
                agg.inc("replay_disagreements", rep.labels)
            seconds, clamped = lag(j.meta["t_end"], time.time())
            if clamped:
                agg.inc("replay_lag_clamped", rep.labels)
            agg.observe("replay_lag_seconds", rep.labels, seconds, OTHER_HISTOGRAMS["replay_lag_seconds"][0])
    except Exception as e:  # noqa: BLE001 - the monitor must never stop on one request
        agg.inc("replay_errors", rep.labels, float(len(good)))
        print(f"drifttool monitor: replay failed for {len(good)} sampled request(s): {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr, flush=True)
    finally:
        for j in jobs:
            j.remove()


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
