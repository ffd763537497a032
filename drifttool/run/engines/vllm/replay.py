"""vLLM's recorded drafter inputs replayed through drifttool's drafter (same checkpoint via `read_drafter`),
under the same `Capture` the hf engine uses: the first pass is the loop's own `refresh` step; depths 2..K are
fed vLLM's ids and fed-back tensors, so each depth's attention is measured on exactly the input vLLM's drafter
had. Acceptance and bonus tokens are vLLM's; the replay's own drafts and tensors are compared with vLLM's
(`ReplayStats`), which `crosscheck.verdict` judges.

A submission's prompts are replayed side by side (`replay_prompts`): one ragged KV cache, each forward stepping
every prompt's next first pass or draft depth, each prompt's `Capture` fed only its own batch row — so a prompt's
numbers do not depend on which prompts share its batch (tests/run/test_vllm_replay.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ....errors import DriftError
from ....model.drafter import DrafterBase, DraftStep
from ....model.ragged_cache import RaggedKVCache
from ....trace.positions import query_position
from ...hooks import Capture, RowCaptures
from ...loop import RoundRecord, refresh
from .recorder import Proposal, Verify


@dataclass
class ReplayStats:
    """How closely drifttool's drafter reproduced vLLM's (same inputs, same weights)."""

    drafts_agree: int = 0
    drafts_total: int = 0
    drafts_tied: int = 0  # counted in drafts_agree: another token than vLLM's, its top two logits within the dtype's
    #                      resolution of each other (a near tie a kernel's rounding breaks either way)
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
            "replay_draft_ties": self.drafts_tied,
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


def first_pass_span(prop: Proposal, cached: int, depth: int) -> tuple[int, int]:
    """(start, n): the first pass runs positions start..n-1, contiguous and continuing the `cached` slots."""
    if len(prop.drafts) != depth or len(prop.steps) != depth:
        raise align_error(
            f"a proposal has {len(prop.drafts)} drafts / {len(prop.steps)} drafter calls, "
            f"expected num_speculative_tokens={depth}"
        )
    pos = prop.steps[0].pos[: prop.sample_idx + 1]
    start, n = int(pos[0]), int(pos[-1]) + 1
    if not torch.equal(pos, torch.arange(start, n, device=pos.device)):
        raise align_error("first-pass positions are not contiguous")
    if cached < start:
        raise align_error(f"first pass starts at position {start} but only {cached} slots were seen")
    return start, n


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


# Prompts replayed side by side in one ragged cache (a CPU runs sixteen single-token forwards side by side in
# about three times the time of one); first passes longer than LONG_PASS slots (prefills, prefill chunks) run one
# prompt at a time, as padding a batch to them would cost more than batching saves.
REPLAY_BATCH = 16
LONG_PASS = 32


@dataclass
class _Prompt:
    """One prompt's replay state: its capture, its recorded rounds, where it is, what it produced."""

    cap: Capture
    pairs: list[tuple[Proposal, Verify | None]]
    full: list[int]
    records: list[RoundRecord] = field(default_factory=list)
    stats: ReplayStats = field(default_factory=ReplayStats)
    i: int = 0

    def todo(self) -> bool:
        """A round left (drafts proposed after the final verify step are never used: not one)."""
        return self.i < len(self.pairs) and not (self.pairs[self.i][1] is None and self.i == len(self.pairs) - 1)


@dataclass
class _Work:
    prop: Proposal
    ver: Verify | None
    start: int
    n: int

    @property
    def m(self) -> int:  # first-pass slots
        return self.prop.sample_idx + 1


def last_slot(step: DraftStep, b: int) -> DraftStep:
    return DraftStep(step.logits[b : b + 1, -1:], step.pre[b : b + 1, -1:], step.post[b : b + 1, -1:],
                     step.feedback[b : b + 1, -1:])


def first_passes(drafter: DrafterBase, cache: RaggedKVCache, router: RowCaptures, slot: list[int],
                 rows: list[_Prompt], work: list[_Work]) -> list[DraftStep]:
    """The loop's refresh on vLLM's features for every prompt of the batch; each prompt's last-slot step."""
    dev, dt = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    router.rows = [None] * len(rows)  # the fc check below is not a captured step: nothing routed
    for p, w in zip(rows, work):
        p.stats.fc(drafter.combine(w.prop.feats[: w.m].to(dev, dt)), w.prop.steps[0].hidden[: w.m].to(dev))
    for b, w in enumerate(work):
        cache.truncate(b, w.start)
    out: list[DraftStep | None] = [None] * len(rows)
    for b, w in enumerate(work):
        if w.m > LONG_PASS:
            router.rows = [slot[b]]
            out[b] = refresh(drafter, cache.row(b), w.prop.steps[0].ids[: w.m].to(dev), w.start,
                             w.prop.feats[: w.m].to(dev, dt))
    short = [b for b, w in enumerate(work) if w.m <= LONG_PASS]
    if short:
        t = max(work[b].m for b in short)
        ids = torch.zeros(len(rows), t, dtype=torch.long, device=dev)
        pos = torch.zeros(len(rows), t, dtype=torch.long, device=dev)
        feats = torch.zeros(len(rows), t, work[short[0]].prop.feats.shape[-1], dtype=dt, device=dev)
        for b in short:  # right-aligned: the last slot of every row is its sampled one
            w = work[b]
            ids[b, t - w.m :] = w.prop.steps[0].ids[: w.m].to(dev)
            pos[b, t - w.m :] = torch.arange(w.start, w.start + w.m, device=dev)
            feats[b, t - w.m :] = w.prop.feats[: w.m].to(dev, dt)
        cache.plan([work[b].m if b in short else 0 for b in range(len(rows))])
        router.rows = [slot[b] if b in short else None for b in range(len(rows))]
        step = drafter(ids, feats, pos, cache, hidden_is_feature=True)
        for b in short:
            out[b] = last_slot(step, b)
    return out


def chains(drafter: DrafterBase, cache: RaggedKVCache, router: RowCaptures, slot: list[int], rows: list[_Prompt],
           work: list[_Work], steps: list[DraftStep], depth: int
           ) -> tuple[dict[int, list[int]], dict[int, list[int]], dict[int, list[bool]]]:
    """Depths 2..K of every verified round of the batch on vLLM's ids and fed-back tensors, side by side; per
    batch row (ids fed at depths 2..K, the replay's drafts, whether each was a near tie)."""
    dev, dt = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    live = [b for b, w in enumerate(work) if w.ver is not None]
    fed: dict[int, list[int]] = {b: [] for b in live}
    mine = {b: [int(drafter.draft_to_target(steps[b].logits[0, -1].argmax()))] for b in live}
    tied = {b: [near_tie(steps[b].logits[0, -1], dt)] for b in live}
    if not live:
        return fed, mine, tied
    h_dim = work[live[0]].prop.steps[1].hidden.shape[-1] if depth > 1 else 0
    for k in range(2, depth + 1):
        ids = torch.zeros(len(rows), 1, dtype=torch.long, device=dev)
        pos = torch.zeros(len(rows), 1, dtype=torch.long, device=dev)
        h = torch.zeros(len(rows), 1, h_dim, dtype=dt, device=dev)
        for b in live:
            st, n = work[b].prop.steps[k - 1], work[b].n
            if int(st.pos[0]) != query_position(n, k):
                raise align_error(f"draft step {k} at position {int(st.pos[0])}, expected {query_position(n, k)}")
            theirs = st.hidden[0].to(dev)
            rows[b].stats.feedback(steps[b].feedback[0, -1], theirs)
            fed[b].append(int(st.ids[0]))
            ids[b, 0], pos[b, 0], h[b, 0] = int(st.ids[0]), int(st.pos[0]), theirs.to(dt)
        cache.plan([int(b in fed) for b in range(len(rows))])
        router.rows = [slot[b] if b in fed else None for b in range(len(rows))]
        step = drafter(ids, h, pos, cache, hidden_is_feature=False)
        top = drafter.draft_to_target(step.logits[:, -1].argmax(-1)).tolist()
        for b in live:
            steps[b] = last_slot(step, b)
            mine[b].append(int(top[b]))
            tied[b].append(near_tie(step.logits[b, -1], dt))
    return fed, mine, tied


def near_tie(logits: torch.Tensor, dtype: torch.dtype) -> bool:
    """The top two logits within the dtype's resolution of each other (crosscheck.MAX_REL_DIFF of the larger's
    magnitude): which of the two wins is rounding, so choosing the other is not a disagreement."""
    from .crosscheck import MAX_REL_DIFF

    rel = MAX_REL_DIFF["float32" if dtype in (torch.float32, torch.float64) else "16-bit"]
    two = logits.float().topk(2).values
    return bool(two[0] - two[1] <= rel * max(1.0, float(two[0].abs())))


def replay_round(drafter: DrafterBase, cache: RaggedKVCache, router: RowCaptures, slot: list[int],
                 rows: list[_Prompt], depth: int) -> None:
    """The next recorded round of every prompt in the batch: first passes, chains, vLLM's verdicts, captures."""
    work = []
    for b, p in enumerate(rows):
        prop, ver = p.pairs[p.i]
        start, n = first_pass_span(prop, cache.lengths[b], depth)
        if ver is not None:
            p.cap.begin_round(drafter, len(p.records), n, depth, p.full[: n + 1])
        work.append(_Work(prop, ver, start, n))
    steps = first_passes(drafter, cache, router, slot, rows, work)
    first_ids = [int(w.prop.steps[0].ids[w.m - 1]) for w in work]
    fed, mine, tied = chains(drafter, cache, router, slot, rows, work, steps, depth)
    for b, (p, w) in enumerate(zip(rows, work)):
        p.i += 1
        if w.ver is None:
            continue  # a prefill chunk: its slots stay in the cache for the next chunk
        p.stats.drafts_total += depth
        same = [a == c for a, c in zip(mine[b], w.prop.drafts)]
        p.stats.drafts_tied += sum(not x and t for x, t in zip(same, tied[b]))
        p.stats.drafts_agree += sum(x or t for x, t in zip(same, tied[b]))
        rec = vllm_round(len(p.records), w.prop, w.ver, p.full, w.n, depth, [first_ids[b], *fed[b]])
        p.cap.end_round(drafter, cache.row(b), rec)
        p.records.append(rec)


@torch.no_grad()
def replay_prompts(drafter: DrafterBase, caps: list[Capture], jobs: list[tuple[list, list[int], list[int]]],
                   depth: int) -> list[tuple[list[RoundRecord], ReplayStats]]:
    """Replay each prompt's recorded drafter inputs (jobs: events, prompt ids, output ids) through `drafter`, all
    side by side in one ragged cache, each prompt's `Capture` (not attached: they are routed) seeing exactly its
    own rows; vLLM's verdicts. Returns per prompt (its rounds, how closely the replay reproduced vLLM)."""
    ps = [_Prompt(cap, pair_rounds(ev), [int(t) for t in ids] + [int(t) for t in out])
          for cap, (ev, ids, out) in zip(caps, jobs)]
    if not ps:
        return []
    cache = drafter.new_ragged_cache(len(ps), max(len(p.full) for p in ps) + 2 * depth + 8)
    slot = list(range(len(ps)))  # batch row -> prompt (and its capture)
    with RowCaptures(drafter, caps) as router:
        while True:
            live = [b for b, j in enumerate(slot) if ps[j].todo()]
            if not live:
                break
            if len(live) < len(slot):  # finished prompts leave the batch
                cache.keep(live)
                slot = [slot[b] for b in live]
            replay_round(drafter, cache, router, slot, [ps[j] for j in slot], depth)
    return [(p.records, p.stats) for p in ps]
