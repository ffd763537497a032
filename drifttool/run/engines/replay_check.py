"""When a vLLM replay stops measuring vLLM's drafter: the stated tolerance and the per-prompt verdict.

The replay feeds drifttool's drafter vLLM's own inputs, step by step, so with the same drafter it agrees with
vLLM up to float noise (fp32 CPU: <= 6e-5 absolute on O(1) tensors). Disagreement beyond the tolerance means
the two ran different drafters (a window, a flag or a convention read differently), and the attention masses
of that prompt describe a drafter vLLM did not run: the prompt is flagged in the manifest (`flags`), which
`info`, `compare` and the dashboard show."""

from __future__ import annotations

from typing import Any

# Drafts: share of the K drafts per round where drifttool's argmax equals vLLM's. Tensors: max |difference|
# relative to max |vLLM's tensor| (fc output; fed-back tensor). 16-bit runs round every op, hence looser.
MIN_DRAFT_AGREEMENT = 0.98
MAX_REL_DIFF = {"float32": 1e-3, "16-bit": 3e-2}


def tolerance(dtype: str) -> dict[str, float]:
    rel = MAX_REL_DIFF["float32" if "32" in str(dtype) or "64" in str(dtype) else "16-bit"]
    return {"min_draft_agreement": MIN_DRAFT_AGREEMENT, "max_rel_fc_diff": rel, "max_rel_feedback_diff": rel}


def verdict(stats: dict[str, Any], dtype: str) -> str | None:
    """None when the replay is within tolerance, else one line saying what disagreed."""
    tol = tolerance(dtype)
    bad = []
    agree = stats.get("replay_draft_agreement")
    if agree is not None and agree == agree and agree < tol["min_draft_agreement"]:
        bad.append(f"drafts agree on {agree:.0%} of steps (< {tol['min_draft_agreement']:.0%})")
    for key, name in (("fc", "fc(features)"), ("feedback", "fed-back tensor")):
        rel = stats.get(f"replay_rel_{key}_diff", 0.0)
        if rel > tol[f"max_rel_{key}_diff"]:
            bad.append(f"{name} differs by {stats.get(f'replay_max_{key}_diff', float('nan')):.3g} "
                       f"({rel:.2g} of its scale > {tol[f'max_rel_{key}_diff']:.0e})")
    if not bad:
        return None
    return ("replay disagrees with vLLM: " + "; ".join(bad) + ". Its masses describe a drafter vLLM did not run "
            "(check sliding_window, flags and aux layer ids in `drifttool info`)")
