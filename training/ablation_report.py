"""The 2x2 ablation of EAGLE-3.1's two changes (`fc_norm`, `norm_output`) on held-out conversations.

Per variant and TTT step: top-1 agreement with the target's argmax over all held-out positions, and the mean RMS
of the fed-back tensor. Per conversation (the group: held-out conversations come from documents never used in
training, one conversation each): the paired main effect of each change (averaged over the other's two levels),
their interaction and the two together (EAGLE-3.1 - EAGLE-3), each with its 95% t-interval, sign-flip p and
minimum detectable effect over the groups (drifttool.analysis.stats.paired).

Several drafter folders (replicate runs under other seeds: other initial weights, batch order and scored slots)
give each run's contrasts side by side and the contrasts of the per-conversation rates averaged over runs. The
intervals are over conversations only: with a handful of runs, the spread between runs is shown, not modelled.

    python -m training.ablation_report runs/real/features/heldout runs/ablation/drafters [more folders]
        [--json report.json]
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


def rates(per: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """variant -> [conversations, steps] agreement rate."""
    return {v: per[v][:, :, 1] / per[v][:, :, 2] for v in VARIANTS}


def effects(per: dict[str, np.ndarray], r: dict[str, np.ndarray] | None = None) -> dict[str, list[dict[str, float]]]:
    """Per step, the paired contrasts over conversations of the per-conversation agreement rates (`r`, if given:
    rates already combined, e.g. averaged over replicate runs)."""
    from drifttool.analysis.stats import paired

    r = rates(per) if r is None else r
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


def over_runs(pers: list[dict[str, np.ndarray]]) -> dict[str, list[dict[str, float]]]:
    """Contrasts of the per-conversation rates averaged over replicate runs (same held-out conversations)."""
    rs = [rates(p) for p in pers]
    return effects(pers[0], {v: np.mean([r[v] for r in rs], axis=0) for v in VARIANTS})


def _ci(s: dict[str, float]) -> str:
    return f"{s['mean']:+.4f} [{s['lo']:+.4f}, {s['hi']:+.4f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="training.ablation_report", description=__doc__.splitlines()[0])
    p.add_argument("features")
    p.add_argument("drafters", nargs="+", help="one folder per run (replicates under other seeds)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    pers = [per_conversation(a.features, d) for d in a.drafters]
    n_conv = len(next(iter(pers[0].values())))
    pools, effs = [pooled(x) for x in pers], [effects(x) for x in pers]
    print(f"{n_conv} held-out conversations (groups), {pools[0]['eagle3']['positions']} positions; TTT steps "
          f"1-{STEPS}; {len(pers)} run(s): {', '.join(a.drafters)}\n")
    print("| run | variant | fc_norm | norm_output | top-1 agreement, steps 1 / 2 / 3 | fed-back RMS, steps 1 / 2 / 3 |")
    print("|---|---|---|---|---|---|")
    for i, pool in enumerate(pools):
        for v in VARIANTS:
            flags = ("yes" if v in ("fc_norm-only", "eagle3.1") else "no",
                     "yes" if v in ("norm_output-only", "eagle3.1") else "no")
            print(f"| {i + 1} | {v} | {flags[0]} | {flags[1]} | "
                  + " / ".join(f"{x:.3f}" for x in pool[v]["top1_per_step"]) + " | "
                  + " / ".join(f"{x:.2f}" for x in pool[v]["feedback_rms_per_step"]) + " |")
    both = over_runs(pers) if len(pers) > 1 else None
    runs_h = " | ".join(f"run {i + 1}: mean [95% CI]" for i in range(len(pers)))
    print(f"\n| contrast (per conversation, paired) | step | {runs_h} | p (sign-flip) | MDE (80% power) |"
          + (" averaged over runs: mean [95% CI] | p | MDE |" if both else ""))
    print("|---|---|" + "---|" * len(pers) + "---|---|" + ("---|---|---|" if both else ""))
    for name in effs[0]:
        for k in range(STEPS):
            cols = " | ".join(_ci(e[name][k]) for e in effs)
            ps = " / ".join(f"{e[name][k]['p']:.3g}" for e in effs)
            mdes = " / ".join(f"{e[name][k]['mde']:.4f}" for e in effs)
            tail = (f" {_ci(both[name][k])} | {both[name][k]['p']:.3g} | {both[name][k]['mde']:.4f} |" if both else "")
            print(f"| {name} | {k + 1} | {cols} | {ps} | {mdes} |" + tail)
    if a.json:
        out = {"conversations": n_conv, "pooled": pools[0], "effects": effs[0]}
        if both:
            out = {"conversations": n_conv, "runs": [{"drafters": d, "pooled": pl, "effects": e}
                                                      for d, pl, e in zip(a.drafters, pools, effs)],
                   "over_runs": both}
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
