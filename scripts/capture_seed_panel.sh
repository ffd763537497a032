#!/usr/bin/env bash
# Capture the seed panel (scripts/train_seed_panel.sh): per seed S, its EAGLE-3 and EAGLE-3.1 drafters as
# eagle3-sS / eagle3.1-sS on the long-code suite's first cuts (probes/real/powered/long_code_inside.jsonl: 24 held-out
# stdlib modules, one cut each inside the trained window, 512-4096 tokens), greedy, depth 8, 32 new tokens, no
# sampled rows, into $OUT/smollm2-long_code-sS.drift (OUT defaults to sample_traces/seeds). Waits for each seed's training to finish;
# resumes a trace already started. LANES=2 runs two seeds at once (one torch thread each).
# A seed that is not done while no training for it runs (no scripts/train_seed_panel.sh, no training.train_real into
# runs/seeds/sS/) never will be: one line and exit 2, checked for every seed before anything is captured.
set -euo pipefail
cd "$(dirname "$0")/.."
DT=${DT:-.venv/bin/drifttool}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7}
OUT=${OUT:-sample_traces/seeds}  # another folder while a new panel replaces the shipped one
ours() {  # is a process matching $1 running in this checkout (its working folder is ours: another checkout's
  # training on the same machine is not this panel's)
  local p
  for p in $(pgrep -f "$1"); do [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$(pwd -P)" ] && return 0; done
  return 1
}
training() {  # is the seed panel, or this seed's training, running here?
  ours 'train_seed_panel[.]sh' || ours "training[.]train_real .*--work runs/seeds/s$1/"
}
waitable() {
  [ -e "runs/seeds/s$1/done" ] || training "$1" || {
    echo "capture_seed_panel: seed $1 never trained: no runs/seeds/s$1/done and no training for it running;" \
      "train it first (SEEDS=\"$1\" bash scripts/train_seed_panel.sh)" >&2
    exit 2
  }
}
for s in $SEEDS; do waitable "$s"; done
T=$($DT zoo fetch smollm2)
mkdir -p "$OUT"
one() {
  local s=$1 out=$OUT/smollm2-long_code-s$1.drift r=--overwrite
  while [ ! -e "runs/seeds/s$s/done" ]; do waitable "$s"; sleep 30; done
  [ -f "$out/manifest.json" ] && r=--resume
  OMP_NUM_THREADS=1 $DT capture --target "$T" --drafter "eagle3-s$s=runs/seeds/s$s/drafters/eagle3" \
    --drafter "eagle3.1-s$s=runs/seeds/s$s/drafters/eagle3.1" --probes probes/real/powered/long_code_inside.jsonl \
    --depth 8 --max-new-tokens 32 --keep-rows 0 --seed 0 --quiet --out "$out" $r
}
for s in $SEEDS; do one "$s"; done
