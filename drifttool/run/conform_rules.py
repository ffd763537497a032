"""What the EAGLE-3 and the MTP halves of `drifttool conform` share: when two drafters count as the same, how a
reading is named, and the reference's drafts on the engine's rounds."""

from __future__ import annotations

import numpy as np

from .follow import follow

AGREE = 0.98  # draft agreement at or above this, over all depths, counts as the same drafter (float noise)
NAMES = {("fc_norm", False): "fc_norm ignored", ("fc_norm", True): "fc_norm applied with unit weights",
         ("norm_output", False): "norm_output ignored (pre-norm hidden fed back, as EAGLE-3)",
         ("norm_output", True): "post-norm hidden fed back (norm_output applied)",
         ("norm_before_fc", True): "norm_before_fc applied (unit weights)", ("norm_before_fc", False): "norm_before_fc ignored",
         ("norm_before_residual", True): "norm_before_residual assumed true",
         ("norm_before_residual", False): "norm_before_residual assumed false"}


def agreement(ref: np.ndarray, eng: np.ndarray) -> float:
    return float((ref == eng).mean()) if ref.size else float("nan")


def drafts_of(target, m, prompts, depth: int, order, rounds_per_prompt: int | None) -> np.ndarray:
    out = []
    for seq, feats, rounds in prompts.values():
        ctx = [r["context_len"] for r in rounds][:rounds_per_prompt]
        out.append(follow(target, m, seq, ctx, depth, feats, order).drafts)
    return np.concatenate(out)
