"""Generate-mode capture with the target's prompt forward shared by all drafters vs one forward per drafter.

One run, both ways, same prompts: the real target (SmolLM2-135M, `drifttool zoo fetch smollm2`) with the three
shipped SmolLM2 drafters (EAGLE-3, EAGLE-3.1, the norm_output what-if) on the first document of the powered
long-code suite (argparse, 6144 tokens) cut to each context, through the speculative loop without capture
hooks (the part the sharing changes); prints seconds per prompt and the ratio, and checks that both ways draft,
accept and commit the same tokens.

    OMP_NUM_THREADS=1 python bench/bench_shared_prefill.py --contexts 1k,4k
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _common import fmt_ctx, parse_contexts, print_table

from drifttool.model.target import load_target
from drifttool.run import loop
from drifttool.run.drafters import DrafterSpec, load_drafters
from drifttool.run.probes import load_suite
from drifttool.zoo import smollm2

REPO = Path(__file__).resolve().parents[1]
M = REPO / "drifttool" / "zoo" / "models" / "smollm2"


def run(target, drafters, ids, shared: bool) -> tuple[float, list]:
    t0 = time.perf_counter()
    pre = loop.prefill_prompt(target, ids) if shared else None
    out = [loop.speculate(target, d, ids, depth=8, max_new_tokens=32, prefill=pre) for d in drafters.values()]
    return time.perf_counter() - t0, [[(r.draft_ids, r.accepted, r.bonus) for r in o.rounds] for o in out]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="1k,4k")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    target = load_target(smollm2.fetch())
    specs = [DrafterSpec("eagle3", str(M / "eagle3")), DrafterSpec("eagle3.1", str(M / "eagle3.1")),
             DrafterSpec("eagle3+norm_output", str(M / "eagle3"), {"norm_output": True})]
    drafters = load_drafters(specs, target.shape(), "cpu", torch.float32)
    target.set_aux_layer_ids(next(iter(drafters.values())).config.input_aux_layer_ids)
    full = load_suite(REPO / "probes" / "real" / "powered" / "long_code.jsonl")[1].tokens(target)  # argparse@6144
    rows = []
    for n in parse_contexts(args.contexts):
        ids = full[:n]
        per, a = run(target, drafters, ids, shared=False)
        once, b = run(target, drafters, ids, shared=True)
        assert a == b, "shared prefill changed the rounds"
        rows.append([fmt_ctx(n), len(drafters), f"{per:.1f}", f"{once:.1f}", f"{per / once:.2f}x", "identical"])
    print("generate-mode capture loop, 3 drafters, depth 8, 32 new tokens, one thread, seconds per prompt")
    print_table(["context", "drafters", "prefill per drafter", "prefill shared", "speed-up", "rounds"], rows)


if __name__ == "__main__":
    main()
