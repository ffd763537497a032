#!/usr/bin/env bash
# Capture the sink-initialised seed panel (scripts/train_sink_panel.sh): per seed S, its EAGLE-3 and EAGLE-3.1
# drafters as eagle3-sS / eagle3.1-sS on the long-code suite's first cuts (probes/real/powered/long_code_inside.jsonl:
# 24 held-out stdlib modules, one cut each inside the trained window, 512-4096 tokens), greedy, depth 8, 32 new
# tokens, sink rule `target` (SmolLM2's own sink, position 0), no sampled rows, into
# sample_traces/sink_seeds/smollm2-long_code-sS.drift. Seed 0's drafters at initialisation (runs/sink/s0/drafters/
# steps/step-000000) go to sample_traces/sink_seeds/init/smollm2-long_code-init.drift: the sink-inheritance
# experiment's "before". SEEDS (default: every seed whose training started): only those whose training finished
# are captured, the others skipped with a line; a seed that never started training: one line, exit 2, before
# anything is captured. A trace already started resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
DT=${DT:-.venv/bin/drifttool}
# default: every seed whose training has started (runs/sink/sS/)
SEEDS=${SEEDS:-$(ls -d runs/sink/s*/ 2>/dev/null | sed 's|runs/sink/s||; s|/$||' | sort -n | tr '\n' ' ')}
OUT=sample_traces/sink_seeds
for s in $SEEDS; do
  if [ ! -d "runs/sink/s$s" ] && ! grep -qs '"status": "complete"' "$OUT/smollm2-long_code-s$s.drift/manifest.json"; then
    echo "capture_sink_panel: seed $s never trained: no runs/sink/s$s/; train it first" \
      "(SEEDS=\"$s\" bash scripts/train_sink_panel.sh)" >&2
    exit 2
  fi
done
T=$($DT zoo fetch smollm2)
mkdir -p "$OUT/init"
cap() {  # out, drafter args...
  local out=$1 r=--overwrite; shift
  [ -f "$out/manifest.json" ] && r=--resume
  OMP_NUM_THREADS=1 $DT capture --target "$T" "$@" --probes probes/real/powered/long_code_inside.jsonl \
    --depth 8 --max-new-tokens 32 --keep-rows 0 --seed 0 --sink target --quiet --out "$out" $r
}
I=runs/sink/s0/drafters/steps/step-000000
if [ -d "$I/eagle3" ] && [ ! -e runs/sink/captured-init ] && \
   ! grep -qs '"status": "complete"' "$OUT/init/smollm2-long_code-init.drift/manifest.json"; then
  cap "$OUT/init/smollm2-long_code-init.drift" --drafter "eagle3-init=$I/eagle3" --drafter "eagle3.1-init=$I/eagle3.1"
  touch runs/sink/captured-init
fi
for s in $SEEDS; do
  grep -qs '"status": "complete"' "$OUT/smollm2-long_code-s$s.drift/manifest.json" && continue  # an earlier session's
  [ -e "runs/sink/s$s/done" ] || { echo "capture_sink_panel: seed $s still training; skipped (rerun later)" >&2; continue; }
  [ -e "runs/sink/captured-s$s" ] && continue
  cap "$OUT/smollm2-long_code-s$s.drift" --drafter "eagle3-s$s=runs/sink/s$s/drafters/eagle3" \
    --drafter "eagle3.1-s$s=runs/sink/s$s/drafters/eagle3.1"
  touch "runs/sink/captured-s$s"
done
