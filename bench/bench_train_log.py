"""The drift logger's share of training time at its default cadence (issue #64; goal <= 5 %). In one run: the bundled
EAGLE-3 drafter (SmolLM2-135M's shape) takes real training steps as the project's trainer takes them
(training/train_real.ttt_loss: a TTT unroll of 3 steps over one conversation window under bf16 autocast, half the
slots scored, backward, AdamW), on features of the real shape (random values: the cost does not depend on them);
then the logger evaluates the same drafter with its defaults (teacher-forced, depth 4, 32 new tokens) on a few
mt_chat prompts through the real target. Its share = one evaluation / (every x one step + one evaluation). Prints
the medians and the share, and writes bench/results/train_log_cost.json.

    .venv/bin/python bench/bench_train_log.py [--window 2048] [--probes 4] [--every 100] [--steps 4]"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _conv(d, window: int, g) -> dict:
    """One conversation window of the real shape: token ids, the three aux features, the target's post-norm state."""
    import torch

    h = d.config.hidden_size
    return {"ids": torch.randint(0, d.config.vocab_size, (window + 1,), generator=g),
            "aux": torch.randn(window + 1, d.fc.in_features, generator=g),
            "post": torch.randn(window + 1, h, generator=g),
            "top1": torch.randint(0, d.config.vocab_size, (window + 1,), generator=g)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--probes", type=int, default=4)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    import torch

    from drifttool.model.checkpoint import load_drafter
    from drifttool.model.target import load_target
    from drifttool.run.probes import load_suite
    from drifttool.train_log import DriftLogger
    from drifttool.zoo import smollm2
    from training.train_real import ttt_loss

    target_dir = smollm2.fetch()
    t = load_target(str(target_dir))
    d = load_drafter(str(ROOT / "drifttool/zoo/models/smollm2/eagle3"), t)
    d.train()
    g = torch.Generator().manual_seed(0)
    e_draft = t.input_embeddings()[d.d2t + torch.arange(d.config.draft_vocab_size)].detach().float()
    draft_ids = d.d2t + torch.arange(d.config.draft_vocab_size)
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-5)
    steps = []
    for _ in range(a.steps + 1):  # the first is a warm-up
        conv = _conv(d, a.window, g)
        t0 = time.perf_counter()
        loss, _ = ttt_loss(d, conv, e_draft, draft_ids, 3, 0.8, keep=0.5, gen=g, bf16=True)
        (loss / a.window).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append(time.perf_counter() - t0)
    step = statistics.median(steps[1:])
    probes = [p.tokens(t) for p in load_suite(ROOT / "probes/real/mt_chat.jsonl")[:a.probes]]
    logger = DriftLogger(str(target_dir), probes, every=a.every)
    evals = []
    for i in range(3):  # the first is a warm-up
        t0 = time.perf_counter()
        logger.evaluate(d, i)
        evals.append(time.perf_counter() - t0)
    ev = statistics.median(evals[1:])
    share = ev / (a.every * step + ev)
    print(f"one training step {step:.2f} s (window {a.window}, TTT 3, bf16, median of {a.steps}); one logger "
          f"evaluation {ev:.2f} s ({a.probes} mt_chat prompts, depth 4, 32 new tokens, teacher-forced); every "
          f"{a.every} steps: {100 * share:.2f} % of training time (goal <= 5 %: {'met' if share <= 0.05 else 'missed'};"
          " SmolLM2-135M and the bundled EAGLE-3, CPU)")
    out = ROOT / "bench" / "results" / "train_log_cost.json"
    out.write_text(json.dumps({"step_s": steps, "eval_s": evals, "every": a.every, "share": share,
                               "window": a.window, "probes": a.probes, "date": time.strftime("%Y-%m-%d")},
                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
