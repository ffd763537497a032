#!/usr/bin/env bash
# The sink-initialised seed panel: EAGLE-3 and EAGLE-3.1 drafters for the real target (SmolLM2-135M-Instruct)
# whose decoder layer starts as target layer SINK_LAYER (training/sink_init.py: that layer's attention and MLP on the
# hidden half, fc a pass-through of its input, the embedding half at zero), trained under SEEDS independent seeds
# (a seed changes the batch order and the scored slots; within a seed both variants take every step on the same
# batches). Seed 0 is also the sink-inheritance experiment: its drafters at initialisation are kept under
# runs/sink/s0/drafters/steps/step-000000. Every stage resumes: rerun the same command after an interruption.
#   1. held-out + training features, shared with scripts/train_seed_panel.sh (runs/seeds/features)
#   2. per seed: training.train_real --sink-layer SINK_LAYER --steps STEPS --lr LR --seed S -> runs/sink/s<S>/drafters
# Then scripts/capture_sink_panel.sh captures them. runs/ does not survive a session: a seed whose trace is committed
# (sample_traces/sink_seeds/smollm2-long_code-sS.drift, complete) is skipped, so the panel accumulates over sessions
# (commit each captured seed's trace as it lands).
# Env: SEEDS (default "0 1 2 3 4 5 6 7"), STEPS (120), LR (3e-4: a fine-tune of a pretrained layer),
#      SINK_LAYER (15: the sink layer whose input is the middle aux feature), FEATURE_CONVERSATIONS (259), WINDOW (4096).
# One thread per process (OMP_NUM_THREADS=1): the other core stays free. A log line per step with its tokens/s.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7}; STEPS=${STEPS:-120}; LR=${LR:-3e-4}; SINK_LAYER=${SINK_LAYER:-15}
NCONV=${FEATURE_CONVERSATIONS:-259}; WINDOW=${WINDOW:-4096}
export OMP_NUM_THREADS=1
F=runs/seeds/features
mkdir -p "$F" runs/sink
$PY -m drifttool.cli zoo fetch smollm2 >/dev/null
# the settings are checked before the feature stages (an hour of work), on the terminal
case "$STEPS" in ''|*[!0-9]*) echo "train_sink_panel: STEPS=$STEPS: expected a positive whole number" >&2; exit 2;; esac
$PY -m training.train_real --check --sink-layer "$SINK_LAYER" --steps "$STEPS" --lr "$LR" \
  --trained-window "$WINDOW" --features "$F" --work runs/sink/check --out runs/sink/check
if [ ! -e "$F/heldout.done" ]; then
  echo "$(date +%T) held-out features" >&2
  $PY -m training.tf_features --out "$F" --split heldout --n 32 --long --sample-every 2 \
    --max-len "$WINDOW" --shard-tokens 20000 >> runs/seeds/feat_heldout.log 2>&1
  touch "$F/heldout.done"
fi
if [ ! -e "$F/train.done" ]; then
  echo "$(date +%T) training features ($NCONV conversations)" >&2
  $PY -m training.tf_features --out "$F" --split train --n "$NCONV" --long --max-len "$WINDOW" \
    >> runs/seeds/feat_train.log 2>&1
  touch "$F/train.done"
fi
shipped() {  # a seed whose captured trace is committed (a complete manifest): done in an earlier session
  grep -qs '"status": "complete"' "sample_traces/sink_seeds/smollm2-long_code-s$1.drift/manifest.json"
}
for s in $SEEDS; do
  [ -e "runs/sink/s$s/done" ] && continue
  if shipped "$s"; then echo "$(date +%T) seed $s: its trace is already in sample_traces/sink_seeds/; skipped" >&2; continue; fi
  echo "$(date +%T) seed $s: training (log runs/sink/s$s.log)" >&2
  $PY -m training.train_real --features "$F" --work "runs/sink/s$s/train" --out "runs/sink/s$s/drafters" \
    --variants eagle3,eagle3.1 --seed "$s" --steps "$STEPS" --lr "$LR" --sink-layer "$SINK_LAYER" \
    --trained-window "$WINDOW" --ckpt-minutes 10 >> "runs/sink/s$s.log" 2>&1
  touch "runs/sink/s$s/done"
done
echo "sink panel: runs/sink/s*/drafters" >&2
