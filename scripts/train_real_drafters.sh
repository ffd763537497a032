#!/usr/bin/env bash
# Train the EAGLE-3 and EAGLE-3.1 drafters shipped for the real target (SmolLM2-135M-Instruct).
# Every stage resumes where it stopped: rerun the same command after an interruption (on a fresh machine the
# conversation list and so the feature cache rebuild deterministically; the trainer resumes from runs/real/train/ckpt).
#   1. fetch + convert the target (once, cached under ~/.cache/drifttool)
#   2. held-out conversations (documents never used in training) -> features (runs/real/features/heldout)
#   3. WORKERS feature workers: teacher-forced target features in bf16 batches, every 8th conversation with a
#      target-sampled reply (runs/real/features/train), FEATURE_MINUTES each
#   4. the trainer (both variants on the same batches and soft labels, bf16 autocast), which samples from the
#      shards present and exports both drafters to runs/real/drafters/<variant> at every checkpoint, keeping each
#      checkpoint's export under runs/real/drafters/steps/step-N (the checkpoint series)
# Env: MINUTES (trainer wall-clock budget, default 100), FEATURE_MINUTES (default 35), WORKERS (default 1),
#      CONVERSATIONS (default 12000), WINDOW (trained window and max conversation length, default 4096),
#      OVERLAP=1 starts the trainer beside the feature workers (needs a free core per process),
#      FIRST=N feature workers start at conversation N (new data beyond an earlier cache of the first N),
#      INIT=DIR warm-starts the trainer from exported drafters (e.g. drifttool/zoo/models/smollm2), LR its peak lr.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
MINUTES=${MINUTES:-100}; FMIN=${FEATURE_MINUTES:-35}; WORKERS=${WORKERS:-1}; N=${CONVERSATIONS:-12000}
WINDOW=${WINDOW:-4096}; FIRST=${FIRST:-0}
TRAIN_ARGS=(); [ -n "${INIT:-}" ] && TRAIN_ARGS+=(--init "$INIT"); [ -n "${LR:-}" ] && TRAIN_ARGS+=(--lr "$LR")
mkdir -p runs/real
$PY -m drifttool.cli zoo fetch smollm2 >/dev/null
$PY -m training.tf_features --out runs/real/features --split heldout --n 32 --long --sample-every 2 \
  --max-len "$WINDOW" --shard-tokens 20000 >> runs/real/feat_heldout.log 2>&1
pids=()
for w in $(seq 0 $((WORKERS - 1))); do
  $PY -m training.tf_features --out runs/real/features --split train --n "$N" --long --worker "$w" \
    --workers "$WORKERS" --first "$FIRST" --max-len "$WINDOW" --minutes "$FMIN" >> "runs/real/feat_w$w.log" 2>&1 &
  pids+=($!)
done
if [ "${OVERLAP:-0}" != "1" ]; then wait "${pids[@]}"; else sleep 300; fi
$PY -m training.train_real --minutes "$MINUTES" --trained-window "$WINDOW" "${TRAIN_ARGS[@]}" >> runs/real/train.log 2>&1
kill "${pids[@]}" 2>/dev/null || true
echo "drafters: runs/real/drafters (copy to drifttool/zoo/models/smollm2/ to ship)"
