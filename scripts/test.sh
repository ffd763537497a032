#!/usr/bin/env bash
# The one test command: set up the environment (venv, headless browser for the dashboard test) and run
# lint + the whole suite. Used verbatim by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
python -m pytest -x -q "$@"
