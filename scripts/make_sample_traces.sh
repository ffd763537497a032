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
# SUITES=probes/real: the first suites (2 code files, 4 agent traces, 4 documents) and the short-chat control.
# SUITES=probes/real/powered: 24 source documents per long suite (48 / 24 / 24 prompts of 0.4k-8k tokens),
# what sample_traces/ holds for the long suites (ROWS=1: one sampled attention row per prompt and drafter); the
# short-chat control has no powered suite and stays the first suite's. Lane times here: 42 + 13 min, 27 + 18 min.
SUITES=${SUITES:-probes/real}
ROWS=${ROWS:-2}
# SINK: the sink rule of the suite captures (target: the positions SmolLM2 itself attends as sinks, position 0; the
# trees' short quick prompts keep the capture default). OUT: where the traces go (a scratch folder keeps the
# shipped ones readable while a rebuild runs; move it over sample_traces/ when both lanes are done).
SINK=${SINK:-target}
OUT=${OUT:-sample_traces}
cap() {  # suite, out name, extra args...; RESUME=1 continues a trace after its last committed prompt
  local suite=$1 name=$2 r=--overwrite; shift 2
  local probes=$SUITES/$suite.jsonl
  [ "${RESUME:-0}" = 1 ] && [ -f "$OUT/$name.drift/manifest.json" ] && r=--resume
  OMP_NUM_THREADS=1 $DT capture --target "$T" "${D[@]}" --probes "$probes" --depth "$DEPTH" \
    --max-new-tokens 32 --keep-rows "$ROWS" --full-every 1 --seed 0 --sink "$SINK" --quiet --out "$OUT/$name.drift" $r "$@"
}
trees() {  # the Draft trees page's trace (SGLang's default tree for Llama) and its chain twin at the same depth
  local tr=$OUT/trees/smollm2-quick-tree.drift ch=$OUT/trees/chain/smollm2-quick-chain5.drift
  local common=(--target "$T" "${D[@]}" --probes probes/real/quick.jsonl --max-new-tokens 32 --seed 0 --quiet)
  if [ "${RESUME:-0}" != 1 ] || [ ! -f "$tr/manifest.json" ]; then
    OMP_NUM_THREADS=1 $DT capture "${common[@]}" --tree "dynamic:top_k=4,depth=5,total=8" --out "$tr" --overwrite
  fi
  if [ "${RESUME:-0}" != 1 ] || [ ! -f "$ch/manifest.json" ]; then
    OMP_NUM_THREADS=1 $DT capture "${common[@]}" --depth 5 --keep-rows 0 --out "$ch" --overwrite
  fi
}
chat() {  # the MT-Bench-like chat suite (the README's second answer; the Table-2-form rows), 48 new tokens
  OMP_NUM_THREADS=1 $DT capture --target "$T" --drafter eagle3=$M/eagle3 --drafter eagle3.1=$M/eagle3.1 \
    --probes probes/real/mt_chat.jsonl --depth "$DEPTH" --max-new-tokens 48 --keep-rows 0 --full-every 1 --seed 0 \
    --sink "$SINK" --quiet --out "$OUT/chat/smollm2-mt_chat.drift" --overwrite "$@"
}
# PARTS: which traces to rebuild (default all): long_code agent_traces trees tf doc_qa short_chat chat
PARTS=" ${PARTS:-long_code agent_traces trees tf doc_qa short_chat chat} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
( { ! want long_code || cap long_code smollm2-long_code "$@"; } && { ! want agent_traces || cap agent_traces \
  smollm2-agent_traces "$@"; } && { ! want trees || trees; } && { ! want chat || chat; } ) &
a=$!
( { ! want tf || cap long_code teacher_forced/smollm2-long_code-tf --mode teacher-forced --keep-rows 0 "$@"; } \
  && { ! want doc_qa || cap doc_qa smollm2-doc_qa "$@"; } \
  && { ! want short_chat || if [ -f "$SUITES/short_chat.jsonl" ]; then cap short_chat smollm2-short_chat "$@"
     else SUITES=probes/real ROWS=2 cap short_chat smollm2-short_chat "$@"; fi; } ) &  # the first suites' control
b=$!
wait $a
wait $b
du -sh "$OUT"
