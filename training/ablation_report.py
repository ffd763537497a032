"""The 2x2 ablation of EAGLE-3.1's two changes (`fc_norm`, `norm_output`) on held-out conversations.

Per variant and TTT step: top-1 agreement with the target's argmax over all held-out positions, and the mean RMS
of the fed-back tensor. Per conversation (the group: held-out conversations come from documents never used in
training, one conversation each): the paired main effect of each change (averaged over the other's two levels),
their interaction and the two together (EAGLE-3.1 - EAGLE-3), each with its 95% t-interval, sign-flip p and
minimum detectable effect over the groups (drifttool.analysis.stats.paired).

    python -m training.ablation_report runs/real/features/heldout runs/ablation/drafters [--json report.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

VARIANTS = ("eagle3", "fc_norm-only", "norm_output-only", "eagle3.1")
STEPS = 3


def per_conversation(features: str, folder: str) -> dict[str, np.ndarray]:
    """variant -> [conversations, steps, 4] of ttt_loss's stats (loss sum, hits, count, feedback RMS sum)."""
    from drifttool.model.checkpoint import load_drafter
    from drifttool.model.target import load_target
    from drifttool.zoo import smollm2
    from training.train_real import Shards, ttt_loss

    torch.set_num_threads(1)
    target = load_target(smollm2.fetch())
    embed = target.input_embeddings().detach().float()
    held = Shards(Path(features))
    held.refresh()
    out = {}
    for v in VARIANTS:
        d = load_drafter(Path(folder) / v, target=target).eval()
        ids = torch.arange(d.config.draft_vocab_size) + d.d2t.long()
        rows = []
        with torch.no_grad():
            for row in held.rows:
                _, st = ttt_loss(d, held.get(row), embed[ids], ids, STEPS, 1.0)
                rows.append(np.array(st, float))
        out[v] = np.stack(rows)
    return out


def effects(per: dict[str, np.ndarray]) -> dict[str, list[dict[str, float]]]:
    """Per step, the paired contrasts over conversations of the per-conversation agreement rates."""
    from drifttool.analysis.stats import paired

    r = {v: per[v][:, :, 1] / per[v][:, :, 2] for v in VARIANTS}  # [conv, steps]
    e3, fc, no, e31 = (r[v] for v in VARIANTS)
    contrasts = {"fc_norm (main effect)": ((fc - e3) + (e31 - no)) / 2,
                 "norm_output (main effect)": ((no - e3) + (e31 - fc)) / 2,
                 "interaction": (e31 - no) - (fc - e3),
                 "both (EAGLE-3.1 - EAGLE-3)": e31 - e3}
    return {name: [paired(x[:, k]) for k in range(x.shape[1])] for name, x in contrasts.items()}


def pooled(per: dict[str, np.ndarray]) -> dict[str, dict[str, list[float]]]:
    out = {}
    for v in VARIANTS:
        s = per[v].sum(0)
        out[v] = {"top1_per_step": [round(float(x), 4) for x in s[:, 1] / s[:, 2]],
                  "feedback_rms_per_step": [round(float(x), 3) for x in s[:, 3] / s[:, 2]],
                  "positions": int(s[0, 2])}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="training.ablation_report", description=__doc__.splitlines()[0])
    p.add_argument("features")
    p.add_argument("drafters")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    per = per_conversation(a.features, a.drafters)
    n_conv = len(next(iter(per.values())))
    pool, eff = pooled(per), effects(per)
    print(f"{n_conv} held-out conversations (groups), {pool['eagle3']['positions']} positions; TTT steps 1-{STEPS}\n")
    print("| variant | fc_norm | norm_output | top-1 agreement, steps 1 / 2 / 3 | fed-back RMS, steps 1 / 2 / 3 |")
    print("|---|---|---|---|---|")
    for v in VARIANTS:
        flags = ("yes" if v in ("fc_norm-only", "eagle3.1") else "no", "yes" if v in ("norm_output-only", "eagle3.1") else "no")
        print(f"| {v} | {flags[0]} | {flags[1]} | " + " / ".join(f"{x:.3f}" for x in pool[v]["top1_per_step"])
              + " | " + " / ".join(f"{x:.2f}" for x in pool[v]["feedback_rms_per_step"]) + " |")
    print("\n| contrast (per conversation, paired) | step | mean [95% CI] | p (sign-flip) | MDE (80% power) |")
    print("|---|---|---|---|---|")
    for name, rows in eff.items():
        for k, s in enumerate(rows):
            print(f"| {name} | {k + 1} | {s['mean']:+.4f} [{s['lo']:+.4f}, {s['hi']:+.4f}] | {s['p']:.3g} | "
                  f"{s['mde']:.4f} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"conversations": n_conv, "pooled": pool, "effects": eff}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
