"""`drifttool conform` for an MTP head (a target folder with multi-token-prediction layers): what the engines feed
back and which embeddings / head they run, and which reading reproduces an engine's drafts.

An MTP head has no EAGLE-3 flags. What engines read differently is the family's rules (docs/mtp.md): the state
fed back to the next draft step (the block output before `shared_head.norm`, or after it) and, where the MTP layer
stores its own `embed_tokens` / `shared_head.head`, whether those or the target's run. `mtp_static_findings` names
where the engines differ for this checkpoint; `diagnose_mtp` re-runs the reference under each reading on the
engine's rounds, as `conform.diagnose` does for EAGLE-3 flag combinations."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..model.conformance import Finding
from ..model.mtp_checkpoint import FAMILIES, mtp_config, read_mtp_weights
from .conform_rules import NAMES, agreement, drafts_of, judged

# The fed-back state per family and engine: True = post-norm. drifttool's own loop follows vLLM's current
# v1/spec_decode/eagle.py (@f7eef1b); the vLLM 0.32.0 release differs for DeepSeek-V3 (docs/mtp.md, "fed back").
HF = "drifttool --engine hf (vLLM main: v1/spec_decode/eagle.py @f7eef1b)"
VLLM_032 = "vllm 0.32.0 (the version scripts/test_vllm.sh installs)"
FEEDBACK = {
    "deepseek_v3": {HF: False, VLLM_032: True},  # deepseek_mtp.py:144 returns (h, shared_head(h)); proposer :1002
    "glm4_moe": {HF: False, VLLM_032: False},  # Glm4MoeMTP returns the block output
    "mimo": {HF: True, VLLM_032: True},  # MiMo's layer ends in final_layernorm
}
SHARED_032 = ("runs the target's embed_tokens and lm_head whatever the MTP layer stores "
              "(v1/spec_decode/llm_base_proposer.py: _maybe_share_embeddings :1416, _maybe_share_lm_head :1508)")


def _state(post: bool) -> str:
    return "the post-norm state (shared_head.norm output)" if post else "the block output before shared_head.norm"


def mtp_declared(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """The report's `declared` block for an MTP head (the fields `conform.render` prints)."""
    cfg = mtp_config(raw, path)
    m = cfg.mtp
    return {"layout": f"MTP head ({m['vllm_module']}), {m['num_layers']} layer(s) at model layer {m['start']}",
            "flags": {"norm_output": cfg.norm_output}, "aux_layer_ids": "the target's last hidden state",
            "draft_vocab_size": cfg.vocab_size}


def own_tensors(path: Path, raw: dict[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{"embed_tokens" / "lm_head": (the MTP layer's own, the target's)} where the layer stores its own and it
    differs from the target's (public checkpoints store copies: then the readings agree and nothing is listed)."""
    cfg = mtp_config(raw, path)
    sd = read_mtp_weights(path, cfg)
    out = {}
    pairs = {"embed_tokens": ("embed.0", "target.model.embed_tokens.weight"),
             "lm_head": ("layers.0.shared_head.head.weight", "target.lm_head.weight")}
    for name, (own, tgt) in pairs.items():
        if own in sd and tgt in sd and not torch.equal(sd[own].float(), sd[tgt].float()):
            out[name] = (sd[own], sd[tgt])
    return out


def mtp_static_findings(path: Path, raw: dict[str, Any], depth: int | None = None) -> list[Finding]:
    """Where the engines read this MTP head differently (warnings), and the recursion beyond the trained layers
    (info)."""
    cfg = mtp_config(raw, path)
    m, fam = cfg.mtp, cfg.mtp["family"]
    out: list[Finding] = []
    reads = FEEDBACK[fam]
    if len(set(reads.values())) > 1:
        out.append(Finding("mtp_feedback_differs", "warning",
                           f"engines feed a different state back to the next draft step for {FAMILIES[fam]}: the "
                           "drift this head shows depends on the engine's version",
                           {e: f"feeds back {_state(post)}" for e, post in reads.items()}))
    own = own_tensors(path, raw)
    if own:
        names = " and ".join(own)
        out.append(Finding("mtp_own_embeddings", "warning",
                           f"the MTP layer stores its own {names}, different from the target's: engines run "
                           "different weights",
                           {HF: f"runs the MTP layer's own {names}", VLLM_032: SHARED_032}))
    n = m["num_layers"]
    if n > 1 or (depth or 0) > n:
        out.append(Finding("mtp_layer_reused", "info",
                           f"{n} MTP layer(s) trained; every draft step runs the first (vLLM's proposer passes no "
                           "spec_step_idx), so depths beyond 1 apply it to its own output",
                           {HF: "layer 0 at every depth", VLLM_032: "layer 0 at every depth"}))
    return out


def mtp_variant(drafter, norm_output: bool, shared: dict[str, tuple[torch.Tensor, torch.Tensor]] | None):
    """The head under another reading: the other fed-back state (no weights involved), and/or the target's
    embeddings and head in place of the layer's own (`shared`: own_tensors)."""
    m = copy.deepcopy(drafter)
    m.config = dataclasses.replace(drafter.config, norm_output=norm_output)
    with torch.no_grad():
        for name, (_, tgt) in (shared or {}).items():
            w = m.embed_tokens.weight if name == "embed_tokens" else m.lm_head.weight
            w.copy_(tgt.to(w))
    return m


def diagnose_mtp(target, drafter, prompts, depth: int, engine_drafts: np.ndarray, own: dict) -> dict[str, Any]:
    """Every reading (fed-back state x embeddings / head source where the layer's own differ) re-run on all the
    engine's rounds; the best match named (the same verdict rules as conform.diagnose)."""
    declared_post = bool(drafter.config.norm_output)
    sources = {"own": None, "target": own} if own else {"own": None}
    tried = []
    for post in (False, True):
        for src, shared in sources.items():
            parts = [NAMES[("norm_output", post)]] if post != declared_post else []
            if src == "target":
                parts.append("the target's embeddings and head (vLLM 0.32.0's reading)")
            m = mtp_variant(drafter, post, shared)
            drafts = drafts_of(target, m, prompts, depth, None, None)
            tried.append({"norm_output": post, "embeddings": src, "as": "; ".join(parts) or "as declared",
                          "agreement": agreement(drafts, engine_drafts)})
    best, declared, verdict = judged(tried, "this MTP head", "reading")
    return {"verdict": verdict, "best": best, "declared": declared, "finalists": tried, "tried": tried,
            "method": f"{len(tried)} readings of the MTP head (fed-back state"
                      + (", embeddings/head source" if own else "") + f") re-run on all {len(engine_drafts)} rounds"}
