"""Tree drafting: top-k = 1 reproduces the chain exactly, greedy tree decoding equals the target's own greedy
output, EAGLE's dynamic tree follows its rules, and bad tree specs fail with one line."""

from __future__ import annotations

import pytest
import torch

import drifttool
from drifttool.errors import DriftError
from drifttool.run.tree import TreeSpec, parse_tree
from drifttool.run.tree_loop import speculate_tree
from tests.support.tiny_training import greedy_reference

N_NEW = 24
TREES = [
    "dynamic:top_k=3,depth=4,total=12",
    "[(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0)]",
    "dynamic:top_k=4,depth=6,total=30",
]


def _lm_head_calls(drafter):
    calls = []
    h = drafter.lm_head.register_forward_hook(lambda _m, _i, out: calls.append(out.detach().clone()))
    return calls, h


@pytest.mark.parametrize("spec", ["dynamic:top_k=1,depth={k},total={k1}", "static"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_top1_tree_equals_chain(trained_pair, spec, k):
    """Same drafts, rounds, outputs and every drafter logit (the same forwards in the same order)."""
    t, d = trained_pair.target, trained_pair.drafter
    tree = TreeSpec.chain(k) if spec == "static" else parse_tree(spec.format(k=k, k1=k + 1))
    for prompt in trained_pair.prompts[:3]:
        calls, h = _lm_head_calls(d)
        try:
            chain = drifttool.speculate(t, d, prompt, depth=k, max_new_tokens=N_NEW)
            n_chain = len(calls)
            res = speculate_tree(t, d, prompt, tree, max_new_tokens=N_NEW)
        finally:
            h.remove()
        assert res.output_ids == chain.output_ids
        assert [r.draft_ids for r in res.rounds] == [r.draft_ids for r in chain.rounds]
        assert [r.accepted for r in res.rounds] == [r.accepted for r in chain.rounds]
        assert [r.bonus for r in res.rounds] == [r.bonus for r in chain.rounds]
        assert len(calls) == 2 * n_chain
        for a, b in zip(calls[:n_chain], calls[n_chain:]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("spec", TREES)
def test_greedy_tree_equals_target_greedy(trained_pair, spec):
    t, d = trained_pair.target, trained_pair.drafter
    tree = parse_tree(spec)
    side = 0
    for prompt in trained_pair.prompts:
        ref = greedy_reference(t, prompt, N_NEW)
        res = speculate_tree(t, d, prompt, tree, max_new_tokens=N_NEW)
        assert res.output_ids == ref
        for r in res.rounds:
            # the accepted path: each node the target's argmax at its parent, and no child of the last matches
            for u in r.path:
                assert r.tree.tokens[u] == r.target_ids[u]
            last = r.path[-1] if r.path else 0
            kids = [c for c in range(1, r.tree.size + 1) if r.tree.parents[c] == last]
            assert all(r.tree.tokens[c] != r.bonus for c in kids)
            side += any(r.tree.ranks[u] > 0 for u in r.path)
    assert side > 0, "no round accepted a side branch: the test does not exercise tree verification"


def test_dynamic_tree_rules(trained_pair):
    """Node count, ancestor closure, depth bound, siblings in drafter order, the kept set = the best scores."""
    t, d = trained_pair.target, trained_pair.drafter
    spec = parse_tree("dynamic:top_k=3,depth=4,total=12")
    res = speculate_tree(t, d, trained_pair.prompts[0], spec, max_new_tokens=12)
    for r in res.rounds:
        tr = r.tree
        assert tr.size == 11 and max(tr.depths) <= 4
        for i in range(1, tr.size + 1):
            p = tr.parents[i]
            assert p < i and tr.depths[i] == tr.depths[p] + 1
            assert abs(tr.score[i] - (tr.score[p] + tr.logp[i])) < 1e-9
        for kids in tr.children():
            assert [tr.ranks[c] for c in kids] == sorted(tr.ranks[c] for c in kids)
        assert min(tr.score[1:]) <= max(tr.score[1:])


@pytest.mark.parametrize(
    "bad",
    [
        "dynamic:top_k=0,depth=3,total=5",
        "dynamic:top_k=2,depth=3",
        "dynamic:k=2",
        "[(0,), (1, 0)]",
        "[(0,), (0,)]",
        "[]",
        "[(-1,)]",
        "nonsense(",
        "dynamic:top_k=x",
    ],
)
def test_bad_tree_specs(bad):
    with pytest.raises(DriftError, match="--tree"):
        parse_tree(bad)


def test_tree_spec_round_trip():
    for s in TREES:
        spec = parse_tree(s)
        assert TreeSpec.from_dict(spec.to_dict()) == spec
        assert parse_tree(spec.describe()) == spec


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_shared_prefill_replays_a_tree_run_exactly(trained_pair, temperature):
    """The tree engine shares the target's prompt forward across drafters (loop.prefill_prompt): a tree run from
    that prefill, after another drafter's tree run moved the target's cache, equals a run from its own prefill."""
    from drifttool.run.loop import prefill_prompt

    t, d = trained_pair.target, trained_pair.drafter
    tree = parse_tree(TREES[0])
    prompt = trained_pair.prompts[1]
    alone = speculate_tree(t, d, prompt, tree, max_new_tokens=N_NEW, temperature=temperature, seed=3)
    pre = prefill_prompt(t, prompt)
    speculate_tree(t, d, prompt, parse_tree(TREES[2]), max_new_tokens=N_NEW, temperature=temperature, seed=5,
                   prefill=pre)  # another drafter's run from the same prefill
    shared = speculate_tree(t, d, prompt, tree, max_new_tokens=N_NEW, temperature=temperature, seed=3, prefill=pre)
    assert shared.output_ids == alone.output_ids
    assert [r.draft_ids for r in shared.rounds] == [r.draft_ids for r in alone.rounds]
    assert [r.path for r in shared.rounds] == [r.path for r in alone.rounds]
    assert [r.bonus for r in shared.rounds] == [r.bonus for r in alone.rounds]
