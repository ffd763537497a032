"""The vllm engine's cross-checks: the trace's acceptance against vLLM's own spec-decode metrics, and when a
replay stops measuring vLLM's drafter (the stated tolerance and the per-prompt verdict).

The replay feeds drifttool's drafter vLLM's own inputs, step by step, so with the same drafter it agrees with
vLLM up to float noise (fp32 CPU: <= 6e-5 absolute on O(1) tensors). Disagreement beyond the tolerance means
the two ran different drafters (a window, a flag or a convention read differently), and the attention masses
of that prompt describe a drafter vLLM did not run: the prompt is flagged in the manifest (`flags`), which
`info`, `compare` and the dashboard show."""

from __future__ import annotations

from typing import Any

from ....errors import DriftError
from ...loop import RoundRecord

SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
}

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
            bad.append(
                f"{name} differs by {stats.get(f'replay_max_{key}_diff', float('nan')):.3g} "
                f"({rel:.2g} of its scale > {tol[f'max_rel_{key}_diff']:.0e})"
            )
    if not bad:
        return None
    return (
        "replay disagrees with vLLM: " + "; ".join(bad) + ". Its masses describe a drafter vLLM did not run "
        "(check sliding_window, flags and aux layer ids in `drifttool info`)"
    )


def spec_metrics(llm) -> dict[str, Any]:
    """Spec-decode counters from `LLM.get_metrics()`, summed over engines."""
    out: dict[str, Any] = {
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "accepted_per_pos": [],
    }
    for m in llm.get_metrics():
        key = SPEC_METRICS.get(m.name)
        if key is None:
            continue
        if key == "accepted_per_pos":
            vals = list(getattr(m, "values", []))
            acc = out[key] + [0] * (len(vals) - len(out[key]))
            out[key] = [int(x + (vals[i] if i < len(vals) else 0)) for i, x in enumerate(acc)]
        else:
            out[key] += int(getattr(m, "value", 0))
    return out


def metrics_delta(before: dict, after: dict) -> dict[str, Any]:
    """What one prompt added to vLLM's counters."""
    d = {k: after[k] - before[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    b = before["accepted_per_pos"] + [0] * (len(after["accepted_per_pos"]) - len(before["accepted_per_pos"]))
    d["accepted_per_pos"] = [x - y for x, y in zip(after["accepted_per_pos"], b)]
    return d


def acceptance_counts(records: list[RoundRecord], k: int | None = None) -> dict:
    """vLLM's spec-decode counters (drafts, draft tokens, accepted, accepted per position) as these rounds give
    them: what vLLM's counters must equal, and a prompt's counts where vLLM gave no per-request stats."""
    k = (len(records[0].draft_ids) if records else 0) if k is None else k
    return {"num_drafts": len(records), "num_draft_tokens": sum(len(r.draft_ids) for r in records),
            "num_accepted_tokens": sum(r.accepted for r in records),
            "accepted_per_pos": [sum(r.accepted > i for r in records) for i in range(k)]}


def check_acceptance(records: list[RoundRecord], delta: dict, per_request, where: str) -> None:
    """The trace's acceptance must equal vLLM's spec-decode metrics (and its per-request stats)."""
    acc = [r.accepted for r in records]
    k = len(records[0].draft_ids) if records else len(delta["accepted_per_pos"])
    mine = {key: v for key, v in acceptance_counts(records, k).items() if key != "num_draft_tokens"}
    theirs = {
        "num_drafts": delta["num_drafts"],
        "num_accepted_tokens": delta["num_accepted_tokens"],
        "accepted_per_pos": (delta["accepted_per_pos"] + [0] * k)[:k],
    }
    if mine != theirs:
        raise DriftError(
            f"--engine vllm: {where}: acceptance from vLLM's rejection sampler {mine} disagrees with "
            f"vLLM's spec-decode metrics {theirs}"
        )
    steps = list(getattr(per_request, "per_step_accepted", None) or [])
    if steps and steps != acc:
        raise DriftError(
            f"--engine vllm: {where}: per-round acceptance {acc} disagrees with vLLM's per-request "
            f"stats {steps}"
        )
