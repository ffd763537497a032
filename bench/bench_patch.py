"""Cost of `drifttool patch` against a capture of the same prompts (goal: one intervened run <= 2.2x one capture;
the clean pass and the target's continuation are computed once and shared by every intervention). In one run,
alternating: `capture` of the prompts with one drafter, then `patch` of the same prompts with that drafter and N
interventions (clean pass + N intervened passes); prints the wall-time ratios per block and their median, and
writes bench/results/patch_cost.json.

    .venv/bin/python bench/bench_patch.py [--limit 3] [--sites 1] [--blocks 3] [--site attention.recency@2]

`--site` measures one named intervention instead of the first N feedback sites (an attention site also computes
each edited query's row and its shifts: its cost is the row's, O(keys) per depth and head)."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITES = ["feedback.rms1@2", "feedback.norm@2", "feedback.teacher@2"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=3)
    ap.add_argument("--sites", type=int, default=1, choices=[1, 2, 3])
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--site", default=None, help="one intervention to measure (default: the first --sites)")
    a = ap.parse_args()
    chosen = [a.site] if a.site else SITES[:a.sites]
    a.sites = len(chosen)
    from drifttool.run.drafters import DrafterSpec
    from drifttool.run.engines.hf import run_capture
    from drifttool.run.engines.patch import run_patch
    from drifttool.run.interventions import parse
    from drifttool.trace.sinks import SinkSpec
    from drifttool.zoo import smollm2

    target = str(smollm2.fetch())
    spec = [DrafterSpec("eagle3", str(ROOT / "drifttool/zoo/models/smollm2/eagle3"))]
    probes = str(ROOT / "probes/real/mt_chat.jsonl")
    common = dict(depth=8, max_new_tokens=a.new, limit=a.limit, keep_rows=0, sink=SinkSpec.parse("target"),
                  progress=False, overwrite=True)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for b in range(a.blocks):
            t0 = time.perf_counter()
            run_capture(target, spec, probes, f"{tmp}/c.drift", **common)
            cap = time.perf_counter() - t0
            t0 = time.perf_counter()
            run_patch(target, spec, probes, f"{tmp}/p.drift", [parse(s) for s in chosen], **common)
            pat = time.perf_counter() - t0
            ratios.append(pat / cap)
            print(f"block {b}: capture {cap:.1f} s, patch (clean + {a.sites} intervened) {pat:.1f} s: "
                  f"{pat / cap:.2f}x")
    med = statistics.median(ratios)
    goal = 1.2 + a.sites  # one capture's work per pass, plus the shared target pass
    print(f"patch with {', '.join(chosen)} / capture, median of {a.blocks} blocks: {med:.2f}x "
          f"(goal <= {goal:.1f}x: {'met' if med <= goal else 'missed'}; {a.limit} mt_chat prompts, "
          f"{a.new} new tokens, depth 8, SmolLM2 + the bundled EAGLE-3, CPU)")
    out = ROOT / "bench" / "results" / ("patch_cost.json" if not a.site else "patch_cost_attention.json")
    out.write_text(json.dumps({"ratios": ratios, "median": med, "sites": a.sites, "which": chosen, "goal": goal, "limit": a.limit,
                               "new_tokens": a.new, "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
