"""The speculative loop: chain drafting to depth K, verification, bonus token, drafter KV refresh.

Slot t of the drafter pairs token t+1 with target feature t at position t (docs/eagle3.md §4). A round starts by
running the slots committed since the last round with target features (prefill / refresh, overwriting
any draft slots there), then drafts depths 2..K from the fed-back tensor, then verifies."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import torch

from ..errors import DriftError
from ..model.drafter import DraftStep, Eagle3Drafter, KVCache
from ..model.target import Target, TargetSnapshot
from ..trace.metric_table import acceptance_length
from ..trace.positions import query_position
from . import progress
from .argcheck import is_int, need_int, need_number, token_ids
from .verify import greedy_accept, rejection_sample

MODES = ("generate", "teacher-forced")
# How drafts are drawn when temperature > 0. "greedy" (vLLM's default draft_sample_method): argmax drafts,
# verified against a one-hot draft distribution (accept d with probability p(d), else resample p without d).
# "probabilistic": drafts sampled from the drafter's distribution q, accepted with min(1, p/q) (EAGLE paper).
DRAFT_SAMPLING = ("greedy", "probabilistic")


@dataclass
class RoundRecord:
    round: int
    context_len: int  # committed tokens before this round's drafts (= position of depth-1 query + 1)
    draft_ids: list[int]  # target-vocab ids, one per depth
    target_ids: list[int]  # the target's token at each depth position (greedy / the forced continuation)
    accepted: int  # accepted prefix length (0..K)
    match: list[bool]  # per depth: draft equals the target's token there (teacher-forced: given a correct prefix)
    bonus: int
    input_ids: list[int] = field(default_factory=list)  # ids fed at depth 1..K (depth 1 = the last committed token)
    draft_s: float = float("nan")  # wall time of the drafter this round: refresh + K draft steps (K forward calls)
    verify_s: float = float("nan")  # wall time of the target's verify forward + acceptance (nan when teacher-forced)


@dataclass
class SpecResult:
    prompt_ids: list[int]
    output_ids: list[int]
    rounds: list[RoundRecord]

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted drafts per round (trace/metric_table.acceptance_length)."""
        return acceptance_length(sum(r.accepted for r in self.rounds), len(self.rounds))


class Observer(Protocol):
    """Round-level callbacks; per-step tensors come from hook points on the drafter."""

    def begin_round(
        self, drafter: Eagle3Drafter, round_idx: int, context_len: int, depth: int, seq: list[int]
    ) -> None: ...

    def end_round(self, drafter: Eagle3Drafter, cache: KVCache, record: RoundRecord) -> None: ...


def positions_needed(prompt_len: int, max_new_tokens: int, depth: int) -> int:
    """Positions a prompt's speculation can reach: the prompt, the new tokens and one round's overshoot."""
    return prompt_len + max_new_tokens + depth + 1


def check_prompt(prompt_ids: list[int], target: Target, need: int) -> None:
    if not prompt_ids:
        raise DriftError("prompt: empty (expected at least one token)")
    v = target.vocab_size
    bad = [i for i in prompt_ids if not 0 <= int(i) < v]
    if bad:
        raise DriftError(f"prompt: token id {bad[0]} outside the target vocabulary [0, {v})")
    if need > target.max_positions:
        raise DriftError(
            f"prompt: {len(prompt_ids)} tokens + generation needs {need} positions, beyond the target's "
            f"max_position_embeddings {target.max_positions}"
        )


def check_features(feats: torch.Tensor) -> None:
    if not torch.isfinite(feats).all():
        raise DriftError("target features: NaN or inf in the target's hidden states (check the target weights/dtype)")


@dataclass(frozen=True)
class Decoding:
    """How one prompt is decoded, checked at construction: chain depth, generation budget, mode ("generate" or
    "teacher-forced"), temperature (0 = greedy), the sampling seed, how drafts are drawn when sampling
    (DRAFT_SAMPLING) and the tokens that end the generation."""

    depth: int = 8
    max_new_tokens: int = 64
    mode: str = "generate"
    temperature: float = 0.0
    seed: int = 0
    draft_sampling: str = "greedy"
    stop_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_settings(self.depth, self.max_new_tokens, self.mode, self.temperature, self.draft_sampling)
        # torch's generator takes a 64-bit seed; a string or a bigger int was a raw torch error at speculate
        if not is_int(self.seed) or not -(2**63) <= self.seed < 2**64:
            raise DriftError(f"seed: {self.seed!r}; expected an integer in [-2^63, 2^64)")
        if isinstance(self.stop_ids, (str, bytes)) or not all(is_int(t) and t >= 0 for t in self.stop_ids):
            raise DriftError(f"stop_ids: {self.stop_ids!r}; expected a sequence of token ids (ints >= 0), e.g. (2,)")
        object.__setattr__(self, "stop_ids", tuple(int(t) for t in self.stop_ids))


@torch.no_grad()
def speculate(
    target: Target,
    drafter: Eagle3Drafter,
    prompt_ids: list[int],
    decoding: Decoding | None = None,
    *,
    observers: list[Observer] = (),
    forced: tuple[list[int], torch.Tensor] | None = None,
    prefill: Prefill | None = None,
    **decoding_kw,
) -> SpecResult:
    """Speculatively decode from `prompt_ids`; greedy when temperature == 0 (lossless w.r.t. the target).
    `decoding` is a Decoding, or give its fields as keywords (`depth=8`, `max_new_tokens=64`, `mode`,
    `temperature`, `seed`, `draft_sampling`, `stop_ids`), not both.
    With temperature > 0 both `draft_sampling` modes (DRAFT_SAMPLING) preserve the target's distribution.
    mode "teacher-forced": the drafter is fed the target's own greedy continuation (`forced`, else computed).
    `prefill` (generate mode): the target's prompt forward done once for several drafters (`prefill_prompt`)."""
    if decoding is not None and decoding_kw:
        raise DriftError(f"speculate: give a Decoding or its fields {sorted(decoding_kw)}, not both")
    dec = decoding if decoding is not None else Decoding(**decoding_kw)
    depth, max_new_tokens, mode, temperature = dec.depth, dec.max_new_tokens, dec.mode, dec.temperature
    seed, draft_sampling, stop_ids = dec.seed, dec.draft_sampling, tuple(dec.stop_ids)
    prompt_ids = token_ids(prompt_ids)
    check_prompt(prompt_ids, target, positions_needed(len(prompt_ids), max_new_tokens, depth))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    pick = partial(draft_token, drafter, temperature=temperature, gen=gen, draft_sampling=draft_sampling)
    seq = list(prompt_ids)
    if mode == "teacher-forced":
        forced_seq, all_feats = forced or teacher_forcing_data(target, prompt_ids, depth, max_new_tokens)
        check_features(all_feats)
        seq.append(forced_seq[len(prompt_ids)])
        pending = all_feats[: len(prompt_ids)]
        verify = partial(teacher_verify, forced_seq, all_feats)
    else:
        forced_seq = None
        first, pending = prefill_target(target, prompt_ids, temperature, gen, prefill)
        seq.append(first)
        verify = partial(verify_round, target, seq, temperature=temperature, gen=gen)
    progress.tick(len(prompt_ids))  # the prompt's tokens are read (prefilled or teacher-forced)
    cache = drafter.new_cache(capacity=len(prompt_ids) + max_new_tokens + 2 * depth + 8)

    def chain_round(index: int, step: DraftStep, n: int, t0: float):
        drafts, dprobs, fed = draft_chain(drafter, cache, step, n, depth, seq[-1], pick, forced_seq)
        draft_s = time.perf_counter() - t0
        v = verify(drafts, dprobs, n)
        rec = RoundRecord(round=index, context_len=n, draft_ids=drafts, target_ids=v.target_ids,
                          accepted=v.accepted, match=[d == t for d, t in zip(drafts, v.target_ids)], bonus=v.bonus,
                          input_ids=fed, draft_s=draft_s, verify_s=v.seconds)
        return rec, [*drafts[: v.accepted], v.bonus], v.features

    rounds = run_rounds(drafter, cache, prompt_ids, seq, pending, max_new_tokens, stop_ids, depth, observers,
                        chain_round)
    return SpecResult(prompt_ids, until_stop(seq[len(prompt_ids) :], stop_ids)[:max_new_tokens], rounds)


def run_rounds(drafter: Eagle3Drafter, cache: KVCache, prompt_ids: list[int], seq: list[int],
               pending: torch.Tensor, max_new_tokens: int, stop_ids: tuple[int, ...], depth: int,
               observers, one_round) -> list:
    """The round loop chains and trees share: refresh the drafter with the features committed since the last
    round, draft and verify (`one_round(index, step, n, t0)` -> (record, committed tokens, their features)),
    observers around each round; until max_new_tokens or a stop token. `seq` grows in place (observers hold it)."""
    rounds: list = []
    committed = 0  # drafter slots 0..committed-1 hold target features
    while len(seq) - len(prompt_ids) < max_new_tokens and not (stop_ids and seq[-1] in stop_ids):
        n = len(seq) - 1  # position of the newest committed token x_n; the depth-1 query sits at slot n-1
        for o in observers:
            o.begin_round(drafter, len(rounds), n, depth, seq)
        t0 = time.perf_counter()
        step = refresh(drafter, cache, seq[committed + 1 :], committed, pending)
        committed += pending.shape[0]
        rec, tokens, pending = one_round(len(rounds), step, n, t0)
        for o in observers:
            o.end_round(drafter, cache, rec)
        rounds.append(rec)
        seq.extend(tokens)
        progress.tick(len(tokens))
    return rounds


def check_settings(depth: int, max_new_tokens: int, mode: str, temperature: float, draft_sampling: str) -> None:
    """The loop's settings, checked before any forward (one line each, naming the CLI option)."""
    need_int("--depth", depth, 1, "a speculation depth >= 1")
    need_int("--max-new-tokens", max_new_tokens, 1)
    need_number("--temperature", temperature, 0.0, "a finite temperature >= 0 (0 = greedy)")
    if mode not in MODES:
        raise DriftError(f"--mode: {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "teacher-forced" and temperature > 0:
        raise DriftError("--mode teacher-forced: needs greedy decoding (temperature 0)")
    if draft_sampling not in DRAFT_SAMPLING:
        raise DriftError(f"--draft-sampling: {draft_sampling!r}; expected one of {', '.join(DRAFT_SAMPLING)}")


@dataclass(frozen=True)
class Prefill:
    """The target's forward over one prompt, shared by the drafters that replay it: the cache right after it,
    the last position's logits and the prompt's features."""

    ids: tuple[int, ...]
    snapshot: TargetSnapshot
    last_logits: torch.Tensor
    features: torch.Tensor


@torch.no_grad()
def prefill_prompt(target: Target, prompt_ids: list[int]) -> Prefill:
    """Run the prompt through the target once (generate mode); every drafter then starts from this state."""
    target.reset()
    out = target.forward(torch.tensor(prompt_ids))
    check_features(out.features)
    return Prefill(tuple(prompt_ids), target.snapshot(), out.logits[-1:], out.features)


def prefill_target(target: Target, prompt_ids: list[int], temperature: float,
                    gen: torch.Generator, prefill: Prefill | None = None) -> tuple[int, torch.Tensor]:
    """The target's prompt forward (or the shared one, restored): its first token and the prompt's features."""
    if prefill is None:
        prefill = prefill_prompt(target, prompt_ids)
    elif list(prefill.ids) != list(prompt_ids):
        raise DriftError("prefill: computed for another prompt")
    else:
        target.restore(prefill.snapshot)
    return _pick(prefill.last_logits, temperature, gen), prefill.features


def until_stop(gen_ids: list[int], stop_ids: tuple[int, ...]) -> list[int]:
    for i, t in enumerate(gen_ids):
        if t in stop_ids:
            return gen_ids[: i + 1]
    return gen_ids


# -- the three steps of a round ------------------------------------------------------------------------
def refresh(drafter: Eagle3Drafter, cache: KVCache, next_ids, start: int, feats: torch.Tensor) -> DraftStep:
    """Run the slots start..start+m-1 (m = feats rows) with target features, overwriting any draft slots there:
    slot t pairs token next_ids[t - start] (= token t+1) with feature t. Returns the last slot's step."""
    dev = drafter.lm_head.weight.device
    m = feats.shape[0]
    ids = torch.as_tensor(next_ids[:m], device=dev)[None]
    pos = torch.arange(start, start + m, device=dev)[None]
    cache.truncate(start)
    step = drafter(ids, feats[None].to(drafter.lm_head.weight.dtype), pos, cache, hidden_is_feature=True)
    return DraftStep(step.logits[:, -1:], step.pre[:, -1:], step.post[:, -1:], step.feedback[:, -1:])


def draft_chain(drafter: Eagle3Drafter, cache: KVCache, step: DraftStep, n: int, depth: int, first_input: int,
                pick, forced: list[int] | None = None, steps: list | None = None) -> tuple[list[int], list, list[int]]:
    """Draft depths 1..K from the refreshed step: depth k+1 is fed depth k's draft (teacher forcing: the true
    token forced[n+k]) with the drafter's own fed-back tensor at its query slot (trace/positions.py). pick(logits) -> (token, its
    draft distribution or None). Returns (drafts, their distributions, the ids fed at depths 1..K); `steps`, when
    given, receives each depth's DraftStep (its fed-back tensor is the next depth's layer input)."""
    dev = drafter.lm_head.weight.device
    drafts, dprobs, fed = [], [], [first_input]
    for k in range(1, depth + 1):
        if steps is not None:
            steps.append(step)
        tok, probs = pick(step.logits[0, -1])
        drafts.append(tok)
        dprobs.append(probs)
        if k == depth:
            break
        nxt = forced[n + k] if forced is not None else tok
        fed.append(nxt)
        step = drafter(torch.tensor([[nxt]], device=dev), step.feedback, torch.tensor([[query_position(n, k + 1)]], device=dev),
                       cache, hidden_is_feature=False)
    return drafts, dprobs, fed


@dataclass
class Verdict:
    accepted: int  # accepted prefix length 0..K
    bonus: int  # the target's token after the accepted prefix
    target_ids: list[int]  # the target's token at each depth position
    features: torch.Tensor  # target features of the newly committed positions (the next refresh)
    seconds: float = float("nan")  # wall time of the verify forward + acceptance (nan when teacher-forced)


def verify_round(target: Target, seq: list[int], drafts: list[int], dprobs: list, n: int, temperature: float = 0.0,
                 gen: torch.Generator | None = None) -> Verdict:
    """One target forward over [x_n, drafts]: greedy acceptance, or rejection sampling when temperature > 0;
    the target's cache is cropped to the committed tokens."""
    t0 = time.perf_counter()
    vo = target.forward(torch.tensor([seq[-1], *drafts]))
    check_features(vo.features)
    if temperature > 0:
        a, bonus = rejection_sample(drafts, torch.stack(dprobs), (vo.logits / temperature).softmax(-1), gen)
    else:
        a, bonus = greedy_accept(drafts, vo.logits)
    tgt_ids = vo.logits.argmax(-1)[: len(drafts)].tolist()
    target.crop(n + a + 1)
    return Verdict(a, bonus, tgt_ids, vo.features[: a + 1], time.perf_counter() - t0)


def teacher_verify(forced: list[int], all_feats: torch.Tensor, drafts: list[int], dprobs: list, n: int) -> Verdict:
    """Teacher forcing as a verification strategy: the drafts are checked against the target's precomputed
    greedy continuation, no target forward."""
    truth = forced[n + 1 : n + 1 + len(drafts)]
    a = 0
    while a < len(drafts) and drafts[a] == truth[a]:
        a += 1
    return Verdict(a, forced[n + 1 + a], truth, all_feats[n : n + a + 1])


def _pick(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> int:
    if temperature > 0:
        return int(torch.multinomial((logits[-1].float() / temperature).softmax(-1).cpu(), 1, generator=gen))
    return int(logits[-1].argmax())


def draft_token(drafter: Eagle3Drafter, logits: torch.Tensor, temperature: float = 0.0,
                gen: torch.Generator | None = None, draft_sampling: str = "greedy"):
    """(draft token, its draft distribution in target-vocab space; None at temperature 0)."""
    if temperature > 0 and draft_sampling == "probabilistic":
        probs = drafter.target_probs(logits / temperature).cpu()
        return int(torch.multinomial(probs, 1, generator=gen)), probs
    tok = int(drafter.draft_to_target(logits.argmax()))
    if temperature > 0:  # vLLM: greedy drafts are verified as if drawn from a one-hot distribution
        probs = torch.zeros(drafter.config.vocab_size)
        probs[tok] = 1.0
        return tok, probs
    return tok, None


@torch.no_grad()
def teacher_forcing_data(target: Target, prompt_ids: list[int], depth: int, max_new_tokens: int):
    """Compute once, share across drafters: the target's greedy continuation and every position's features."""
    target.reset()
    out = target.forward(torch.tensor([int(i) for i in prompt_ids]))
    return _greedy_continuation(target, out, [int(i) for i in prompt_ids], max_new_tokens + depth + 1)


def _greedy_continuation(target: Target, prefill, prompt_ids: list[int], n_new: int):
    """The target's own greedy continuation and the aux features of every position (teacher forcing)."""
    seq = list(prompt_ids)
    feats = [prefill.features]
    logits = prefill.logits[-1]
    for _ in range(n_new):
        tok = int(logits.argmax())
        seq.append(tok)
        o = target.forward(torch.tensor([tok]))
        feats.append(o.features)
        logits = o.logits[-1]
    seq.append(int(logits.argmax()))
    return seq, torch.cat(feats, 0)
