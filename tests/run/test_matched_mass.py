"""The recency-matched control mass (metric_table kind `matched`): at depth k, the depth-1 query's attention on its
k-1 most recent keys that are not sinks, per head, equal to the eager attention rows of the same chain (1e-5, fp32) on both capture
paths (full rows and the kernel's log-sum-exp), with a sliding window too; NaN at depth 1; and the self-slot count
under a window smaller than the depth counts only the self slots the window shows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drifttool.model.tiny import tiny_target
from drifttool.run import attention_stats as stats
from drifttool.run.hooks import Capture
from drifttool.run.loop import speculate
from drifttool.trace.key_sets import TailSlots
from drifttool.trace.sinks import SinkSpec
from tests.run.test_capture_attention import EagerRows
from tests.support.capture import TINY, make_drafter, prompt

K = 6
SINK = "first:1;tok:9"
MATCHED = stats.HEAD_FIELDS.index("matched_mass")
WINDOW = stats.HEAD_FIELDS.index("recent_all_mass")
R = 4  # --recent: smaller than K - 1 at the deepest depths, so both branches of the window mass are exercised
SELF = (stats.HEAD_FIELDS.index("draft_mass"), stats.HEAD_FIELDS.index("own_mass"))


@pytest.fixture(scope="module")
def target():
    return tiny_target(**TINY)


def _run(t, d, full_every: int):
    d.set_attn_impl("eager")
    eager = EagerRows(d)
    cap = Capture(d, sink=SinkSpec.parse(SINK), full_every=full_every, recent=R)
    ids = prompt(21, 12)
    ids[-2] = 9  # a token sink among the most recent keys: the control skips it
    try:
        with cap:
            res = speculate(t, d, ids, depth=K, max_new_tokens=14, observers=[cap, eager])
    finally:
        eager.h.remove()
        d.set_attn_impl("sdpa")
    return res, cap, eager


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("full_every", [1, 0])
def test_matched_mass_is_the_depth1_rows_mass_on_its_last_keys(target, full_every, window):
    cfg = {"sliding_window": window} if window else None
    d = make_drafter(target, 4, 2, seed=5, config=cfg)
    res, cap, eager = _run(target, d, full_every)
    assert len(res.rounds) >= 3
    if full_every == 0:
        assert not any(rc.full for rc in cap.rounds)  # the lse path was the one checked
    seq = res.prompt_ids + res.output_ids
    skipped = 0
    for rc, rows, rec in zip(cap.rounds, eager.rounds, res.rounds):
        n = rec.context_len
        d1 = rows[0].double()  # [nh, n]: the depth-1 query's eager row
        assert np.isnan(rc.heads[0, :, MATCHED]).all()
        sink = SinkSpec.parse(SINK).mask(torch.tensor(seq[:n])).bool()
        recent = [i for i in range(n - 1, -1, -1) if not sink[i]]  # non-sink slots, newest first
        skipped += int(sink[n - K:].any())
        for j in range(1, K):
            want = d1[:, recent[:j]].sum(-1).numpy() if j <= len(recent) else np.full(d1.shape[0], np.nan)
            np.testing.assert_allclose(rc.heads[j, :, MATCHED], want, atol=1e-5, rtol=0)
            # the same distances at depth j: the self slots' mass, what the matched mass is the null of
            row = rows[j].double()
            own_slots = row[:, n:n + j].sum(-1).numpy()
            np.testing.assert_allclose(rc.heads[j, :, SELF[0]] + rc.heads[j, :, SELF[1]], own_slots, atol=1e-5)
            # the paper's recent: the last R keys whatever they are, sinks excluded: the newest min(j, R) own slots,
            # then the non-sink context among the last R - min(j, R) slots (at j > R only R own slots: depth 6 with
            # R = 4 sums 4, not 5)
            own = min(j, R)
            newest_own = row[:, n + j - own:n + j].sum(-1).numpy()
            kept = [i for i in range(max(0, n - (R - own)), n) if not sink[i]]
            np.testing.assert_allclose(rc.heads[j, :, WINDOW], newest_own + row[:, kept].sum(-1).numpy(), atol=1e-5)
        np.testing.assert_allclose(rc.heads[0, :, WINDOW], d1[:, sorted(i for i in range(max(0, n - R), n)
                                                                        if not sink[i])].sum(-1).numpy(), atol=1e-5)
    assert skipped  # some round had a sink among its last K keys (the skip was exercised)


def test_self_count_under_a_window_smaller_than_the_depth():
    """Depth 8 under a 6-key window sees 6 keys, all of them its own slots at most: n_self <= n_keys, and the uniform
    share n_self / n_keys is what uniform attention puts on the self slots it can see."""
    empty = np.zeros(0, dtype=np.int64)
    g = stats.Gathered.of(100, [np.array([0]), empty, empty], TailSlots.chain(8), lo=stats.chain_lo(100, 8, 6))
    counts = stats.key_counts(g)
    n_keys, n_self = (counts[:, stats.COUNT_FIELDS.index(c)] for c in ("n_keys", "n_self"))
    assert n_keys.tolist() == [6] * 8
    assert n_self.tolist() == [0, 1, 2, 3, 4, 5, 6, 6]
    assert (n_self <= n_keys).all()
