#!/usr/bin/env bash
# The speculators adapter's tests (tests/training/test_speculators_adapter.py) against the real `speculators` package,
# in its own environment: speculators 0.9.0 pins transformers <= 5.19, older than .venv's. Called by scripts/test.sh
# (and so .ci/run) after the main suite. What is installed: CPU torch, transformers within speculators' pin,
# speculators itself without the extras it needs only for data generation on a GPU box (torchvision, torchaudio:
# PyPI's builds are CUDA ones), then the packages its training modules import and drifttool's own.
#   SPECULATORS_ENV  where the environment lives (default .speculators-env); created and installed when missing
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV=${SPECULATORS_ENV:-.speculators-env}
PKG="speculators==0.9.0"
PY=${PYTHON:-python3}
MARK="$ENV/.drifttool-speculators-installed"
if [ ! -f "$MARK" ] || [ "$(cat "$MARK")" != "$PKG" ]; then
  [ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
  # the CPU 2.13 build first (a plain range can resolve to a multi-GB CUDA build), as scripts/setup.sh does
  "$ENV/bin/python" -m pip install -q "torch==2.13.0" 2>/dev/null || "$ENV/bin/python" -m pip install -q "torch>=2.9,<=2.14.1"
  "$ENV/bin/python" -m pip install -q "transformers>=5.0,<=5.19.0"
  "$ENV/bin/python" -m pip install -q --no-deps "$PKG" "hs-connectors==0.9.0"
  "$ENV/bin/python" -m pip install -q pydantic pydantic-settings "loguru>=0.7.2,<=0.7.3" "numpy>=2,<=2.5.4" rich \
    typer "tqdm>=4.66.3,<=4.70.1" click psutil protobuf huggingface-hub "datasets>=4,<=5.1.0" "openai>=2.0.0" \
    httpx aiohttp
  echo "$PKG" > "$MARK"
fi
"$ENV/bin/python" -m pip install -q --no-deps -e .
"$ENV/bin/python" -m pip install -q pyarrow pandas safetensors einops tokenizers filelock jinja2 scipy plotly \
  pytest pytest-timeout
exec "$ENV/bin/python" -m pytest tests/training/test_speculators_adapter.py "$@"  # pyproject addopts: -q -rs
