"""The hf engine's capture spread over a Ray cluster (`capture --ray ADDRESS|local`): each worker is a Ray actor
that loads the target and the drafters once and captures whole prompts with the same code as a single-process run
(hf._capture_probe); the driver owns the trace: it plans what is not written yet (`--resume`), hands prompts to idle
workers, and writes each prompt's shard as it returns (through Ray's object store, so workers need no shared
disk). A prompt is written once; a worker that dies loses the prompt in hand, which goes to another worker (at most
`RETRIES` more tries). Ray is an optional extra, imported only here."""

from __future__ import annotations

import os
from typing import Any

from ...errors import DriftError

RETRIES = 2  # more tries of a prompt whose worker died
WORKER_CPUS = 1  # each worker's CPU reservation (its torch threads)


def _ray():
    try:
        import ray
    except ImportError:
        raise DriftError("--ray: Ray is not installed; install the extra: pip install 'drifttool[ray]'") from None
    return ray


def connect(address: str, workers: int, gpus: float) -> tuple[Any, bool]:
    """Ray joined at `address` ("local": a cluster of this machine started here, stopped at the end); returns (ray,
    whether this process started it). One line when the address cannot be reached or lacks the resources."""
    ray = _ray()
    started = False
    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(num_cpus=max(workers * WORKER_CPUS, 1), include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            else:
                _reachable(address)  # Ray itself retries an unreachable address for many minutes
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            started = True
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise DriftError(f"--ray {address}: cannot reach a Ray cluster there ({str(e).splitlines()[0]}); start "
                             "one with `ray start --head` or use --ray local") from None
    have = ray.cluster_resources()
    need = {"CPU": workers * WORKER_CPUS, **({"GPU": workers * gpus} if gpus else {})}
    short = {k: v for k, v in need.items() if have.get(k, 0) < v}
    if short:
        if started:
            ray.shutdown()
        raise DriftError(f"--ray {address}: {workers} workers need {need}, the cluster has "
                         f"{ {k: have.get(k, 0) for k in need} }; lower --ray-workers or add nodes")
    return ray, started


def _reachable(address: str, timeout: float = 10.0) -> None:
    """HOST:PORT (or ray://HOST:PORT) answers a TCP connection, else one line at once."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise DriftError(f"--ray {address}: expected HOST:PORT (e.g. 10.0.0.5:6379, the head's `ray start --head` "
                         "address) or local")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise DriftError(f"--ray {address}: cannot reach a Ray cluster there ({e.strerror or e}); start one with "
                         "`ray start --head` or use --ray local") from None


class _Worker:
    """One Ray actor: the models loaded once, then whole prompts captured on request."""

    def __init__(self, spec: dict):
        import torch

        from ...model.target import load_target
        from ..drafters import load_drafters

        torch.set_num_threads(WORKER_CPUS)
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            os.environ.setdefault(name, "1")
        st = self.st = spec["settings"]
        self.tree, self.capture_probe = spec["tree"], spec["capture"]  # hf._capture_probe, passed by the driver
        self.tgt = load_target(spec["target"], device=st.device, dtype=st.torch_dtype)
        self.models = load_drafters(spec["drafters"], self.tgt.shape(), spec["drafter_device"], st.torch_dtype)
        self.tgt.set_aux_layer_ids(next(iter(self.models.values())).config.input_aux_layer_ids)

    def where(self) -> str:
        import ray

        return f"{ray.get_runtime_context().get_node_id()[:12]}:{os.getpid()}"

    def capture(self, probe, ids: list[int], template_ids: tuple[int, ...]):
        from ..runner import PromptJob

        tables, rows = self.capture_probe(self.tgt, self.models, PromptJob(self.st, probe, ids, template_ids),
                                          self.tree)
        return probe.id, tables, rows, self.where()


def run_on_ray(ray, writer, bar, todo: list, token_ids: dict, template_ids: tuple, cost, spec: dict) -> None:
    """Every prompt of `todo` captured by `spec["workers"]` actors and written by this process as it returns, with
    the worker that captured it ("node:pid") in the manifest's `ray.placement`, committed with the prompt's shard."""
    actor = ray.remote(num_cpus=WORKER_CPUS, num_gpus=spec["gpus"], max_restarts=0)(_Worker)
    workers = [actor.remote(spec) for _ in range(spec["workers"])]
    queue = list(todo)
    tries = {p.id: 0 for p in todo}
    busy: dict[Any, tuple[Any, Any]] = {}  # object ref -> (actor, probe)
    while queue or busy:
        while queue and workers:
            w, p = workers.pop(0), queue.pop(0)
            busy[w.capture.remote(p, token_ids[p.id], template_ids)] = (w, p)
        if not busy:
            raise DriftError("--ray: every worker died; nothing left to capture the remaining prompts")
        done, _ = ray.wait(list(busy), num_returns=1)
        w, p = busy.pop(done[0])
        try:
            pid, tables, rows, where = ray.get(done[0])
        except ray.exceptions.RayActorError as e:  # the worker died: the prompt goes to another one
            if getattr(e, "actor_init_failed", False):  # it never loaded the models: no other try will differ
                raise DriftError(f"--ray: a worker could not load the models ({_last_line(e)}); every node needs "
                                 "the target and drafter folders at the same path, and drifttool installed (the "
                                 "prompts written so far are kept: --resume finishes the rest)") from None
            tries[p.id] += 1
            if tries[p.id] > RETRIES:
                raise DriftError(f"--ray: prompt {p.id!r}: its worker died {tries[p.id]} times; stopped (the "
                                 "prompts written so far are kept: --resume finishes the rest)") from None
            queue.insert(0, p)
            continue
        except ray.exceptions.RayTaskError as e:  # the capture itself failed: as in one process
            cause = e.as_instanceof_cause() if hasattr(e, "as_instanceof_cause") else e
            raise DriftError(f"probe {p.id!r}: {_last_line(cause)}") from None
        writer.add(pid, tables, rows, record={"ray": {"placement": {pid: where}}})
        bar.advance(pid, int(len(tables.get("rounds", []))), cost(p), worker=where)
        workers.append(w)


def _last_line(e: BaseException) -> str:
    """The exception's own message, the last non-empty line of a remote traceback."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__
