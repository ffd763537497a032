"""Greedy speculative decoding commits exactly the target's own greedy output, whatever the drafter."""

from __future__ import annotations

import copy

import pytest
import torch

import drifttool
from drifttool.model.tiny import tiny_drafter
from tests.support.tiny_training import greedy_reference, make_target

K_VALUES = (1, 2, 3, 5, 8)
N_NEW = 32


@pytest.fixture(scope="module")
def references(trained_pair):
    return [greedy_reference(trained_pair.target, p, N_NEW) for p in trained_pair.prompts]


def _check_rounds(res: drifttool.SpecResult, k: int) -> None:
    """Round bookkeeping: accepted = matching prefix; committed = first token + sum(accepted + 1)."""
    for r in res.rounds:
        assert len(r.draft_ids) == len(r.match) == len(r.input_ids) == k
        assert 0 <= r.accepted <= k
        assert all(r.match[: r.accepted])
        if r.accepted < k:
            assert not r.match[r.accepted]
    committed = 1 + sum(r.accepted + 1 for r in res.rounds)
    assert committed >= N_NEW > committed - (res.rounds[-1].accepted + 1)


@pytest.mark.parametrize("k", K_VALUES)
def test_greedy_speculation_equals_target_greedy(trained_pair, references, k):
    accepted = rounds = 0
    imperfect = 0
    for prompt, ref in zip(trained_pair.prompts, references):
        assert len(set(ref)) >= 4, "prompt continuation collapsed"
        res = drifttool.speculate(trained_pair.target, trained_pair.drafter, prompt, depth=k, max_new_tokens=N_NEW)
        assert res.output_ids == ref
        _check_rounds(res, k)
        accepted += sum(r.accepted for r in res.rounds)
        rounds += len(res.rounds)
        imperfect += sum(r.accepted < k for r in res.rounds)
    mean_al = 1 + accepted / rounds
    assert 1.0 < mean_al <= k + 1
    if k >= 3:  # the drafter is useful but imperfect: drafts get accepted and rejected
        assert mean_al < k + 1 and imperfect > 0


@pytest.mark.parametrize("k", (1, 3, 8))
def test_teacher_forced_commits_the_same_output(trained_pair, references, k):
    for prompt, ref in list(zip(trained_pair.prompts, references))[:2]:
        res = drifttool.speculate(trained_pair.target, trained_pair.drafter, prompt, depth=k,
                                  max_new_tokens=N_NEW, mode="teacher-forced")
        assert res.output_ids == ref
        _check_rounds(res, k)
        full = prompt + ref
        for r in res.rounds:
            # teacher forcing feeds the target's continuation, not the drafts, from depth 2 on
            n = r.context_len
            if n + 1 + k <= len(full):
                assert r.input_ids == full[n : n + k]
                assert r.target_ids == full[n + 1 : n + 1 + k]


def test_eagle31_drafter_is_lossless(trained_pair31):
    pair = trained_pair31
    for prompt in pair.prompts[:2]:
        ref = greedy_reference(pair.target, prompt, N_NEW)
        res = drifttool.speculate(pair.target, pair.drafter, prompt, depth=4, max_new_tokens=N_NEW)
        assert res.output_ids == ref
        assert res.mean_acceptance_length > 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_untrained_small_vocab_drafter_is_lossless(dtype):
    """A random drafter with draft vocab < target vocab (d2t) and EAGLE-3.1 flags: still lossless."""
    target = make_target()
    d = tiny_drafter(target, seed=5, draft_vocab=40, fc_norm=True, norm_output=True)
    with torch.no_grad():
        d.d2t.copy_(torch.randperm(64, generator=torch.Generator().manual_seed(0))[:40].sort().values - torch.arange(40))
    d = copy.deepcopy(d).to(dtype)
    prompt = [5, 17, 33, 2, 60, 11]
    ref = greedy_reference(target, prompt, 20)
    res = drifttool.speculate(target, d, prompt, depth=3, max_new_tokens=20)
    assert res.output_ids == ref
    # draft ids live in the target vocabulary, on the d2t image
    image = set(d.draft_to_target(torch.arange(40)).tolist())
    assert all(t in image for r in res.rounds for t in r.draft_ids)


@pytest.mark.parametrize("temperature", (0.0, 0.8))
def test_a_shared_prefill_replays_exactly_what_a_drafter_does_alone(trained_pair, trained_pair31, temperature):
    """The target's prompt forward runs once per prompt for all drafters (crop back to the prompt between them):
    every drafter's rounds, drafts and output equal its run from its own prefill, sampled runs included."""
    from drifttool.run.loop import prefill_prompt

    target, prompt = trained_pair.target, trained_pair.prompts[0]
    kw = dict(depth=5, max_new_tokens=N_NEW, temperature=temperature, seed=3)
    alone = [drifttool.speculate(target, p.drafter, prompt, **kw) for p in (trained_pair, trained_pair31)]
    shared = prefill_prompt(target, prompt)
    assert shared.snapshot.cache is None  # a full-attention cache is cropped back, not copied
    for p, ref in zip((trained_pair, trained_pair31), alone):
        res = drifttool.speculate(target, p.drafter, prompt, prefill=shared, **kw)
        assert res.output_ids == ref.output_ids
        assert [(r.draft_ids, r.accepted, r.bonus) for r in res.rounds] == [(r.draft_ids, r.accepted, r.bonus)
                                                                             for r in ref.rounds]
    with pytest.raises(drifttool.DriftError, match="another prompt"):
        drifttool.speculate(target, trained_pair.drafter, prompt[:-1], prefill=shared, **kw)
    drifttool.speculate(target, trained_pair.drafter, trained_pair.prompts[1], **kw)  # the cache now holds another prompt
    with pytest.raises(drifttool.DriftError, match="cache is gone"):
        drifttool.speculate(target, trained_pair.drafter, prompt, prefill=shared, **kw)


def test_a_prefill_of_another_target_object_is_refused(trained_pair):
    """A Prefill made on target A, used on target B after B ran another prompt (the same reset count, a cache at
    least as long) passed the restore check, and the run continued from B's cache of the other prompt."""
    from drifttool.model.target import Target
    from drifttool.run.loop import prefill_prompt

    a = trained_pair.target
    b = Target(a.model, a.aux_layer_ids, a.tokenizer, name="b")
    prompt, other = trained_pair.prompts[0], trained_pair.prompts[1]
    shared = prefill_prompt(a, prompt)
    kw = dict(depth=3, max_new_tokens=N_NEW, seed=3)
    b.reset()
    b.forward(torch.tensor(list(other) * 3))  # B holds a longer sequence of another prompt
    b._epoch = a._epoch
    with pytest.raises(drifttool.DriftError, match="another target object"):
        drifttool.speculate(b, trained_pair.drafter, prompt, prefill=shared, **kw)
