"""The capture's cheap path: sink / draft / own masses from the fused attention kernel's log-sum-exp over the
few keys the masses read (attention_stats.lse_probs) equal the reference path (full rows recomputed at round
end) and the eager attention probabilities (1e-5 in fp32) for plain GQA, sliding-window and MLA drafters;
drafting outputs are bitwise the same with the capture on or off; bf16 never upcasts the key cache; the
full-row schedule (full_every) is what the trace's rounds.full_stats says, and analyses skip the NaN rounds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from drifttool.analysis.where_attention import attention_targets
from drifttool.errors import DriftError
from drifttool.model.attention import fused_attention
from drifttool.model.drafter import Eagle3Drafter
from drifttool.model.tiny import tiny_target
from drifttool.run import attention_stats as stats
from drifttool.run.hooks import Capture
from drifttool.run.loop import speculate
from drifttool.run.records import prompt_tables
from drifttool.run.runner import RunSettings
from drifttool.trace.sinks import SinkSpec
from tests.support.capture import TINY, make_drafter, prompt

K, W = 4, 6
MLA = {"q_lora_rank": 16, "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6}
KINDS = {"gqa": {}, "window": {"sliding_window": W}, "mla": {"mla": MLA}}



@pytest.fixture(scope="module")
def target():
    return tiny_target(**TINY)


def make(t, kind: str, seed: int = 3) -> Eagle3Drafter:
    return make_drafter(t, 4, 2, seed, config=KINDS[kind])


def _ids() -> list[int]:
    ids = prompt(17, 11)
    ids[5] = 9
    return ids


SINK = "first:2;tok:9"


def test_fused_attention_is_sdpa_plus_exact_lse():
    """CPU: the lse kernel's output is bitwise F.scaled_dot_product_attention's; its lse is the row's."""
    g = torch.Generator().manual_seed(0)
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-3)):
        for t_, length, masked, causal in (
            (1, 40, False, False),
            (3, 40, True, False),
            (12, 12, False, True),
        ):
            q = torch.randn(1, 8, t_, 16, generator=g).to(dt)
            k, v = (torch.randn(1, 2, length, 16, generator=g).to(dt) for _ in range(2))
            mask = None
            if masked:
                mask = torch.ones(t_, length, dtype=torch.bool).tril(length - t_)
                mask[:, :5] = False  # a window's hidden oldest slots
            out, lse = fused_attention(q, k, v, mask, causal, 0.3)
            ref = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, scale=0.3, enable_gqa=True
            )
            assert torch.equal(out, ref)
            s = (q.float() @ k.float().repeat_interleave(4, 1).transpose(-1, -2)) * 0.3
            vis = torch.ones(t_, length, dtype=torch.bool).tril() if causal else mask
            if vis is not None:
                s = s.masked_fill(~vis, float("-inf"))
            assert lse.dtype == torch.float32 and lse.shape == (1, 8, t_)
            torch.testing.assert_close(lse, s.logsumexp(-1), atol=tol, rtol=0)


class EagerRows:
    def __init__(self, d):
        self.rows: list[torch.Tensor] = []
        self.h = d.layer.self_attn.hook_probs.register_forward_hook(
            lambda _m, _i, out: self.rows.append(out[0, :, -1].clone())
        )


@pytest.mark.parametrize("kind", list(KINDS))
def test_lse_masses_equal_reference_and_eager(target, kind):
    d = make(target, kind)
    spec = SinkSpec.parse(SINK)
    kw = dict(sink=spec, recent=5, template_ids=(7, 9, 11))  # recent and template masses on the lse path too
    ref, new = Capture(d, full_every=1, **kw), Capture(d, full_every=0, **kw)
    with ref, new:
        res = speculate(
            target, d, _ids(), depth=K, max_new_tokens=14, mode="teacher-forced", observers=[ref, new]
        )
    assert len(res.rounds) >= 4
    eager = EagerRows(d)
    d.set_attn_impl("eager")
    try:
        res_e = speculate(target, d, _ids(), depth=K, max_new_tokens=14, mode="teacher-forced")
    finally:
        eager.h.remove()
        d.set_attn_impl("sdpa")
    assert [r.input_ids for r in res_e.rounds] == [r.input_ids for r in res.rounds]
    seq = res.prompt_ids + res.output_ids
    hidden_sink = 0
    for i, (a, b, rec) in enumerate(zip(new.rounds, ref.rounds, res.rounds)):
        assert not a.full and b.full
        for name in stats.MASS_FIELDS:  # sink, draft, own, recent, template, matched, window: lse = full rows
            np.testing.assert_allclose(a.field(name), b.field(name), atol=1e-5, rtol=0, equal_nan=True)
        assert (a.counts == b.counts).all()
        assert np.isnan(a.field("entropy")).all() and np.isnan(a.field("max_prob")).all()
        assert (a.field("top_pos") == -1).all()
        n = rec.context_len
        sink_mask = spec.mask(torch.tensor(seq[:n])).double()
        for j in range(K):
            row = eager.rows[i * K + j].double()  # [nh, n + j], zero outside a window
            want_sink = row[:, :n] @ sink_mask
            want_own = row[:, n + j - 1] if j else torch.zeros(4, dtype=torch.float64)
            want_draft = row[:, n : n + j - 1].sum(-1)
            np.testing.assert_allclose(a.field("sink_mass")[j], want_sink.numpy(), atol=1e-5, rtol=0)
            np.testing.assert_allclose(a.field("draft_mass")[j], want_draft.numpy(), atol=1e-5, rtol=0)
            np.testing.assert_allclose(a.field("own_mass")[j], want_own.numpy(), atol=1e-5, rtol=0)
            if kind == "window" and n + j - W >= 1:  # sink slots 0 and 1 are outside depth j's window
                hidden_sink += 1
                assert float(row[:, :2].abs().max()) == 0.0
        assert (a.field("own_mass")[1:] > 0).all()
    if kind == "window":
        assert hidden_sink > 0  # the first sinks did fall out of the window in this run


@pytest.mark.parametrize("kind", list(KINDS))
def test_drafting_is_bitwise_unchanged_by_capture(target, kind):
    d = make(target, kind, seed=5)

    def run(cap):
        logits = []
        h = d.lm_head.register_forward_hook(lambda _m, _i, out: logits.append(out.clone()))
        try:
            res = speculate(target, d, _ids(), depth=K, max_new_tokens=12, observers=[cap] if cap else [])
        finally:
            h.remove()
        return res, logits

    base, lb = run(None)
    for every in (0, 1, 3):
        with Capture(d, sink=SinkSpec.parse(SINK), full_every=every, keep_rows=1) as cap:
            res, lc = run(cap)
        assert res.output_ids == base.output_ids
        assert [r.draft_ids for r in res.rounds] == [r.draft_ids for r in base.rounds]
        assert len(lc) == len(lb) and all(torch.equal(x, y) for x, y in zip(lb, lc))


def _largest_allocation(fn) -> int:
    """Bytes of the largest allocation any op made while fn ran (torch's profiler sees kernel-internal copies
    too, e.g. an index_select that makes a strided cache contiguous first)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max((e.cpu_memory_usage for e in prof.events()), default=0)


def test_bf16_lse_path_matches_reference_without_upcasting_the_cache(target):
    d = make(target, "gqa", seed=7).to(torch.bfloat16)
    ref, new = (
        Capture(d, sink=SinkSpec.parse(SINK), full_every=1),
        Capture(d, sink=SinkSpec.parse(SINK), full_every=0),
    )
    with ref, new:
        res = speculate(target, d, _ids(), depth=K, max_new_tokens=10, observers=[ref, new])
    assert len(res.rounds) >= 3
    for a, b in zip(new.rounds, ref.rounds):
        for name in ("sink_mass", "draft_mass", "own_mass"):
            np.testing.assert_allclose(a.field(name), b.field(name), atol=2e-3, rtol=0)
    # one round's maths on a long bf16 cache: no fp32 tensor anywhere near the cache's size
    g = torch.Generator().manual_seed(1)
    n, nkv, hd = 16000, 2, 8  # (the round's fixed-size tensors: K x (sets + 2K) keys, well under 1% of this)
    cache = torch.randn(1, nkv, n + 64, hd, generator=g).bfloat16()
    keys = cache[:, :, : n + K - 1][0]  # as Capture gets it: a strided view of the cache
    q = torch.randn(K, 4, hd, generator=g).bfloat16()
    lse = torch.full((K, 4), 5.0)
    largest = _largest_allocation(
        lambda: stats.to_host(q.transpose(0, 1), keys[:, torch.arange(0, 4).repeat(K + 2)], lse)  # the device part
    )
    assert 0 < largest < keys.numel() * keys.element_size() // 100
    # the reference path does score the whole row (the contrast that makes this check able to fail)
    assert _largest_allocation(lambda: stats.masked_logits(q, keys, n, 0.35)) > keys.numel() * 2


def test_schedule_is_recorded_and_analyses_skip_rounds_without_full_rows(target):
    d = make(target, "gqa", seed=9)
    cap = Capture(d, sink=SinkSpec.parse(SINK), full_every=3, keep_rows=1, seed=4)
    with cap:
        res = speculate(target, d, _ids(), depth=K, max_new_tokens=20, observers=[cap])
    full = [rc.full for rc in cap.rounds]
    sampled = [rc.row is not None for rc in cap.rounds]
    for r, rc in enumerate(cap.rounds):
        assert rc.full >= (r % 3 == 0) and rc.full >= sampled[r]
        assert np.isfinite(rc.field("entropy")).all() == rc.full
    assert not all(full) and any(full)
    tabs = prompt_tables("d", "p", res.rounds, cap.rounds, d.config.aux_layer_ids, 2048)
    assert tabs["rounds"]["full_stats"].tolist() == full
    heads = tabs["heads"]
    by_round = heads.groupby("round")["entropy"].apply(lambda s: s.notna().all())
    assert by_round.tolist() == full
    assert ((heads["top_pos"] == -1) == heads["entropy"].isna()).all()
    # masses are there every round
    assert heads[["sink_mass", "draft_mass", "own_mass", "prompt_mass"]].notna().all().all()
    at = attention_targets(heads.assign(series="s"), tabs["rounds"].assign(series="s"))
    n_full = int(sum(full))
    assert int(at["n"].sum()) == n_full * K * 4  # only the full rounds' head maxima are counted
    assert np.isfinite(at["max_prob"]).all()
    # depth means of entropy: over the full rounds only
    dm = tabs["depths"].groupby("depth")["entropy"].mean()
    want = (
        tabs["depths"][tabs["depths"]["round"].isin(np.flatnonzero(full))].groupby("depth")["entropy"].mean()
    )
    pd.testing.assert_series_equal(dm, want)


def test_full_every_setting():
    assert RunSettings.of().full_every == 16
    assert RunSettings.of(full_every=1).record("pyproject.toml", 1)["full_every"] == 1
    with pytest.raises(DriftError, match="--full-every"):
        RunSettings.of(full_every=-1)


def test_an_lse_that_disagrees_with_the_scores_is_refused(target, monkeypatch):
    """Weights from a log-sum-exp far below the row's scores would exceed 1 (or overflow): the capture stops with
    its one-line error instead of writing masses above 1."""
    from drifttool.model import attention

    real = attention.fused_attention

    def low_lse(*args, **kwargs):
        out, lse = real(*args, **kwargs)
        return out, None if lse is None else lse - 100.0

    monkeypatch.setattr(attention, "fused_attention", low_lse)
    d = make(target, "gqa")
    with Capture(d, full_every=0) as cap, pytest.raises(DriftError, match="NaN or inf"):
        speculate(target, d, _ids(), depth=K, max_new_tokens=6, observers=[cap])
        cap.flush()  # the rounds' host work is batched (every PENDING rounds, and when `.rounds` is read)
