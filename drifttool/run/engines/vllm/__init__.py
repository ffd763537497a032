"""`capture --engine vllm`: drift measured on a real vLLM EAGLE-3 / EAGLE-3.1 run.

vLLM does the speculative decoding (its target, its drafter, its paged KV caches, its rejection sampler);
`recorder` hooks it and keeps, per prompt, the drafter's inputs, vLLM's drafts and its verdicts; `replay` feeds
those inputs through drifttool's own drafter under the same `Capture` as the hf engine; `crosscheck` holds the
replay to vLLM's drafts and tensors and the trace's acceptance to vLLM's own metrics; `engine` is the run.
`launch` imports and starts vLLM; `target_info` is the target as vLLM's run needs it (no HF weights loaded).

Nothing here imports vLLM until a vLLM capture starts (`launch.import_vllm`)."""

from .engine import run_capture_vllm
from .launch import INSTALL_HINT, REQUIRED_ARGS, REQUIRED_ENV, import_vllm, parse_vllm_args

__all__ = [
    "INSTALL_HINT",
    "REQUIRED_ARGS",
    "REQUIRED_ENV",
    "import_vllm",
    "parse_vllm_args",
    "run_capture_vllm",
]
