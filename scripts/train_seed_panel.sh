#!/usr/bin/env bash
# The seed panel: EAGLE-3 and EAGLE-3.1 drafters for the real target (SmolLM2-135M-Instruct) trained from scratch
# under SEEDS independent seeds (a seed changes the initial weights, the batch order and the scored slots; within a
# seed both variants take every step on the same batches), so that architecture claims rest on seeds, not on one
# checkpoint per variant. Every stage resumes: rerun the same command after an interruption.
#   1. held-out conversations (documents never trained on) -> runs/seeds/features/heldout
#   2. one feature worker over the first FEATURE_CONVERSATIONS training conversations -> runs/seeds/features/train
#      (a fixed count, so every seed of the panel, in any session, trains on the same data; skipped once finished)
#   3. per seed: training.train_real --steps STEPS --seed S -> runs/seeds/s<S>/drafters/{eagle3,eagle3.1}
# Env: SEEDS (default "0 1 2 3 4 5 6 7"), STEPS (default 120), FEATURE_CONVERSATIONS (default 259),
# WINDOW (default 4096). Two invocations with disjoint SEEDS may run at once, one per core, once the features exist.
# One thread per process (OMP_NUM_THREADS=1): the other core stays free.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7}; STEPS=${STEPS:-120}; NCONV=${FEATURE_CONVERSATIONS:-259}; WINDOW=${WINDOW:-4096}
export OMP_NUM_THREADS=1
F=runs/seeds/features
mkdir -p "$F"
$PY -m drifttool.cli zoo fetch smollm2 >/dev/null
if [ ! -e "$F/heldout.done" ]; then
  $PY -m training.tf_features --out "$F" --split heldout --n 32 --long --sample-every 2 \
    --max-len "$WINDOW" --shard-tokens 20000 >> runs/seeds/feat_heldout.log 2>&1
  touch "$F/heldout.done"
fi
if [ ! -e "$F/train.done" ]; then
  $PY -m training.tf_features --out "$F" --split train --n "$NCONV" --long --max-len "$WINDOW" \
    >> runs/seeds/feat_train.log 2>&1
  touch "$F/train.done"
fi
for s in $SEEDS; do
  [ -e "runs/seeds/s$s/done" ] && continue
  $PY -m training.train_real --features "$F" --work "runs/seeds/s$s/train" --out "runs/seeds/s$s/drafters" \
    --variants eagle3,eagle3.1 --seed "$s" --steps "$STEPS" --trained-window "$WINDOW" --ckpt-minutes 15 \
    >> "runs/seeds/s$s.log" 2>&1
  touch "runs/seeds/s$s/done"
done
echo "seed panel: runs/seeds/s*/drafters"
