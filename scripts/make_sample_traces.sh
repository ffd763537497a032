#!/usr/bin/env bash
# Regenerate sample_traces/ on the real target (SmolLM2-135M-Instruct) with the shipped drafters: for each
# probe suite under probes/real, EAGLE-3, EAGLE-3.1 and the what-if (EAGLE-3 weights with norm_output=true)
# in one capture, greedy, depth 8 (the drafters were trained with a 3-step TTT unroll), seed 0; plus a
# teacher-forced capture of the long-code suite (in sample_traces/teacher_forced/: the dashboard opens the
# generate-mode traces, which can be compared with each other; traces of different modes cannot). Two lanes in
# parallel, one torch thread each (2 cores); the teacher-forced trace keeps no sampled rows.
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
# SUITES=probes/real: the first suites (2 code files, 4 agent traces, 4 documents), what sample_traces/ holds now.
# SUITES=probes/real/powered: 24 source documents per long suite (48 / 24 / 24 prompts of 0.4k-8k tokens),
# ~75 min per lane on this 2-core machine, with ROWS=1 (one sampled attention row per prompt and drafter).
SUITES=${SUITES:-probes/real}
ROWS=${ROWS:-2}
cap() {  # suite, out name, extra args...; RESUME=1 continues a trace after its last committed prompt
  local suite=$1 name=$2 r=--overwrite; shift 2
  local probes=$SUITES/$suite.jsonl
  [ -f "$probes" ] || probes=probes/real/$suite.jsonl  # short chat has no powered suite: the first one
  [ "${RESUME:-0}" = 1 ] && [ -f "sample_traces/$name.drift/manifest.json" ] && r=--resume
  OMP_NUM_THREADS=1 $DT capture --target "$T" "${D[@]}" --probes "$probes" --depth "$DEPTH" \
    --max-new-tokens 32 --keep-rows "$ROWS" --full-every 1 --seed 0 --quiet --out sample_traces/$name.drift $r "$@"
}
( cap long_code smollm2-long_code "$@" && cap agent_traces smollm2-agent_traces "$@" ) &
a=$!
( cap long_code teacher_forced/smollm2-long_code-tf --mode teacher-forced --keep-rows 0 "$@" \
  && cap doc_qa smollm2-doc_qa "$@" && cap short_chat smollm2-short_chat "$@" ) &
b=$!
wait $a
wait $b
du -sh sample_traces
