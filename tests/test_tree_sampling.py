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
    return DraftTree(tokens=[0] + [tokens_by_path[p] for p in paths], parents=[-1] + [idx[p[:-1]] for p in paths],
                     depths=[0] + [len(p) for p in paths], ranks=[0] + [p[-1] for p in paths],
                     logp=[0.0] * (len(paths) + 1), score=[0.0] * (len(paths) + 1))


# siblings include the target's most likely token and a duplicate token (tried once only)
TREE = _tree({(0,): 1, (1,): 3, (2,): 1, (3,): 0, (0, 0): 2, (0, 1): 4, (1, 0): 3, (0, 0, 0): 1})


def _wrong_walk(tree, probs, gen):
    """Deliberately wrong: a rejected sibling is not removed from p (no renormalisation)."""
    kids = tree.children()
    cur, path = 0, []
    while True:
        p = probs[cur].double()
        nxt = next((c for c in kids[cur] if float(torch.rand((), generator=gen, dtype=torch.float64))
                    < float(p[tree.tokens[c]])), None)
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
    bad = _first_two(_wrong_walk, p, n, seed)  # the test has power: the broken walk is caught on the same seeds
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
