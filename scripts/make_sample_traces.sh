#!/usr/bin/env bash
# Regenerate sample_traces/ from the bundled zoo: for each target specimen (sink, plain) and probe suite,
# EAGLE-3, EAGLE-3.1 and the what-if (EAGLE-3 weights with norm_output=true) in one capture, greedy,
# depth 8 (the drafters were trained with a 4-step TTT unroll). Seed 0. Run only when models or schema change.
set -euo pipefail
cd "$(dirname "$0")/.."
DT=${DT:-.venv/bin/drifttool}
DEPTH=${DEPTH:-8}
for spec in ${SPECS:-sink plain}; do
  M=drifttool/zoo/models/$spec
  for suite in long_code agent_traces doc_qa short_chat; do
    $DT capture --target $M/target \
      --drafter eagle3=$M/eagle3 --drafter eagle3.1=$M/eagle3.1 --drafter "eagle3+norm_output=$M/eagle3?norm_output=true" \
      --probes probes/$suite.jsonl --depth "$DEPTH" --max-new-tokens 48 --keep-rows 1 --seed 0 --quiet \
      --out sample_traces/$spec-$suite.drift --overwrite "$@"
  done
done
du -sh sample_traces
