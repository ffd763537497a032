"""vLLM's recorded drafter inputs replayed through drifttool's drafter (same checkpoint via `read_drafter`),
under the same `Capture` the hf engine uses: the first pass is the loop's own `refresh` step; depths 2..K are
fed vLLM's ids and fed-back tensors, so each depth's attention is measured on exactly the input vLLM's drafter
had. Acceptance and bonus tokens are vLLM's; the replay's own drafts and tensors are compared with vLLM's
(`ReplayStats`), which `crosscheck.verdict` judges."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ....errors import DriftError
from ....model.drafter import DraftStep, Eagle3Drafter, KVCache
from ....trace.positions import query_position
from ...hooks import Capture
from ...loop import RoundRecord, refresh
from .recorder import Proposal, Verify


@dataclass
class ReplayStats:
    """How closely drifttool's drafter reproduced vLLM's (same inputs, same weights)."""

    drafts_agree: int = 0
    drafts_total: int = 0
    max_fc_diff: float = 0.0  # |drifttool combine(features) - vLLM's first-pass hidden input|
    max_feedback_diff: float = 0.0  # |drifttool fed-back tensor - vLLM's step-k hidden input|
    fc_scale: float = 0.0  # max |vLLM's first-pass hidden input|
    feedback_scale: float = 0.0  # max |vLLM's step-k hidden input|

    def fc(self, mine: torch.Tensor, theirs: torch.Tensor) -> None:
        self.max_fc_diff = max(self.max_fc_diff, float((mine.float() - theirs.float()).abs().max()))
        self.fc_scale = max(self.fc_scale, float(theirs.float().abs().max()))

    def feedback(self, mine: torch.Tensor, theirs: torch.Tensor) -> None:
        self.max_feedback_diff = max(
            self.max_feedback_diff, float((mine.float() - theirs.float()).abs().max())
        )
        self.feedback_scale = max(self.feedback_scale, float(theirs.float().abs().max()))

    def to_dict(self) -> dict[str, float]:
        agree = self.drafts_agree / self.drafts_total if self.drafts_total else float("nan")
        return {
            "replay_draft_agreement": agree,
            "replay_max_fc_diff": self.max_fc_diff,
            "replay_max_feedback_diff": self.max_feedback_diff,
            "replay_rel_fc_diff": self.max_fc_diff / self.fc_scale if self.fc_scale else 0.0,
            "replay_rel_feedback_diff": self.max_feedback_diff / self.feedback_scale
            if self.feedback_scale
            else 0.0,
        }


def align_error(msg: str) -> DriftError:
    return DriftError(
        f"--engine vllm: recorded vLLM steps do not line up ({msg}); this vLLM version's "
        "proposer differs from what drifttool's recorder expects"
    )


def pair_rounds(events: list) -> list[tuple[Proposal, Verify | None]]:
    """Each proposal with the verify step that checks its drafts (None: prefill chunk or never verified)."""
    # The sampler also runs in steps without drafts (the prefill's first token); those verify nothing.
    events = [e for e in events if not (isinstance(e, Verify) and not e.drafts)]
    out = []
    for i, ev in enumerate(events):
        nxt = events[i + 1] if i + 1 < len(events) else None
        if isinstance(ev, Proposal):
            out.append((ev, nxt if isinstance(nxt, Verify) else None))
        elif i == 0 or not isinstance(events[i - 1], Proposal):
            raise align_error(f"verify step {i} without a preceding proposal")
    return out


def first_pass_span(prop: Proposal, cache: KVCache, depth: int) -> tuple[int, int]:
    """(start, n): the first pass runs positions start..n-1, contiguous and continuing the cache."""
    if len(prop.drafts) != depth or len(prop.steps) != depth:
        raise align_error(
            f"a proposal has {len(prop.drafts)} drafts / {len(prop.steps)} drafter calls, "
            f"expected num_speculative_tokens={depth}"
        )
    pos = prop.steps[0].pos[: prop.sample_idx + 1]
    start, n = int(pos[0]), int(pos[-1]) + 1
    if not torch.equal(pos, torch.arange(start, n, device=pos.device)):
        raise align_error("first-pass positions are not contiguous")
    if cache.length < start:
        raise align_error(f"first pass starts at position {start} but only {cache.length} slots were seen")
    return start, n


def replay_first_pass(
    drafter: Eagle3Drafter, cache: KVCache, prop: Proposal, start: int, stats: ReplayStats
) -> tuple[DraftStep, int]:
    """The loop's refresh on vLLM's features; returns its last step and the id fed there (depth 1's input)."""
    dev, dt = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    s, first = prop.sample_idx, prop.steps[0]
    feats = prop.feats[: s + 1].to(dev, dt)
    ids = first.ids[: s + 1].to(dev)
    step = refresh(drafter, cache, ids, start, feats)
    stats.fc(drafter.combine(feats), first.hidden[: s + 1].to(dev))
    return step, int(ids[-1])


def replay_chain(
    drafter: Eagle3Drafter,
    cache: KVCache,
    prop: Proposal,
    step: DraftStep,
    n: int,
    depth: int,
    stats: ReplayStats,
) -> tuple[list[int], list[int]]:
    """Depths 2..K on vLLM's ids and fed-back tensors; returns (ids fed at depths 2..K, the replay's drafts)."""
    dev, dt = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    fed, mine = [], [int(drafter.draft_to_target(step.logits[0, -1].argmax()))]
    for k in range(2, depth + 1):
        st = prop.steps[k - 1]
        if int(st.pos[0]) != query_position(n, k):
            raise align_error(f"draft step {k} at position {int(st.pos[0])}, expected {query_position(n, k)}")
        h = st.hidden[:1].to(dev)
        stats.feedback(step.feedback[0, -1], h[0])
        fed.append(int(st.ids[0]))
        step = drafter(
            st.ids[:1].to(dev)[None], h[None].to(dt), st.pos[:1].to(dev)[None], cache, hidden_is_feature=False
        )
        mine.append(int(drafter.draft_to_target(step.logits[0, -1].argmax())))
    return fed, mine


def vllm_round(
    index: int, prop: Proposal, ver: Verify, full: list[int], n: int, depth: int, fed: list[int]
) -> RoundRecord:
    """The round as vLLM ran it (its drafts, its verdict), checked against the tokens vLLM emitted."""
    drafts = prop.drafts
    if ver.drafts != drafts[: len(ver.drafts)]:
        raise align_error(f"round {index}: vLLM verified {ver.drafts}, the drafter proposed {drafts}")
    a = len(ver.sampled) - 1
    if a < 0 or a > len(ver.drafts) or ver.sampled[:a] != drafts[:a]:
        raise align_error(f"round {index}: sampler output {ver.sampled} vs drafts {drafts}")
    emitted = full[n + 1 : n + 2 + a]
    if emitted != ver.sampled[: len(emitted)]:
        raise align_error(
            f"round {index} at position {n}: vLLM emitted {emitted}, its sampler said {ver.sampled}"
        )
    tgt = list(ver.target_argmax[:depth]) + [-1] * (depth - len(ver.target_argmax))
    return RoundRecord(
        round=index,
        context_len=n,
        draft_ids=list(drafts),
        target_ids=tgt,
        accepted=a,
        match=[d == t for d, t in zip(drafts, tgt)],
        bonus=ver.sampled[-1],
        input_ids=fed,
        draft_s=prop.wall,
    )


@torch.no_grad()
def replay_prompt(
    drafter: Eagle3Drafter,
    cap: Capture,
    events: list,
    prompt_ids: list[int],
    output_ids: list[int],
    depth: int,
) -> tuple[list[RoundRecord], ReplayStats]:
    """Replay one prompt's recorded drafter inputs through `drafter` with `cap` attached (vLLM's verdicts)."""
    full = [int(t) for t in prompt_ids] + [int(t) for t in output_ids]
    pairs = pair_rounds(events)
    cache = drafter.new_cache(capacity=len(full) + 2 * depth + 8)
    stats = ReplayStats()
    records: list[RoundRecord] = []
    for i, (prop, ver) in enumerate(pairs):
        if ver is None and i == len(pairs) - 1:
            break  # drafts proposed after the final verify step; never used
        start, n = first_pass_span(prop, cache, depth)
        if ver is not None:
            cap.begin_round(drafter, len(records), n, depth, full[: n + 1])
        step, first_id = replay_first_pass(drafter, cache, prop, start, stats)
        if ver is None:
            continue  # a prefill chunk: its slots stay in the cache for the next chunk
        fed, mine = replay_chain(drafter, cache, prop, step, n, depth, stats)
        stats.drafts_total += depth
        stats.drafts_agree += sum(a == b for a, b in zip(mine, prop.drafts))
        rec = vllm_round(len(records), prop, ver, full, n, depth, [first_id, *fed])
        cap.end_round(drafter, cache, rec)
        records.append(rec)
    return records, stats
