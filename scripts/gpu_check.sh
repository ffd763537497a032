#!/usr/bin/env bash
# GPU smoke checks for big targets (scripts/gpu_check.py): SDPA vs eager in bfloat16, capture rows vs eager,
# a Llama-3.1-8B-shaped EAGLE-3 drafter at 32k context; prints a pass/fail table, exits 1 on a FAIL; then, with a
# vLLM environment, bench/bench_vllm_throughput.py at TP = the GPUs present.
# Without CUDA it prints one line and exits 0. Extra arguments go to the script (e.g. --device cuda:1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
"$PY" scripts/gpu_check.py "$@"
# The vLLM engine's throughput against plain vLLM, at tensor parallel = the GPUs present, where a vLLM environment
# exists (VLLM_PY, or .vllm-env from scripts/test_vllm.sh with VLLM_PKG=vllm==0.32.0): prompts/hour and the ratio.
VPY=${VLLM_PY:-.vllm-env/bin/python}
if [ -x "$VPY" ] && command -v nvidia-smi >/dev/null 2>&1; then
  NGPU=$(nvidia-smi -L | wc -l)
  "$VPY" bench/bench_vllm_throughput.py --prompts 256 --dtype bfloat16 --vllm-arg "tensor_parallel_size=$NGPU"
fi
