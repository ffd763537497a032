"""A drafter re-run on another engine's rounds: the same committed sequence, the same round boundaries, the
drafter's own greedy chain at each. What conformance compares an engine's drafts with, and what the diagnosis
reruns under each flag combination.

The committed sequence comes from the engine's trace (greedy verification: a round commits its accepted drafts,
which equal the target's tokens, and the bonus token), so every variant sees the target features of exactly the
tokens the engine saw; only the drafter differs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from ..errors import DriftError
from ..model import flags as flag_table
from ..model.drafter import Eagle3Drafter
from ..model.target import Target
from .loop import draft_chain, draft_token, refresh


def varied() -> tuple[str, ...]:
    """The flags the diagnosis varies (with the aux-feature order and the drafter's attention window): every flag
    of model/flags.py, read when asked so a flag declared later is varied too."""
    return flag_table.names()



@dataclass
class Followed:
    drafts: np.ndarray  # [R, K] target ids the drafter proposes at each of the engine's rounds
    fed_rms: np.ndarray  # [R, K] RMS of the layer input at depth k (depth 1: fc's output; k > 1: the fed-back tensor)
    feature_rms: np.ndarray  # [R, A] RMS of each aux feature chunk at the depth-1 slot (the fc input, before norms)


def committed_sequence(prompt_ids: list[int], rounds: list[dict]) -> list[int]:
    """prompt + what each round committed: its target ids up to the accepted count, then the bonus token."""
    seq = list(prompt_ids)
    for r in rounds:
        seq += [int(t) for t in r["target_ids"][: int(r["accepted"])]] + [int(r["bonus"])]
    return seq


@torch.no_grad()
def follow(target: Target, drafter: Eagle3Drafter, seq: list[int], contexts: list[int], depth: int,
           feats: torch.Tensor | None = None, aux_order: list[int] | None = None) -> Followed:
    """The drafter's greedy chain of `depth` at every context length in `contexts` (the engine's rounds, in
    order) of the committed sequence `seq`. `feats`: the target's features of `seq` (computed when None);
    `aux_order`: a permutation of the feature chunks (a reader that took the aux layers in another order)."""
    if feats is None:
        target.reset()
        feats = target.forward(torch.tensor(seq)).features
    if aux_order is not None:
        a = drafter.config.num_aux
        chunks = feats.reshape(feats.shape[0], a, -1)
        feats = chunks[:, aux_order].reshape(feats.shape[0], -1)
    dev = drafter.lm_head.weight.device
    cache = drafter.new_cache(capacity=len(seq) + 2 * depth + 8)
    pick = partial(draft_token, drafter, temperature=0.0)
    drafts, fed_rms, feat_rms = [], [], []
    committed = 0
    a = max(drafter.config.num_aux, 1)
    for n in contexts:
        if not committed < n < len(seq):
            raise DriftError(f"round at context length {n}: not after the previous round and inside the sequence "
                             f"of {len(seq)} tokens")
        step = refresh(drafter, cache, seq[committed + 1:], committed, feats[committed:n].to(dev))
        first_in = drafter.combine(feats[n - 1:n].to(dev, drafter.lm_head.weight.dtype))
        committed = n
        steps: list = []
        d, _, _ = draft_chain(drafter, cache, step, n, depth, seq[n], pick, steps=steps)
        drafts.append(d)
        rms = lambda x: float(x.float().pow(2).mean().sqrt())  # noqa: E731
        fed_rms.append([rms(first_in)] + [rms(s.feedback) for s in steps[:-1]])
        feat_rms.append([rms(c) for c in feats[n - 1].reshape(a, -1)])
    return Followed(np.array(drafts, dtype=np.int64).reshape(len(contexts), depth),
                    np.array(fed_rms).reshape(len(contexts), depth), np.array(feat_rms).reshape(len(contexts), a))


def variant(drafter: Eagle3Drafter, **flags) -> Eagle3Drafter:
    """The same weights built under other flags, as an engine that reads the flags differently would: a norm the
    new flags add keeps RMSNorm's unit weights (an engine that builds the module finds no weight to load); one
    they drop is not applied."""
    flag_values = {k: v for k, v in flags.items() if k in flag_table.names()}
    other = {k: v for k, v in flags.items() if k not in flag_values}
    cfg = dataclasses.replace(drafter.config, **drafter.config.with_flags(flag_values), **other,
                              overrides=dict(drafter.config.overrides), assumptions=dict(drafter.config.assumptions))
    line = flag_table.conflict_line(cfg.flags())
    if line:
        raise DriftError(line)
    p = drafter.lm_head.weight
    m = Eagle3Drafter(cfg).to(device=p.device, dtype=p.dtype).eval()
    m.load_state_dict({k: v for k, v in drafter.state_dict().items() if k in m.state_dict()}, strict=False)
    return m
