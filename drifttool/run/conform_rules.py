"""What the EAGLE-3 and the MTP halves of `drifttool conform` share: when two drafters count as the same, how a
reading is named, and the reference's drafts on the engine's rounds."""

from __future__ import annotations

import numpy as np

from ..model.flags import reading_names
from .follow import follow

AGREE = 0.98  # draft agreement at or above this, over all depths, counts as the same drafter (float noise)
NAMES = reading_names()  # (flag, on) -> how a reading is named (model/flags.py)


def agreement(ref: np.ndarray, eng: np.ndarray) -> float:
    return float((ref == eng).mean()) if ref.size else float("nan")


def drafts_of(target, m, prompts, depth: int, order, rounds_per_prompt: int | None) -> np.ndarray:
    out = []
    for seq, feats, rounds in prompts.values():
        ctx = [r["context_len"] for r in rounds][:rounds_per_prompt]
        out.append(follow(target, m, seq, ctx, depth, feats, order).drafts)
    return np.concatenate(out)


def judged(final: list[dict], subject: str, tried: str) -> tuple[dict, dict, str]:
    """(best, declared, verdict) over readings each scored on all rounds (`agreement`, `as`): the best named when
    it reproduces the engine and the declared reading does not do as well. `subject`: "this checkpoint" / "this
    MTP head"; `tried`: what was varied ("combination", "reading")."""
    final.sort(key=lambda t: (-t["agreement"], t["as"] != "as declared"))
    best, declared = final[0], next(t for t in final if t["as"] == "as declared")
    if best["agreement"] >= AGREE and best["as"] != "as declared" and best["agreement"] > declared["agreement"]:
        verdict = f"the engine ran {subject} with {best['as']} ({best['agreement']:.1%} of drafts reproduced)"
    elif declared["agreement"] >= AGREE:
        verdict = f"the engine runs {subject.replace('this ', 'the ')} as declared"
    else:
        verdict = (f"no {tried} tried reproduces the engine (best: {best['as']}, {best['agreement']:.1%} of drafts; "
                   f"as declared {declared['agreement']:.1%})")
    return best, declared, verdict
