"""EAGLE's multi-candidate sampled tree verification preserves the target distribution (q = 1 scheme)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from drifttool.run.tree import DraftTree, sampled_walk

V = 5


def _tree(tokens_by_path: dict[tuple, int]) -> DraftTree:
    paths = sorted(tokens_by_path, key=lambda t: (len(t), t))
    idx = {(): 0}
    for i, p in enumerate(paths, 1):
        idx[p] = i
    return DraftTree(
        tokens=[0] + [tokens_by_path[p] for p in paths],
        parents=[-1] + [idx[p[:-1]] for p in paths],
        depths=[0] + [len(p) for p in paths],
        ranks=[0] + [p[-1] for p in paths],
        logp=[0.0] * (len(paths) + 1),
        score=[0.0] * (len(paths) + 1),
    )


# siblings include the target's most likely token and a duplicate token (tried once only)
TREE = _tree({(0,): 1, (1,): 3, (2,): 1, (3,): 0, (0, 0): 2, (0, 1): 4, (1, 0): 3, (0, 0, 0): 1})


def _wrong_walk(tree, probs, gen):
    """Deliberately wrong: a rejected sibling is not removed from p (no renormalisation)."""
    kids = tree.children()
    cur, path = 0, []
    while True:
        p = probs[cur].double()
        nxt = next(
            (
                c
                for c in kids[cur]
                if float(torch.rand((), generator=gen, dtype=torch.float64)) < float(p[tree.tokens[c]])
            ),
            None,
        )
        if nxt is None:
            return path, int(torch.multinomial(p, 1, generator=gen))
        path.append(nxt)
        cur = nxt


def _first_two(walk, p: torch.Tensor, n: int, seed: int) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    probs = p.expand(TREE.size + 1, V)
    counts = np.zeros(V * V)
    for _ in range(n):
        out: list[int] = []
        while len(out) < 2:
            path, bonus = walk(TREE, probs, g)
            out += [TREE.tokens[u] for u in path] + [bonus]
        counts[out[0] * V + out[1]] += 1
    return counts


@pytest.mark.parametrize("seed", [0, 1])
def test_sampled_tree_walk_preserves_target_distribution(seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g) * 1.2, -1)
    n = 3000
    pp = p.double().numpy()
    expected = np.outer(pp, pp).ravel() / np.outer(pp, pp).sum() * n
    good = _first_two(sampled_walk, p, n, seed)
    assert stats.chisquare(good, expected).pvalue > 1e-3
    bad = _first_two(
        _wrong_walk, p, n, seed
    )  # the test has power: the broken walk is caught on the same seeds
    assert stats.chisquare(bad, expected).pvalue < 1e-6


def test_sampled_walk_edge_cases():
    g = torch.Generator().manual_seed(0)
    sure = torch.zeros(TREE.size + 1, V)
    sure[:, 1] = 1.0  # the target always says token 1: the path 1 -> (child with token 1)... is accepted
    for _ in range(20):
        path, bonus = sampled_walk(TREE, sure, g)
        assert path == [1] and bonus == 1  # node 1 (token 1) accepted; its children 2, 4 have p = 0
    never = torch.zeros(TREE.size + 1, V)
    never[:, 2] = 1.0  # no root child carries token 2: nothing accepted, the bonus is 2
    for _ in range(20):
        assert sampled_walk(TREE, never, g) == ([], 2)


def _target_drafter():
    """As tests/run/test_sampling.py: a peaked 8-token target and a drafter that cannot propose 2 of its tokens."""
    from drifttool.model.tiny import tiny_drafter, tiny_target

    t = tiny_target(vocab=8, hidden=16, layers=2, heads=2, kv_heads=1, seed=3)
    with torch.no_grad():
        t.model.lm_head.weight.mul_(6)
    d = tiny_drafter(t, seed=4, draft_vocab=6)
    with torch.no_grad():
        d.d2t.copy_(torch.tensor([0, 0, 1, 1, 2, 2]))
    return t, d


@torch.no_grad()
def test_speculate_tree_first_two_tokens_match_target():
    """End to end (masked target forward over the tree, the walk, KV compaction): the first two committed tokens
    follow the target's joint law; the drafter's own law is rejected on the same counts."""
    from drifttool.run.tree import parse_tree
    from drifttool.run.tree_loop import speculate_tree

    target, drafter = _target_drafter()
    prompt = [3, 1, 4]
    v = target.vocab_size
    p1 = target.model(input_ids=torch.tensor([prompt])).logits[0, -1].float().softmax(-1)
    p2 = (
        target.model(input_ids=torch.tensor([prompt + [y] for y in range(v)]))
        .logits[:, -1]
        .float()
        .softmax(-1)
    )
    exact = (p1[:, None] * p2).double().ravel().numpy()
    exact /= exact.sum()
    tree = parse_tree("dynamic:top_k=3,depth=2,total=8")
    n = 300
    counts = np.zeros(v * v)
    side = none = 0
    for s in range(n):
        res = speculate_tree(target, drafter, prompt, tree, max_new_tokens=2, temperature=1.0, seed=s)
        y1, y2 = res.output_ids[:2]
        counts[y1 * v + y2] += 1
        r = res.rounds[0]
        side += bool(r.path) and r.tree.ranks[r.path[0]] > 0
        none += not r.path
    assert side > 0 and none > 0  # a side branch was accepted, and the residual path ran
    keep = exact * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(exact[keep], exact[~keep].sum()) * n
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    flat = np.full(v * v, 1.0 / (v * v))  # negative control: the same counts are far from uniform
    assert stats.chisquare(counts, flat * n).pvalue < 1e-6


@torch.no_grad()
def test_speculate_tree_long_run_pit():
    """Every committed token of a long sampled tree run is a draw from the target's conditional (PIT ~ U(0,1))."""
    from drifttool.run.tree import parse_tree
    from drifttool.run.tree_loop import speculate_tree

    target, drafter = _target_drafter()
    prompt = [3, 1, 4]
    res = speculate_tree(
        target,
        drafter,
        prompt,
        parse_tree("[(0,), (1,), (0, 0), (1, 0), (0, 0, 0)]"),
        max_new_tokens=240,
        temperature=1.0,
        seed=11,
    )
    assert sum(r.accepted for r in res.rounds) > 5
    seq = prompt + res.output_ids
    probs = target.model(input_ids=torch.tensor([seq])).logits[0].float().softmax(-1).double().numpy()
    rng = np.random.default_rng(0)
    u = []
    for j, y in enumerate(res.output_ids):
        row = probs[len(prompt) - 1 + j]
        cdf = np.concatenate([[0.0], np.cumsum(row)])
        u.append(cdf[y] + rng.random() * row[y])
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    sharp = probs**2 / (probs**2).sum(-1, keepdims=True)  # negative control: a sharpened target fails
    u2 = []
    for j, y in enumerate(res.output_ids):
        row = sharp[len(prompt) - 1 + j]
        cdf = np.concatenate([[0.0], np.cumsum(row)])
        u2.append(cdf[y] + rng.random() * row[y])
    assert stats.kstest(u2, "uniform").pvalue < 1e-3
