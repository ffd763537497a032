"""Sampled verification preserves the target distribution (speculative rejection sampling)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

import drifttool
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.verify import rejection_sample

V = 5


def _dists(seed: int):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g) * 1.2, -1)  # target: i.i.d. p at every position
    q = torch.softmax(torch.randn(2, V, generator=g) * 1.5, -1)  # drafter: a different q per depth
    q[0, int(p.argmax())] = 0.0  # a token the drafter never proposes must still come out at rate p
    q[0] /= q[0].sum()
    return p, q


def _wrong_sample(draft_ids, draft_probs, target_probs, generator=None):
    """Deliberately wrong: on rejection resample from p itself instead of the residual max(p - q, 0)."""
    for i, d in enumerate(draft_ids):
        p, q = float(target_probs[i, d]), float(draft_probs[i, d])
        if q > 0 and float(torch.rand((), generator=generator)) < min(1.0, p / q):
            continue
        return i, int(torch.multinomial(target_probs[i], 1, generator=generator))
    return len(draft_ids), int(torch.multinomial(target_probs[-1], 1, generator=generator))


def _first_two(sampler, p, q, n: int, seed: int) -> np.ndarray:
    """Counts of the first two emitted tokens (rounds repeat until two are out) -> [V*V]."""
    g = torch.Generator().manual_seed(seed)
    k = q.shape[0]
    tp = p.expand(k + 1, V)
    counts = np.zeros(V * V)
    drafts_all = torch.stack([torch.multinomial(q[i], 2 * n, replacement=True, generator=g) for i in range(k)], 1)
    j = 0
    for _ in range(n):
        out: list[int] = []
        while len(out) < 2:
            drafts = drafts_all[j].tolist()
            j += 1
            a, nxt = sampler(drafts, q, tp, g)
            out += drafts[:a] + [nxt]
        counts[out[0] * V + out[1]] += 1
    return counts


@pytest.mark.parametrize("seed", [0, 1])
def test_rejection_sample_preserves_target_distribution(seed):
    p, q = _dists(seed)
    n = 3000
    pp = p.double().numpy()
    expected = np.outer(pp, pp).ravel() / np.outer(pp, pp).sum() * n
    good = _first_two(rejection_sample, p, q, n, seed)
    assert stats.chisquare(good, expected).pvalue > 1e-3
    # the test has power: the broken sampler is caught on the same draws
    bad = _first_two(_wrong_sample, p, q, n, seed)
    assert stats.chisquare(bad, expected).pvalue < 1e-6


def test_rejection_sample_edge_cases():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    q = torch.tensor([[1.0, 0.0, 0.0]])
    # the draft can never be accepted (p = 0): the residual is exactly p
    for _ in range(20):
        assert rejection_sample([0], q, p, g) == (0, 1)
    # identical p and q: always accepted, then the bonus comes from the next row
    same = torch.tensor([[0.2, 0.8, 0.0]])
    for _ in range(20):
        a, nxt = rejection_sample([1], same, torch.cat([same, p[1:]]), g)
        assert a == 1 and nxt in (0, 1)


def _target_drafter():
    t = tiny_target(vocab=8, hidden=16, layers=2, heads=2, kv_heads=1, seed=3)
    with torch.no_grad():
        t.model.lm_head.weight.mul_(6)  # a peaked, non-uniform target
    d = tiny_drafter(t, seed=4, draft_vocab=6)  # the drafter cannot propose 2 of the 8 tokens
    with torch.no_grad():
        d.d2t.copy_(torch.tensor([0, 0, 1, 1, 2, 2]))  # draft ids -> target ids 0, 1, 3, 4, 6, 7
    return t, d


@pytest.mark.parametrize("draft_sampling", ["greedy", "probabilistic"])
@torch.no_grad()
def test_speculate_sampling_first_two_tokens_match_target(draft_sampling):
    target, drafter = _target_drafter()
    prompt = [3, 1, 4]
    v = target.vocab_size
    p1 = target.model(input_ids=torch.tensor([prompt])).logits[0, -1].float().softmax(-1)
    nxt = torch.tensor([prompt + [y] for y in range(v)])
    p2 = target.model(input_ids=nxt).logits[:, -1].float().softmax(-1)
    exact = (p1[:, None] * p2).double().ravel().numpy()
    exact /= exact.sum()
    n = 200
    counts = np.zeros(v * v)
    depth1_rejected = 0
    for s in range(n):
        res = drifttool.speculate(target, drafter, prompt, depth=2, max_new_tokens=2, temperature=1.0, seed=s,
                                  draft_sampling=draft_sampling)
        y1, y2 = res.output_ids[:2]
        counts[y1 * v + y2] += 1
        depth1_rejected += res.rounds[0].accepted == 0
    assert 0 < depth1_rejected < n  # both the accept and the residual paths ran
    keep = exact * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(exact[keep], exact[~keep].sum()) * n
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # negative control: the same counts against "the drafter's second token, always accepted"
    q2 = torch.stack([drafter.target_probs(_draft_logits(target, drafter, prompt + [y])) for y in range(v)])
    wrong = (p1[:, None] * q2).double().ravel().numpy()
    wrong /= wrong.sum()
    keep = wrong * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(wrong[keep], wrong[~keep].sum()) * n
    assert stats.chisquare(obs, exp).pvalue < 1e-6


def _draft_logits(target, drafter, seq):
    """Depth-1 draft logits after committing `seq` (slot t pairs token t+1 with feature t)."""
    target.reset()
    feats = target.forward(torch.tensor(seq[:-1])).features
    cache = drafter.new_cache()
    n = len(seq) - 1
    step = drafter(torch.tensor([seq[1:]]), feats[None], torch.arange(n)[None], cache, hidden_is_feature=True)
    return step.logits[0, -1]


@pytest.mark.parametrize("draft_sampling", ["greedy", "probabilistic"])
@torch.no_grad()
def test_speculate_sampling_long_run_pit(draft_sampling):
    """Every committed token (accepted draft, residual resample or bonus, at any depth) is a draw from the
    target's conditional: randomized PIT values against exact conditionals are i.i.d. U(0,1)."""
    target, drafter = _target_drafter()
    prompt = [3, 1, 4]
    res = drifttool.speculate(target, drafter, prompt, depth=3, max_new_tokens=240, temperature=1.0, seed=11,
                              draft_sampling=draft_sampling)
    assert sum(r.accepted for r in res.rounds) > 5 and any(r.accepted < 3 for r in res.rounds)
    seq = prompt + res.output_ids
    probs = target.model(input_ids=torch.tensor([seq])).logits[0].float().softmax(-1)
    rng = np.random.default_rng(0)

    def pit(pr):
        u = []
        for j, y in enumerate(res.output_ids):
            row = pr[len(prompt) - 1 + j].double().numpy()
            cdf = np.concatenate([[0.0], np.cumsum(row)])
            u.append(cdf[y] + rng.random() * row[y])
        return np.array(u)

    assert stats.kstest(pit(probs), "uniform").pvalue > 1e-3
    assert abs(_loglik_z(probs, res.output_ids, len(prompt))) < 4
    # negative controls: the same samples scored against a flattened or a sharpened "target" fail
    for power in (0.6, 1.6):
        other = probs.pow(power) / probs.pow(power).sum(-1, keepdim=True)
        assert abs(_loglik_z(other, res.output_ids, len(prompt))) > 4


def _loglik_z(probs, out_ids, n_prompt):
    """sum_t log p_t(y_t) + H_t is a martingale with increments of variance Var_t(log p) under the model."""
    lp = probs.double().clamp_min(1e-300).log()
    rows = torch.arange(len(out_ids)) + n_prompt - 1
    p, lp = probs.double()[rows], lp[rows]
    h = -(p * lp).sum(-1)
    var = (p * lp**2).sum(-1) - h**2
    got = lp[torch.arange(len(out_ids)), torch.tensor(out_ids)]
    return float((got + h).sum() / var.sum().sqrt())


def test_greedy_drafts_are_verified_as_vllm_does():
    """vLLM's default: the draft is the argmax, accepted with probability p(d) (one-hot q), and a rejection
    resamples p with d removed. Checked on the loop's own draft/verify pieces."""
    from drifttool.run.loop import draft_token

    target, drafter = _target_drafter()
    logits = torch.tensor([0.1, 2.0, 0.3, -1.0, 0.5, 0.2])
    tok, q = draft_token(drafter, logits, 1.0, torch.Generator(), "greedy")
    assert tok == int(drafter.draft_to_target(torch.tensor(1))) and q[tok] == 1 and q.sum() == 1
    p = torch.softmax(torch.randn(target.vocab_size, generator=torch.Generator().manual_seed(0)), -1)
    g = torch.Generator().manual_seed(1)
    n, acc, resampled = 4000, 0, np.zeros(target.vocab_size)
    for _ in range(n):
        a, nxt = rejection_sample([tok], q[None], torch.stack([p, p]), g)
        acc += a
        if a == 0:
            resampled[nxt] += 1
    pd_ = float(p[tok])
    assert abs(acc / n - pd_) < 4 * (pd_ * (1 - pd_) / n) ** 0.5
    assert resampled[tok] == 0
    rest = np.delete(p.double().numpy(), tok)
    obs = np.delete(resampled, tok)
    assert stats.chisquare(obs, rest / rest.sum() * obs.sum()).pvalue > 1e-3
    with pytest.raises(drifttool.DriftError, match="--draft-sampling"):
        drifttool.speculate(target, drafter, [3, 1, 4], depth=2, max_new_tokens=2, temperature=1.0,
                            draft_sampling="top-k")


@pytest.mark.parametrize("mode,temperature,want", [("greedy", 1.0, "greedy"), ("probabilistic", 1.0, "probabilistic"),
                                                   ("probabilistic", 0.0, "greedy (temperature 0)")])
def test_trace_records_draft_sampling(tmp_path, mode, temperature, want):
    from drifttool.run.engines.hf import DrafterSpec, run_capture
    from tests.support.capture import build_models, prompt, write_probes

    paths = build_models(tmp_path)
    probes = write_probes(tmp_path / "p.jsonl", [{"id": "a", "token_ids": prompt(1, 8)}])
    out = run_capture(str(paths["target"]), [DrafterSpec.parse(str(paths["eagle3"]))], str(probes),
                      str(tmp_path / "x.drift"), depth=2, max_new_tokens=4, temperature=temperature,
                      draft_sampling=mode, progress=False)
    assert drifttool.load(out).manifest["capture"]["draft_sampling"] == want
