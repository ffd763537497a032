"""The vLLM replay without vLLM: events recorded the way vLLM's proposer and rejection sampler give them (here
produced by drifttool's own chain on a tiny target, with planted verdicts), replayed side by side in one ragged
cache. A prompt's numbers must not depend on which prompts share its batch, the replay must reproduce the
recording drafter exactly, and the per-aux-layer magnitudes must be those of the depth-1 slot's features (the
live vLLM path: tests/run/test_vllm_engine.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.engines.vllm import replay as rp
from drifttool.run.engines.vllm.recorder import Proposal, Step, Verify
from drifttool.run.hooks import Capture
from drifttool.run.loop import draft_chain, refresh
from drifttool.trace.positions import query_position

K = 4


def features(target, seq: list[int]) -> torch.Tensor:
    target.reset()
    return target.forward(torch.tensor(seq)).features


@torch.no_grad()
def record(drafter, target, prompt: list[int], new: int, accept: list[int], seed: int,
           chunk: int | None = None) -> tuple[list, list[int]]:
    """(events, output ids) of one request as vLLM's recorder gives them: per propose call the first pass's raw
    features, ids, positions and combined input, the fed-back input of depths 2..K and the drafts; per verify
    step the planted verdict (accepted drafts + a bonus token). `chunk`: the prefill split in two calls."""
    g = torch.Generator().manual_seed(seed)
    full = list(prompt) + [int(torch.randint(3, 60, (1,), generator=g))]  # the prefill's own token
    cache = drafter.new_cache(capacity=len(prompt) + new + 4 * K)
    events: list = []

    def propose(start: int, n: int) -> Proposal:
        f = features(target, full[:n])[start:n]
        ids = full[start + 1 : n + 1]
        step = refresh(drafter, cache, ids, start, f)
        steps: list = []
        drafts, _, fed = draft_chain(drafter, cache, step, n, K, ids[-1],
                                     lambda lg: (int(drafter.draft_to_target(lg.argmax())), None), steps=steps)
        rec = [Step(torch.tensor(ids), torch.arange(start, n), drafter.combine(f))]
        rec += [Step(torch.tensor([fed[k - 1]]), torch.tensor([query_position(n, k)]), steps[k - 2].feedback[0, -1:])
                for k in range(2, K + 1)]
        return Proposal(feats=f, sample_idx=n - start - 1, drafts=drafts, steps=rec)

    n, start, r = len(prompt), 0, 0
    if chunk:
        events.append(propose(0, chunk))  # a prefill chunk: no verify step follows
        start = chunk
    while len(full) - len(prompt) < new:
        prop = propose(start, n)
        a = accept[r % len(accept)]
        bonus = int(torch.randint(3, 60, (1,), generator=g))
        sampled = prop.drafts[:a] + [bonus]
        events += [prop, Verify(drafts=prop.drafts, target_argmax=(sampled + [0] * K)[:K], sampled=sampled)]
        full += sampled
        start, n, r = n, n + a + 1, r + 1
    events.append(propose(start, n))  # drafted after the last verify step: never used
    return events, full[len(prompt) : len(prompt) + new]


@pytest.fixture(scope="module")
def cases():
    t = tiny_target(vocab=64, hidden=32, layers=4, heads=4, kv_heads=2)
    drafters = {"eagle3": tiny_drafter(t, seed=1), "eagle31": tiny_drafter(t, seed=2, fc_norm=True, norm_output=True)}
    windowed = tiny_drafter(t, seed=3)
    windowed.config.sliding_window = 6
    drafters["window6"] = windowed
    g = torch.Generator().manual_seed(0)
    # a long prompt (first pass > LONG_PASS: alone), short ones (batched), one prefilled in two chunks
    shapes = [(40, [0, 2, 4, 1], None), (7, [1, 0, 3], None), (12, [4, 4, 0], 5), (3, [2], None)]
    out = {}
    for name, d in drafters.items():
        jobs = []
        for i, (length, accept, chunk) in enumerate(shapes):
            prompt = torch.randint(3, 60, (length,), generator=g).tolist()
            events, output = record(d, t, prompt, 14 + 3 * i, accept, seed=i, chunk=chunk)
            jobs.append((events, prompt, output))
        out[name] = (t, d, jobs)
    return out


def replay(d, jobs, keep_rows: int = 0, seeds: list[int] | None = None):
    caps = [Capture(d, keep_rows=keep_rows, seed=s, full_every=2) for s in (seeds or range(len(jobs)))]
    return caps, rp.replay_prompts(d, caps, jobs, K)


@pytest.mark.parametrize("name", ["eagle3", "eagle31", "window6"])
def test_batched_replay_equals_each_prompt_alone_and_reproduces_the_recording(cases, name):
    t, d, jobs = cases[name]
    assert max(len(j[1]) for j in jobs) > rp.LONG_PASS  # both first-pass paths run
    caps, together = replay(d, jobs, keep_rows=2)
    for i, job in enumerate(jobs):
        (cap1,), ((rec1, st1),) = replay(d, [job], keep_rows=2, seeds=[i])
        rec, st = together[i]
        assert [r.__dict__ for r in rec] == [r.__dict__ for r in rec1]
        assert len(rec) == sum(isinstance(e, Verify) for e in job[0]) and rec
        for a, b in zip(caps[i].rounds, cap1.rounds):
            assert a.full == b.full and a.context_len == b.context_len
            np.testing.assert_allclose(a.heads, b.heads, atol=1e-5, rtol=0)
            np.testing.assert_allclose(a.hidden, b.hidden, atol=1e-5, rtol=1e-6)
            np.testing.assert_allclose(a.aux, b.aux, atol=1e-5, rtol=1e-6)
            assert (a.row is None) == (b.row is None)
            if a.row is not None:
                np.testing.assert_allclose(a.row.astype(np.float32), b.row.astype(np.float32), atol=1e-3)
        # the replay reproduced the recording drafter: its drafts, its first-pass input, its fed-back tensors
        s = st.to_dict()
        assert s["replay_draft_agreement"] == 1.0
        assert s["replay_max_fc_diff"] < 1e-5 and s["replay_max_feedback_diff"] < 1e-5


@pytest.mark.parametrize("name", ["eagle3", "eagle31"])
def test_aux_magnitudes_are_the_depth1_slots_features(cases, name):
    """rms before / after fc_norm per aux layer = those of the features at slot n-1 (the depth-1 input): the
    replay's own fc check must not overwrite what the capture keeps (it once left every layer the same number)."""
    t, d, jobs = cases[name]
    caps, _ = replay(d, jobs)
    ht = d.config.target_hidden_size
    for cap, (_, prompt, output) in zip(caps, jobs):
        seq = list(prompt) + list(output)
        for rc in cap.rounds:
            f = features(t, seq[: rc.context_len])[-1]  # slot n-1's features
            chunks = f.split(ht)
            before = torch.stack([c.pow(2).mean().sqrt() for c in chunks]).numpy()
            np.testing.assert_allclose(rc.aux[:, 0], before, rtol=1e-4)
            after = [d.fc_norm[i](c) if d.config.fc_norm else c for i, c in enumerate(chunks)]
            np.testing.assert_allclose(rc.aux[:, 1], torch.stack([a.pow(2).mean().sqrt() for a in after]).detach().numpy(),
                                       rtol=1e-4)
            assert len(set(np.round(rc.aux[:, 0], 6))) == len(chunks)  # one number per layer, not one for all


def test_submissions_bound_prompts_and_recorded_bytes():
    """A submission holds at most `size` prompts and at most the budget of recorded inputs (one prompt always
    goes, however long); order is kept."""
    from drifttool.run.engines.vllm.engine import submissions

    prompts = [(f"p{i}", [0] * n, 8) for i, n in enumerate([100, 100, 300, 50, 1000, 20, 20, 20])]
    got = submissions(prompts, size=3, bytes_per_token=10, budget=3000)
    assert [[p[0] for p in b] for b in got] == [["p0", "p1"], ["p2"], ["p3"], ["p4"], ["p5", "p6", "p7"]]
    assert [p for b in got for p in b] == prompts
    for b in got:
        assert len(b) <= 3 and (len(b) == 1 or sum(len(p[1]) + p[2] for p in b) * 10 <= 3000)
    assert submissions(prompts, size=64, bytes_per_token=1, budget=1 << 30) == [prompts]
    assert submissions([], 4, 1) == []
