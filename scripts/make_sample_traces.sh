#!/usr/bin/env bash
# Regenerate sample_traces/ on the real target (SmolLM2-135M-Instruct) with the shipped drafters: for each
# probe suite under probes/real, EAGLE-3, EAGLE-3.1 and the what-if (EAGLE-3 weights with norm_output=true)
# in one capture, greedy, depth 8 (the drafters were trained with a 3-step TTT unroll), seed 0; plus a
# teacher-forced capture of the long-code suite (in sample_traces/teacher_forced/: the dashboard opens the
# generate-mode traces, which can be compared with each other; traces of different modes cannot). Two lanes in parallel, one torch thread each (2 cores).
# Full attention rows every round (--full-every 1): the samples are small, and entropy / head maxima on every
# round keep the dashboard's entropy charts dense (a capture's default computes them every 16th round).
# Run only when the drafters or the trace schema change; extra arguments go to every `drifttool capture`.
set -euo pipefail
cd "$(dirname "$0")/.."
DT=${DT:-.venv/bin/drifttool}
DEPTH=${DEPTH:-8}
T=$($DT zoo fetch smollm2)
M=drifttool/zoo/models/smollm2
D=(--drafter eagle3=$M/eagle3 --drafter eagle3.1=$M/eagle3.1 --drafter "eagle3+norm_output=$M/eagle3?norm_output=true")
cap() {  # suite, out name, extra args...
  local suite=$1 name=$2; shift 2
  OMP_NUM_THREADS=1 $DT capture --target "$T" "${D[@]}" --probes probes/real/$suite.jsonl --depth "$DEPTH" \
    --max-new-tokens 32 --keep-rows 2 --full-every 1 --seed 0 --quiet --out sample_traces/$name.drift --overwrite "$@"
}
( cap long_code smollm2-long_code "$@" && cap short_chat smollm2-short_chat "$@" ) &
a=$!
( cap agent_traces smollm2-agent_traces "$@" && cap doc_qa smollm2-doc_qa "$@" && cap long_code teacher_forced/smollm2-long_code-tf --mode teacher-forced "$@" ) &
b=$!
wait $a
wait $b
du -sh sample_traces
