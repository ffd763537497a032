"""The monitor inside vLLM's worker: after the worker loads its models, the recorder (the capture engine's,
restricted to the sampled requests) is attached to the model runner; each sampled request, when vLLM drops its
state, goes to a bounded queue; one spool thread writes it to DIR/spool/RUN/ (the recorded events as safetensors +
JSON, then its meta file last); a child process (replay_worker) replays the spool. When the queue or the spool is
full the request is dropped and counted — the server never waits. Any error in a hook detaches nothing and raises
nothing into vLLM: it is counted and the request is served as if unmonitored."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DriftError
from .logs import OncePerKind
from .metrics import WRITE_REASONS, Aggregates
from .sampling import Sampler, uniform
from .settings import MonitorSettings

RUN_ENV = "DRIFTTOOL_MONITOR_RUN"  # one id per server start, set in the API server and inherited by its children


def sampled(request_id: str, fraction: float) -> bool:
    """The uniform sampling rule (monitor/sampling.py: the selections beside it)."""
    return uniform(request_id, fraction)


def request_key(request_id: str) -> str:
    """What a trace and a metric may name a request by: a hash of vLLM's id, never the prompt or the id itself."""
    return "r" + hashlib.sha1(request_id.encode()).hexdigest()[:12]


DROP_REASONS = ("queue_full", "spool_full", "disk_full", "permission", "write_error", "record_error")


def worker_counters(labels: dict[str, str]) -> Aggregates:
    """The worker's counters and gauges, every series present from the start at 0 (an alert on a rate needs the
    series)."""
    agg = Aggregates()
    agg.inc("samples", labels, 0)
    for reason in DROP_REASONS:
        agg.inc("samples_dropped", {**labels, "reason": reason}, 0)
    agg.inc("requests_skipped", {**labels, "reason": "no_prompt_ids"}, 0)
    for reason in WRITE_REASONS:
        agg.inc("snapshot_write_errors", {**labels, "process": "worker", "reason": reason}, 0)
    agg.set("last_spool_write_timestamp_seconds", {**labels, "process": "worker"}, 0)
    agg.set("heartbeat_timestamp_seconds", {**labels, "process": "worker"}, time.time())
    return agg


def base_labels(vllm_config, name: str) -> dict[str, str]:
    """model_name, engine and drafter, as vLLM names its own series (engine: the data-parallel rank, vLLM's engine
    index)."""
    mc, spec = vllm_config.model_config, vllm_config.speculative_config
    engine = getattr(getattr(vllm_config, "parallel_config", None), "data_parallel_rank", 0) or 0
    return {"model_name": str(mc.served_model_name or mc.model), "engine": str(int(engine)),
            "drafter": name or Path(str(spec.model)).name}


def spooled(root: Path) -> int:
    """Requests waiting in every run's spool under DIR/spool/ (an earlier run's leftovers count against the bound)."""
    return sum(1 for _ in root.glob("*/job-*.meta.json"))


@dataclass
class Finished:
    key: str
    events: list
    prompt_ids: list[int]
    output_ids: list[int]
    t_end: float
    why: str = "uniform"  # the sampling reason (monitor/sampling.py)


def preflight(vllm_config) -> str | None:
    """Why the monitor cannot record this server (None: it can). Checked before the first request."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or str(getattr(spec, "method", "")) not in ("eagle3", "eagle"):
        return "the server runs no EAGLE-3 drafter (--speculative-config method eagle3)"
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "") != "0" and getattr(vllm_config, "use_v2_model_runner", False):
        return "vLLM's V2 model runner is on (set VLLM_USE_V2_MODEL_RUNNER=0)"
    if str(getattr(spec, "rejection_sample_method", "standard")) == "synthetic":
        return ("rejection_sample_method is 'synthetic': vLLM accepts drafts at a synthetic rate, not by the target, "
                "so acceptance would not be the drafter's (serve with the standard rejection sampler)")
    if not getattr(spec, "enforce_eager", False):
        return ("the drafter runs under CUDA graphs, which hide depths 2..K from the recorder (add "
                '"enforce_eager": true to --speculative-config)')
    par = getattr(vllm_config, "parallel_config", None)
    if int(getattr(par, "pipeline_parallel_size", 1) or 1) > 1:
        return ("pipeline parallelism is on: the drafter runs on the last stage, which the monitor does not attach to "
                "yet (serve with --pipeline-parallel-size 1)")
    if str(getattr(par, "distributed_executor_backend", "") or "") == "ray" and "DRIFTTOOL_" not in os.environ.get(
            "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", "").split(","):
        return ("the Ray executor does not pass DRIFTTOOL_* settings to its workers (set "
                "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY=DRIFTTOOL_)")
    if getattr(vllm_config.cache_config, "enable_prefix_caching", False):
        return ("prefix caching is on: a cached prefix skips the drafter's first pass, which the replay needs (serve "
                "with --no-enable-prefix-caching)")
    return None


def run_id(server_run: str, engine: str) -> str:
    """The worker's run id: the server start's, plus `-eK` for data-parallel engine K > 0, so two engines of one
    server keep their own spool folder, job names, snapshot file and spool lock (they shared them: one engine's
    sampled request overwrote the other's and the second replay died on the lock). The API server's exposition
    reads every `RUN-*.json`, so both engines' snapshots are served."""
    return server_run if str(engine) in ("", "0") else f"{server_run}-e{engine}"


def server_dtype(model_config) -> str:
    """The dtype vLLM serves the model in (its ModelConfig.dtype, a torch dtype), as the replay's --dtype: the replay
    runs the drafter in it, so its tolerance is the one for that dtype."""
    from ..dtypes import dtype_name

    return dtype_name(getattr(model_config, "dtype", "float32"))


class WorkerMonitor:
    """The worker's half: recorder, finished-request hook, queue, spool thread, replay child."""

    def __init__(self, settings: MonitorSettings, runner, vllm_config):
        from ..run.engines.vllm.recorder import VllmRecorder

        self.s, self.runner, self.cfg = settings, runner, vllm_config
        self.labels = base_labels(vllm_config, settings.name)
        self.run = run_id(os.environ.get(RUN_ENV) or f"{int(time.time())}-{os.getpid()}", self.labels["engine"])
        self.spool = settings.dir / "spool" / self.run
        self.spool.mkdir(parents=True, exist_ok=True)
        self.agg, self.snapshot = worker_counters(self.labels), settings.dir / "metrics" / f"{self.run}-worker.json"
        self.q: queue.Queue[Finished] = queue.Queue(maxsize=settings.queue)
        self.rec = VllmRecorder(runner)
        self.sampler = Sampler(settings.sample, settings.every, settings.long)
        self.rec.want = lambda rid: self.sampler.keep(rid, lambda: self._prompt_len(rid))
        self.rec.on_error = self._record_error  # a recording error never reaches vLLM's step
        self.seq = 0
        self.child: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.log = OncePerKind()

    def start(self) -> WorkerMonitor:
        self.rec.attach()
        orig = self.runner._on_request_state_removed
        self.runner._on_request_state_removed = self._removed_wrapper(orig)
        threading.Thread(target=self._spool_loop, name="drifttool-monitor-spool", daemon=True).start()
        self.child = subprocess.Popen(self._child_args(), stdin=subprocess.PIPE, start_new_session=True)
        self._write_snapshot()  # a full disk at start: counted, mirrored, retried every second
        return self

    def _write_snapshot(self) -> None:
        """The worker's snapshot (its heartbeat); a failed write is counted under snapshot_write_errors and the
        snapshot kept in memory-backed storage meanwhile (metrics.Aggregates.write_kept): nothing is dropped."""
        from .metrics import write_reason

        e = self.agg.write_kept(self.snapshot)
        if e is not None:
            reason = write_reason(e)
            self.agg.inc("snapshot_write_errors", {**self.labels, "process": "worker", "reason": reason})
            self.agg.write_kept(self.snapshot)
            self.log.tell(f"snapshot:{reason}", f"metrics snapshot not written ({type(e).__name__}: {e}); its counts "
                          "are served from memory-backed storage meanwhile (drifttool:snapshot_write_errors_total)")

    def _record_error(self, e: Exception) -> None:
        self.agg.inc("samples_dropped", {**self.labels, "reason": "record_error"})
        if not getattr(self, "_told", False):
            self._told = True
            print(f"drifttool monitor: recording failed ({type(e).__name__}: {e}); the request is served, its sample "
                  "dropped (counted in drifttool:samples_dropped_total)", file=sys.stderr, flush=True)

    def _child_args(self) -> list[str]:
        spec, mc = self.cfg.speculative_config, self.cfg.model_config
        return [sys.executable, "-m", "drifttool.monitor.replay_worker", "--settings", self.s.to_env(),
                "--run", self.run, "--target", str(mc.model), "--drafter", str(spec.model),
                "--name", self.labels["drafter"], "--model", self.labels["model_name"],
                "--engine", self.labels["engine"],
                "--depth", str(int(spec.num_speculative_tokens)), "--threads", str(self.s.threads),
                "--dtype", server_dtype(mc),
                "--rejection", str(getattr(spec, "rejection_sample_method", "standard"))]

    def _prompt_len(self, rid: str) -> int | None:
        """The prompt length of a request the runner holds (external id `rid`), for the `long` selection."""
        from ..run.engines.vllm.recorder import external_id

        for req_id, st in getattr(self.runner, "requests", {}).items():
            if external_id(req_id) == rid:
                return len(getattr(st, "prompt_token_ids", None) or ())
        return None

    def _removed_wrapper(self, orig):
        def removed(req_id, req_state) -> None:
            orig(req_id, req_state)
            try:
                self.finished(str(req_id), req_state)
            except Exception:  # noqa: BLE001 - never into vLLM's step
                self.agg.inc("samples_dropped", {**self.labels, "reason": "record_error"})

        return removed

    def finished(self, req_id: str, req_state) -> None:
        from ..run.engines.vllm.recorder import external_id

        ext = external_id(req_id)
        events = self.rec.events.pop(ext, None)
        why = self.sampler.finish(ext)
        if events is None or why is None:
            return
        self.agg.inc("samples", self.labels)
        prompt = getattr(req_state, "prompt_token_ids", None)
        if prompt is None or getattr(req_state, "prompt_embeds", None) is not None:
            self.agg.inc("requests_skipped", {**self.labels, "reason": "no_prompt_ids"})
            return
        job = Finished(request_key(ext), events, [int(t) for t in prompt],
                       [int(t) for t in req_state.output_token_ids], time.time(), why)
        try:
            self.q.put_nowait(job)
        except queue.Full:
            self.agg.inc("samples_dropped", {**self.labels, "reason": "queue_full"})

    def _spool_loop(self) -> None:
        """Forever: spool what finished, write the snapshot (the heartbeat) every second. Nothing that goes wrong
        in one pass (a full disk, a library's own exception) ends the loop: it is counted and the next pass tries
        again, so the monitor recovers by itself when the cause goes."""
        last = 0.0
        while not self.stopping.is_set():
            try:
                job = self.q.get(timeout=1.0)
            except queue.Empty:
                job = None
            try:
                if job is not None:
                    self._spool(job)
                if time.time() - last > 1.0 or job is not None:
                    last = time.time()
                    self.agg.set("heartbeat_timestamp_seconds", {**self.labels, "process": "worker"}, last)
                    self._write_snapshot()
            except Exception as e:  # noqa: BLE001 - any other failure of one pass: told, the next pass goes on
                self.log.tell(f"loop:{type(e).__name__}", f"monitor pass failed ({type(e).__name__}: {e}); the "
                              "next pass goes on")

    def _spool(self, job: Finished) -> None:
        from ..run.engines.vllm.events import write_events
        from .metrics import write_reason

        if spooled(self.spool.parent) >= self.s.spool:
            self.agg.inc("samples_dropped", {**self.labels, "reason": "spool_full"})
            return
        self.seq += 1
        base = self.spool / f"job-{self.seq:09d}"
        tmp = base.with_suffix(".meta.json.tmp")
        try:
            self.spool.mkdir(parents=True, exist_ok=True)  # removed under a running server: made again
            write_events({job.key: job.events}, base)
            meta: dict[str, Any] = {"key": job.key, "prompt_ids": job.prompt_ids, "output_ids": job.output_ids,
                                    "t_end": job.t_end, "sample": job.why}
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, base.with_suffix(".meta.json"))
        except Exception as e:  # noqa: BLE001 - any write error (safetensors raises its own) is counted, never fatal
            for f in (tmp, base.with_suffix(".json"), base.with_suffix(".safetensors")):
                try:
                    f.unlink(missing_ok=True)  # no half-written job is left to fill the disk further
                except OSError:
                    pass
            reason = write_reason(e)
            self.agg.inc("samples_dropped", {**self.labels, "reason": reason})
            self.log.tell(f"spool:{reason}", f"spool write failed ({type(e).__name__}: {e}); this sample is dropped "
                          f"(drifttool:samples_dropped_total{{reason=\"{reason}\"}}), the request served")
            return
        self.agg.set("last_spool_write_timestamp_seconds", {**self.labels, "process": "worker"}, time.time())


def attach(worker, settings: MonitorSettings) -> WorkerMonitor | None:
    """Start the monitor on this worker when it holds the drafter (tensor-parallel rank 0); raises DriftError
    naming what to change when the server cannot be monitored (the server does not start half-configured)."""
    runner = getattr(worker, "model_runner", None)
    if runner is None or getattr(runner, "drafter", None) is None or int(getattr(worker, "rank", 0) or 0) != 0:
        return None
    why = preflight(worker.vllm_config)
    if why:
        raise DriftError(f"DRIFTTOOL_MONITOR is set but {why}")
    return WorkerMonitor(settings, runner, worker.vllm_config).start()
