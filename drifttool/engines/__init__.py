"""Capture engines: `hf` (drifttool's own speculative loop, `drifttool.capture`) and `vllm` (a real vLLM
EAGLE-3 run recorded with hooks and replayed through drifttool's drafter, `drifttool.engines.vllm`).

Nothing here imports vLLM; `drifttool.engines.vllm` imports it only when a vLLM capture starts."""

ENGINES = ("hf", "vllm")
