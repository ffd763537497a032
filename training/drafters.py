"""The zoo drafters' shape, their two variants, and how a pair is initialised: the same weights for both
(built under one seed from the EAGLE-3 config; EAGLE-3.1's extra fc_norm weights start at 1), the target's
embeddings, frozen. Shared by train_drafter (tiny targets) and train_real (the real target)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from drifttool.model.config import DrafterConfig
from drifttool.model.drafter import Eagle3Drafter

VARIANTS: dict[str, dict[str, bool]] = {
    "eagle3": {"fc_norm": False, "norm_output": False},
    "eagle3.1": {"fc_norm": True, "norm_output": True},
    # the two single-change ablations: which of EAGLE-3.1's changes does what (the 2x2 with the two above)
    "fc_norm-only": {"fc_norm": True, "norm_output": False},
    "norm_output-only": {"fc_norm": False, "norm_output": True},
}


@dataclass
class DrafterShape:
    """A zoo drafter's own sizes; the rest of its config comes from the target."""

    hidden_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    head_dim: int = 32
    intermediate_size: int = 352
    draft_vocab_size: int = 1024
    aux_layer_ids: list[int] = field(default_factory=lambda: [1, 2, 3])

    def config(
        self,
        variant: str,
        *,
        vocab_size: int,
        target_hidden_size: int,
        rms_norm_eps: float,
        rope_theta: float,
        max_position_embeddings: int,
        trained_window: int | None = None,
    ) -> DrafterConfig:
        return DrafterConfig(
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            vocab_size=vocab_size,
            draft_vocab_size=self.draft_vocab_size,
            target_hidden_size=target_hidden_size,
            aux_layer_ids=list(self.aux_layer_ids),
            rms_norm_eps=rms_norm_eps,
            rope_theta=rope_theta,
            max_position_embeddings=max_position_embeddings,
            trained_window=trained_window,
            layout="zoo",
            **VARIANTS[variant],
        )


def variant_drafters(
    config: Callable[[str], DrafterConfig],
    variants: Iterable[str],
    seed: int,
    embed: torch.Tensor,
    d2t: torch.Tensor,
) -> dict[str, Eagle3Drafter]:
    """One drafter per variant, all from the same initial weights: the EAGLE-3 drafter built under `seed`,
    loaded into each variant (extra fc_norm weights start at 1); embed_tokens = `embed`, frozen."""
    torch.manual_seed(seed)
    base = Eagle3Drafter(config("eagle3"))
    out = {}
    for v in variants:
        m = Eagle3Drafter(config(v))
        missing, unexpected = m.load_state_dict(base.state_dict(), strict=False)
        assert not unexpected and all(k.startswith("fc_norm.") for k in missing), (missing, unexpected)
        with torch.no_grad():
            m.embed_tokens.weight.copy_(embed)
            m.d2t.copy_(d2t)
        m.embed_tokens.weight.requires_grad_(False)
        out[v] = m
    return out
