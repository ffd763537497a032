"""Held-out teacher-forced agreement of shipped or candidate drafters on one feature cache, each through its own
draft vocabulary: per TTT step, the share of positions where the drafter's top-1 (mapped to a target id) equals
the target's argmax. Step 1 is greedy depth-1 acceptance on those positions.

    python -m training.heldout_agreement runs/real/features/heldout drifttool/zoo/models/smollm2 runs/real/drafters
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def main(features: str, *folders: str) -> None:
    from drifttool.model.checkpoint import load_drafter
    from drifttool.model.target import load_target
    from drifttool.zoo import smollm2
    from training.train_real import Shards, ttt_loss

    torch.set_num_threads(1)
    target = load_target(smollm2.fetch())
    embed = target.input_embeddings().detach().float()
    held = Shards(Path(features).parent)  # Shards lists w*/shard-*.json under its root
    held.root = Path(features)
    held.refresh()
    out = {}
    for folder in folders:
        for v in ("eagle3", "eagle3.1"):
            d = load_drafter(Path(folder) / v, target=target)
            d.eval()
            ids = torch.arange(d.config.draft_vocab_size) + d.d2t.long()
            acc = torch.zeros(3, 4)
            with torch.no_grad():
                for row in held.rows:
                    _, st = ttt_loss(d, held.get(row), embed[ids], ids, 3, 1.0)
                    acc[: len(st)] += torch.tensor(st)
            out[f"{folder}:{v}"] = {"top1_per_step": [round(float(x), 4) for x in acc[:, 1] / acc[:, 2]],
                                    "positions": int(acc[0, 2])}
            print(json.dumps({f"{folder}:{v}": out[f"{folder}:{v}"]}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
