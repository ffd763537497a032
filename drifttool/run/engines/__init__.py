"""Capture engines: `hf` (drifttool's own speculative loop, `drifttool.run.engines.hf`) and `vllm` (a real vLLM
EAGLE-3 run recorded with hooks and replayed through drifttool's drafter, `drifttool.run.engines.vllm`).

Nothing here imports vLLM; `drifttool.run.engines.vllm` imports it only when a vLLM capture starts."""

ENGINES = ("hf", "vllm")
