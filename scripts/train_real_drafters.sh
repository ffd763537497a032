#!/usr/bin/env bash
# Train the EAGLE-3 and EAGLE-3.1 drafters shipped for the real target (SmolLM2-135M-Instruct).
# Every stage resumes where it stopped: rerun the same command after an interruption.
#   1. fetch + convert the target (once, cached under ~/.cache/drifttool)
#   2. held-out conversations -> features (runs/real/features/heldout)
#   3. WORKERS feature workers: target-generated responses + aux features, fp16 shards (runs/real/features/train)
#   4. the trainer (both variants, same batches), which samples from the shards present as they grow and
#      exports both drafters to runs/real/drafters/<variant> at every checkpoint
# Env: MINUTES (trainer wall-clock budget, default 90), WORKERS (default 2), CONVERSATIONS (default 6000),
#      TRAIN_DELAY (seconds the trainer waits for the cache to fill first, default 600).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
MINUTES=${MINUTES:-90}; WORKERS=${WORKERS:-2}; N=${CONVERSATIONS:-6000}; DELAY=${TRAIN_DELAY:-600}
mkdir -p runs/real
$PY -m drifttool.cli zoo fetch smollm2 >/dev/null
$PY -m drifttool.zoo.real_features --out runs/real/features --split heldout --n 24 --shard-tokens 8000 \
  >> runs/real/feat_heldout.log 2>&1
pids=()
for w in $(seq 0 $((WORKERS - 1))); do
  $PY -m drifttool.zoo.real_features --out runs/real/features --split train --n "$N" --worker "$w" \
    --workers "$WORKERS" --max-new 32 --shard-tokens 8000 >> "runs/real/feat_w$w.log" 2>&1 &
  pids+=($!)
done
[ -d runs/real/train/ckpt ] || sleep "$DELAY"
$PY -m drifttool.zoo.train_real --minutes "$MINUTES" >> runs/real/train.log 2>&1
kill "${pids[@]}" 2>/dev/null || true
echo "drafters: runs/real/drafters (copy to drifttool/zoo/models/smollm2/ to ship)"
