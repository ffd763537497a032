#!/usr/bin/env bash
# GPU smoke checks for big targets (scripts/gpu_check.py): SDPA vs eager in bfloat16, capture rows vs eager,
# a Llama-3.1-8B-shaped EAGLE-3 drafter at 32k context; prints a pass/fail table, exits 1 on a FAIL.
# Without CUDA it prints one line and exits 0. Extra arguments go to the script (e.g. --device cuda:1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
exec "$PY" scripts/gpu_check.py "$@"
