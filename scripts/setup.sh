#!/usr/bin/env bash
# Create .venv with drifttool and its dev extras. torch is pinned to the CPU 2.13 build first so that no
# multi-GB CUDA wheel is pulled in on a CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
python -m pip install -q "torch==2.13.0" 2>/dev/null || python -m pip install -q "torch>=2.4,<=2.14.1"
python -m pip install -q -e ".[dev,app]"
