"""MTP heads through the vllm engine: vLLM runs the target's own MTP layers (`speculative_config.method: mtp`,
read from the target's checkpoint), so drifttool's replay drafter must be the head vLLM runs, read the way this
vLLM version reads it.

Two readings differ between vLLM versions. First, the token embedding and the output head: vLLM 0.32's proposer
gives an MTP drafter the target's `embed_tokens` and `lm_head` whatever the MTP layer holds
(`v1/spec_decode/llm_base_proposer.py`, `_maybe_share_embeddings` / `_maybe_share_lm_head`, the "MTP model"
branches, which also replace every layer's `shared_head.head`; pipeline-parallel size 1), where older vLLM read the
layer's own `embed_tokens` / `shared_head.head` (what drifttool's reader does). In public checkpoints these are
copies; where they differ, the replay drafter takes the target's (recorded), and the worker's fingerprints of what
vLLM loaded confirm it (`confirm_on_worker`).

Second, which tensor is fed back to the next draft step. vLLM's
proposer asks `model_returns_tuple()`: a model that returns (logits hidden, recycled hidden) has the second fed
back. In vLLM 0.32, DeepSeekMTPModel returns `(h, shared_head(h))` (deepseek_mtp.py, the end of
`DeepSeekMultiTokenPredictorLayer.forward`), so the post-norm state is fed back, while Glm4MoeMTPModel returns
the block output alone (pre-norm) and MiMoMTPModel its `final_layernorm` output (post-norm). The engine asks the
installed vLLM's proposer class before anything runs, sets the replay drafter's `norm_output` to that reading
(recorded under the drafter's assumptions) and the worker confirms it on the proposer vLLM built; the replay's
fed-back tensor cross-check then measures it on every draft step."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from safetensors import safe_open

from ....errors import DriftError
from ....model.drafter import DrafterBase
from ....model.mtp_checkpoint import _files
from ...drafters import DrafterSpec
from .recorder import fingerprint

# drifttool's MTP family -> the architecture vLLM's speculative config rewrites the target's config to
# (config/speculative.py, `SpeculativeConfig.hf_config_override`)
VLLM_ARCH = {"deepseek_v3": "DeepSeekMTPModel", "glm4_moe": "Glm4MoeMTPModel", "mimo": "MiMoMTPModel"}


def returns_tuple(arch: str) -> bool:
    """Whether this vLLM's proposer treats `arch` as returning (logits hidden, fed-back hidden): its own
    `model_returns_tuple`, asked with only what it reads (the method and the draft config's architectures)."""
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    probe = SimpleNamespace(method="mtp",
                            draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(architectures=[arch])))
    return bool(SpecDecodeBaseProposer.model_returns_tuple(probe))


def feeds_back_post_norm(vllm_module: Any, family: str) -> tuple[bool, str]:
    """(post-norm fed back?, why) for this vLLM and MTP family."""
    arch = VLLM_ARCH[family]
    version = getattr(vllm_module, "__version__", "?")
    if returns_tuple(arch):
        return True, (f"post-norm: vLLM {version}'s {arch} returns (h, shared_head.norm(h)) and its proposer feeds "
                      "back the second (model_returns_tuple)")
    if family == "mimo":
        return True, f"post-norm: vLLM {version}'s {arch} returns final_layernorm(h), which is fed back"
    return False, f"pre-norm: vLLM {version}'s {arch} returns the block output, which is fed back"


def check_mtp_spec(spec: DrafterSpec, target: str, name: str) -> None:
    """vLLM reads an MTP head from the target's own checkpoint and runs its own code: the drafter folder must be
    the target folder, and a what-if override cannot be handed to vLLM."""
    if Path(spec.path).resolve() != Path(target).resolve():
        raise DriftError(f"--engine vllm: MTP drafter {name!r} reads {spec.path}, but vLLM runs the MTP layers of "
                         f"the target {target} (give --drafter {name}=TARGET_DIR)")
    if spec.overrides:
        raise DriftError(f"--engine vllm: MTP drafter {name!r} has overrides {spec.overrides}: vLLM runs its own "
                         "MTP code, a what-if cannot be served (use --engine hf for what-ifs)")


def target_tensor(folder: Path, key: str) -> torch.Tensor | None:
    """One tensor of the target's safetensors by its exact name (None when no file holds it)."""
    for f in _files(folder):
        with safe_open(str(f), "pt") as st:
            if key in st.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                return st.get_tensor(key)
    return None


@torch.no_grad()
def share_target_embed_and_head(vllm_module: Any, target: str, drafter: DrafterBase, pipeline_parallel: int) -> None:
    """The replay drafter reads the target's embed_tokens and lm_head, as this vLLM's proposer makes an MTP drafter
    do (module doc); recorded under the drafter's assumptions when that changes a tensor."""
    if pipeline_parallel != 1:
        return  # vLLM then loads the draft's embeddings separately
    version = getattr(vllm_module, "__version__", "?")
    emb = target_tensor(Path(target), "model.embed_tokens.weight")
    head = target_tensor(Path(target), "lm_head.weight")
    head = emb if head is None else head  # tied
    a = drafter.config.assumptions
    for key, mine, theirs, what in (("embed_tokens", drafter.embed_tokens.weight, emb, "model.embed_tokens"),
                                    ("lm_head", drafter.lm_head.weight, head, "lm_head")):
        if theirs is None or theirs.shape != mine.shape or torch.equal(theirs.to(mine.dtype), mine):
            continue
        for layer in drafter.layers if key == "lm_head" else [drafter]:
            w = layer.shared_head.head.weight if key == "lm_head" else layer.embed_tokens.weight
            w.copy_(theirs.to(w.dtype))
        a[key] = (f"the target's {what} (vLLM {version} shares it with MTP drafters: "
                  f"llm_base_proposer._maybe_share_{'embeddings' if key == 'embed_tokens' else 'lm_head'}); "
                  "the MTP layer's own differs")


def prepare_mtp_drafter(vllm_module: Any, spec: DrafterSpec, target: str, name: str, drafter: DrafterBase,
                        pipeline_parallel: int = 1) -> None:
    """Check the spec and make the replay drafter the head this vLLM runs: the target's embeddings and head, and
    the fed-back tensor this vLLM feeds back (each recorded)."""
    check_mtp_spec(spec, target, name)
    share_target_embed_and_head(vllm_module, target, drafter, pipeline_parallel)
    cfg = drafter.config
    post, why = feeds_back_post_norm(vllm_module, cfg.mtp["family"])
    cfg.norm_output = post
    cfg.assumptions["mtp_feedback"] = why


def confirm_on_worker(ranks: list[dict], drafter: DrafterBase, name: str) -> None:
    """The proposer vLLM built must be an MTP proposer answering `model_returns_tuple` as the class did."""
    rec = next(r for r in ranks if r.get("recording"))
    family = drafter.config.mtp["family"]
    if rec.get("method") != "mtp":
        raise DriftError(f"--engine vllm: drafter {name!r}: vLLM's proposer runs method {rec.get('method')!r}, "
                         "expected mtp")
    for part, mine in (("embed", drafter.embed_tokens.weight), ("head", drafter.lm_head.weight)):
        theirs = rec.get(f"{part}_fingerprint")
        if theirs is None or rec.get("tp_size", 1) != 1 or rec.get("pp_size", 1) != 1:
            continue  # not exposed, or vocabulary-sharded under tensor parallel: the replay's diffs still judge
        ours = fingerprint(mine)
        key = "embed_tokens" if part == "embed" else "lm_head"
        read_as = drafter.config.assumptions.get(key, "the MTP layer's own")
        if any(abs(a - b) > 1e-5 * max(1.0, abs(b)) for a, b in zip(ours, theirs)):
            raise DriftError(f"--engine vllm: drafter {name!r}: vLLM's {rec.get('model')} loaded another "
                             f"{'token embedding' if part == 'embed' else 'output head'} than drifttool reads "
                             f"(drifttool reads {read_as}); the checkpoint holds two that differ")
    tup = bool(rec.get("returns_tuple"))
    post = tup or family == "mimo"
    if post != drafter.config.norm_output:
        raise DriftError(f"--engine vllm: drafter {name!r}: vLLM's {rec.get('model')} feeds back the "
                         f"{'post' if post else 'pre'}-norm state, the replay drafter the other")
