"""vLLM's entry point for the monitor (`vllm.general_plugins`, loaded by vLLM in the API server, the engine core
and every worker). Without DRIFTTOOL_MONITOR it does nothing. With it: the settings are checked (a wrong one is one
line and the server does not start), the API server's /metrics gets drifttool's collector, and vLLM's worker
starts the monitor right after loading its models (drifttool.monitor.attach)."""

from __future__ import annotations

import os
import sys
import time

from ..errors import DriftError
from .attach import RUN_ENV
from .settings import ENV, MonitorSettings, from_env

_DONE = {"collector": False, "worker": False}


def register() -> None:
    try:
        settings = from_env()
    except DriftError as e:
        print(f"drifttool monitor: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if settings is None:
        return
    os.environ.setdefault(RUN_ENV, f"{int(time.time())}-{os.getpid()}")  # children inherit it: one run per start
    register_collector(settings)
    check_config_when_built()
    patch_worker(settings)


def check_config_when_built() -> None:
    """Refuse, in the API server and before any engine process starts, a server the monitor cannot record (no
    EAGLE-3 drafter, a graph-captured drafter, prefix caching, the V2 runner): one line, exit 2."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return
    if getattr(EngineArgs.create_engine_config, "_drifttool", False):
        return
    orig = EngineArgs.create_engine_config

    def create_engine_config(self, *args, **kwargs):
        from .attach import preflight

        cfg = orig(self, *args, **kwargs)
        why = preflight(cfg)
        if why:
            print(f"drifttool monitor: {ENV} is set but {why}", file=sys.stderr, flush=True)
            raise SystemExit(2)
        return cfg

    create_engine_config._drifttool = True
    EngineArgs.create_engine_config = create_engine_config


def register_collector(settings: MonitorSettings) -> None:
    """drifttool's series on the registry vLLM's /metrics serves (the process-global one); once per process."""
    if _DONE["collector"]:
        return
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        return
    from .metrics import Collector, prune_snapshots

    prune_snapshots(settings.dir / "metrics")  # finished runs' files (no live process rewrites them)
    REGISTRY.register(Collector(settings.dir / "metrics", os.environ[RUN_ENV]))
    _DONE["collector"] = True
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and not _DONE.get("warned"):
        _DONE["warned"] = True  # measured: with it set by the user, /metrics serves a registry without drifttool's
        print("drifttool monitor: PROMETHEUS_MULTIPROC_DIR is set: drifttool's series do not reach /metrics in "
              "Prometheus multiprocess mode yet; the trace segments are written (DIR/segments)",
              file=sys.stderr, flush=True)


def patch_worker(settings: MonitorSettings) -> None:
    """Wrap vLLM's Worker.load_model (CPU and GPU workers share it) to attach the monitor after the models load."""
    if _DONE["worker"]:
        return
    try:
        from vllm.v1.worker.gpu_worker import Worker
    except ImportError as e:
        print(f"drifttool monitor: {ENV} is set but vLLM's worker cannot be imported ({e}); not monitoring",
              file=sys.stderr)
        return
    orig = Worker.load_model

    def load_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        if getattr(self, "_drifttool_monitor", None) is None:
            from .attach import attach

            self._drifttool_monitor = attach(self, settings)
        return out

    Worker.load_model = load_model
    _DONE["worker"] = True
