"""Print docs/real_target.md's training table (markdown) from a run's curves.jsonl and final report.json:
held-out teacher-forced agreement per TTT step at each checkpoint, tokens seen, wall time, tokens/s.

    python -m training.training_curve runs/real/train/curves.jsonl runs/real/drafters
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(curves: str = "runs/real/train/curves.jsonl", drafters: str = "runs/real/drafters") -> None:
    rows = [json.loads(line) for line in Path(curves).read_text().splitlines() if line.strip()]
    steps = {r["step"]: r for r in rows if "lr" in r}
    tokens, seen = {}, 0
    for s in sorted(steps):
        seen += steps[s]["tokens"]
        tokens[s + 1] = (seen, steps[s]["elapsed"])
    print("| step | tokens seen per variant | train time | EAGLE-3 (steps 1 / 2 / 3) | EAGLE-3.1 (steps 1 / 2 / 3) | "
          "held-out positions |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "eval" not in r or not r["eval"]:
            continue
        e = r["eval"]
        tok, el = tokens.get(r["step"], (None, None))
        f = lambda v, e=e: " / ".join(f"{x:.3f}" for x in e[v]["heldout_top1_per_step"])  # noqa: E731
        print(f"| {r['step']} | {tok:,} | {el / 60:.0f} min | {f('eagle3')} | {f('eagle3.1')} | "
              f"{e['eagle3']['heldout_positions']:,} |" if tok else
              f"| {r['step']} | - | - | {f('eagle3')} | {f('eagle3.1')} | {e['eagle3']['heldout_positions']:,} |")
    rep = json.loads((Path(drafters) / "eagle3" / "report.json").read_text())
    print(f"\nFinal: {rep['steps']} steps, {rep['train_tokens_seen']:,} tokens seen per variant in "
          f"{rep['train_seconds'] / 60:.0f} min ({rep['train_tokens_seen'] / rep['train_seconds']:.0f} tokens/s per "
          f"variant, both variants in one process on one core); cache {rep['cache_tokens']:,} tokens in "
          f"{rep['cache_conversations']:,} conversations.")


if __name__ == "__main__":
    main(*sys.argv[1:])
