"""Capture's recomputed attention rows (q rows x final key cache, one batched softmax per round) equal the
eager attention probabilities of the same drafter on the same chain (docs/eagle3.md §7, bar: 1e-5 in fp32), for every
round, depth and head, GQA included; region bookkeeping (sink / draft / own / prompt) checked against the
eager rows and, with keys forced to zero (uniform attention), against slot counts by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from drifttool.errors import DriftError
from drifttool.model.tiny import tiny_target
from drifttool.run.hooks import Capture
from drifttool.run.loop import speculate
from drifttool.run.records import prompt_tables
from drifttool.trace import metric_table
from drifttool.trace.schema import KEY_COUNTS
from drifttool.trace.sinks import SinkSpec
from tests.support.capture import TINY, make_drafter, prompt

ATOL = 1e-5
K = 4


@pytest.fixture(scope="module")
def target():
    return tiny_target(**TINY)


class EagerRows:
    """Observer + hook on hook_probs: the last row of every drafter forward = that depth's query row."""

    def __init__(self, drafter):
        self.rounds: list[list[torch.Tensor]] = []
        self.ctx: list[int] = []
        self._cur: list[torch.Tensor] = []
        self.h = drafter.layer.self_attn.hook_probs.register_forward_hook(
            lambda _m, _i, out: self._cur.append(out[0, :, -1].clone()))

    def begin_round(self, drafter, round_idx, context_len, depth, seq):
        self._cur = []
        self.ctx.append(context_len)

    def end_round(self, drafter, cache, record):
        self.rounds.append(self._cur)


TEMPLATE = (7, 9)  # token ids counted as chat-template tokens in these tests


def run_eager(t, d, ids, sink="4", mode="generate", keep_qk=True, mnt=12, recent=32):
    d.set_attn_impl("eager")
    eager = EagerRows(d)
    cap = Capture(d, sink=SinkSpec.parse(sink), keep_qk=keep_qk, recent=recent, template_ids=TEMPLATE)
    try:
        with cap:
            res = speculate(t, d, ids, depth=K, max_new_tokens=mnt, mode=mode, observers=[cap, eager])
    finally:
        eager.h.remove()
        d.set_attn_impl("sdpa")
    return res, cap, eager


def expected_masses(row: torch.Tensor, n: int, j: int, sink_mask: torch.Tensor, recent: int = 32) -> np.ndarray:
    """[nh, 6] sink, draft, own, entropy, prompt, recent from one eager row [nh, n + j] (j = 0-based depth);
    recent = the last `recent` context slots that are not sinks."""
    row = row.double()
    sink = row[:, :n] @ sink_mask.double()
    rec_mask = torch.zeros(n, dtype=torch.double)
    rec_mask[max(0, n - recent):] = 1.0
    rec = row[:, :n] @ (rec_mask * (1 - sink_mask.double()))
    own = row[:, n + j - 1] if j >= 1 else torch.zeros(row.shape[0], dtype=row.dtype)
    draft = row[:, n : n + j - 1].sum(-1) if j >= 2 else torch.zeros_like(own)
    prompt = (row[:, :n] * (1 - sink_mask.double())).sum(-1)
    ent = torch.special.entr(row).sum(-1)
    return torch.stack([sink, draft, own, ent, prompt, rec], -1).numpy()


@pytest.mark.parametrize("nh,nkv,sink,mode", [
    (4, 2, "4", "generate"),  # GQA, default sink
    (4, 1, "first:2;pos:6;tok:9", "generate"),  # MQA, combined sink definition
    (4, 4, "pos:0,3", "teacher-forced"),  # MHA, teacher-forced chain
    (8, 2, "tok:5,9", "generate"),  # GQA with 4 query heads per kv head
])
def test_rows_and_masses_equal_eager(target, nh, nkv, sink, mode):
    d = make_drafter(target, nh, nkv, seed=nh + nkv)
    ids = prompt(nh * 10 + nkv, 10)
    ids[2] = ids[7] = 9  # make the token sinks hit
    res, cap, eager = run_eager(target, d, ids, sink=sink, mode=mode, recent=5)
    assert len(res.rounds) >= 3 and len(cap.rounds) == len(eager.rounds) == len(res.rounds)
    seq = res.prompt_ids + res.output_ids
    spec = SinkSpec.parse(sink)
    for rc, rows, rec in zip(cap.rounds, eager.rounds, res.rounds):
        n = rec.context_len
        assert rc.context_len == n and len(rows) == K
        mask = spec.mask(torch.tensor(seq[:n])).double()
        for j, row in enumerate(rows):
            assert row.shape == (nh, n + j)
            assert torch.allclose(row.sum(-1), torch.ones(nh), atol=1e-6)
            # full rows, every head, through the notebook API
            for h in range(nh):
                got = cap.attention(rec.round, j + 1, head=h)
                np.testing.assert_allclose(got, row[h].numpy(), atol=ATOL, rtol=0)
            np.testing.assert_allclose(cap.attention(rec.round, j + 1), row.mean(0).numpy(), atol=ATOL, rtol=0)
            # region masses of every head
            exp = expected_masses(row, n, j, mask, recent=5)
            for i, name in enumerate(("sink_mass", "draft_mass", "own_mass", "entropy")):
                np.testing.assert_allclose(rc.field(name)[j], exp[:, i], atol=ATOL, rtol=0)
            np.testing.assert_allclose(rc.field("recent_mass")[j], exp[:, 5], atol=ATOL, rtol=0)
            # template mass: the slots holding the planted template ids (7, 9), sinks excluded
            tpl = torch.isin(torch.tensor(seq[:n]), torch.tensor(TEMPLATE)) & (mask == 0)
            np.testing.assert_allclose(rc.field("template_mass")[j], (row[:, :n].double() @ tpl.double()).numpy(),
                                       atol=ATOL, rtol=0)
            # the key counts of the uniform share, counted from the eager row's own length and masks
            rec_slots = (torch.arange(n) >= n - 5) & (mask == 0)
            got = dict(zip(KEY_COUNTS, rc.counts[j].tolist()))
            assert got == {**got, "n_keys": n + j, "n_sink": int(mask.sum()), "n_self": j,
                           "n_recent": int(rec_slots.sum()), "n_template": int(tpl.sum())}, got
            # concentration: each head's largest weight and the slot it sits on
            np.testing.assert_allclose(rc.field("max_prob")[j], row.max(-1).values.numpy(), atol=ATOL, rtol=0)
            assert (rc.field("top_pos")[j] == row.argmax(-1).numpy()).all()
            prompt_mass = 1.0 - rc.field("sink_mass")[j] - rc.field("draft_mass")[j] - rc.field("own_mass")[j]
            np.testing.assert_allclose(prompt_mass, exp[:, 4], atol=ATOL, rtol=0)
        # depth 1 sits on a target-feature slot: self mass exactly 0
        assert (rc.field("draft_mass")[0] == 0).all() and (rc.field("own_mass")[0] == 0).all()
        assert (rc.field("own_mass")[1:] > 0).all()  # later depths do attend their own slot


def test_trace_tables_regions_sum_to_one(target):
    d = make_drafter(target, 4, 2, seed=3)
    res, cap, _ = run_eager(target, d, prompt(3, 9))
    tabs = prompt_tables("d", "p", res.rounds, cap.rounds, d.config.aux_layer_ids, 2048)
    for name in ("depths", "heads"):
        df = tabs[name]
        total = df[["sink_mass", "draft_mass", "own_mass", "prompt_mass"]].sum(axis=1)
        np.testing.assert_allclose(total, 1.0, atol=1e-6)
        assert (df[["sink_mass", "draft_mass", "own_mass", "prompt_mass"]] >= -1e-6).all().all()
        np.testing.assert_allclose(df["self_mass"], df["draft_mass"] + df["own_mass"], atol=1e-6)
        d1 = df[df["depth"] == 1]
        assert (d1["self_mass"] == 0).all() and (d1["draft_mass"] == 0).all() and (d1["own_mass"] == 0).all()
    assert len(tabs["heads"]) == len(tabs["depths"]) * 4
    assert len(tabs["aux"]) == len(res.rounds) * d.config.num_aux  # aux chunks captured every round
    assert (tabs["aux"]["rms_before"] > 0).all()


def test_sdpa_capture_equals_eager_rows(target):
    """The capture normally runs under SDPA; on the same (teacher-forced) chain its rows equal eager's."""
    d = make_drafter(target, 4, 2, seed=11)
    ids = prompt(11, 8)
    cap = Capture(d, keep_qk=True)
    with cap:
        res_sdpa = speculate(target, d, ids, depth=K, max_new_tokens=10, mode="teacher-forced", observers=[cap])
    res, _, eager = run_eager(target, d, ids, mode="teacher-forced", keep_qk=False, mnt=10)
    assert [r.input_ids for r in res.rounds] == [r.input_ids for r in res_sdpa.rounds]
    for rec, rows in zip(res_sdpa.rounds, eager.rounds):
        for j, row in enumerate(rows):
            for h in range(4):
                np.testing.assert_allclose(cap.attention(rec.round, j + 1, head=h), row[h].numpy(), atol=ATOL, rtol=0)


SINKS = ["4", "first:2", "first:0", "pos:1,5", "pos:0,200", "tok:9", "first:1;pos:3;tok:9,11"]


def test_uniform_attention_masses_are_slot_ratios(target):
    """Zero keys -> every visible slot gets 1/L: masses are slot counts over L, entropy log L."""
    d = make_drafter(target, 4, 2, seed=5, zero_keys=True)
    ids = prompt(5, 11)
    ids[4] = ids[8] = 9
    ids[0] = 11
    caps = {s: Capture(d, sink=SinkSpec.parse(s)) for s in SINKS}
    for c in caps.values():
        c.attach()
    try:
        res = speculate(target, d, ids, depth=K, max_new_tokens=14, observers=list(caps.values()))
    finally:
        for c in caps.values():
            c.detach()
    seq = res.prompt_ids + res.output_ids
    assert len(res.rounds) >= 3
    for s, cap in caps.items():
        spec = SinkSpec.parse(s)
        for rc, rec in zip(cap.rounds, res.rounds):
            n = rec.context_len
            n_sink = sum(
                t < spec.first_n or t in spec.positions or seq[t] in spec.token_ids for t in range(n))
            for j in range(K):
                length = n + j  # visible slots of depth j+1
                exp = [n_sink / length, max(j - 1, 0) / length, (1 if j >= 1 else 0) / length, math.log(length)]
                got = np.stack([rc.field(f)[j] for f in ("sink_mass", "draft_mass", "own_mass", "entropy")], -1)
                np.testing.assert_allclose(got, np.tile(exp, (4, 1)), atol=1e-6, rtol=0,
                                           err_msg=f"sink {s} round {rec.round} depth {j + 1}")


def test_sink_spec_parse():
    assert SinkSpec.parse("4") == SinkSpec(first_n=4)
    assert SinkSpec.parse(None) == SinkSpec(first_n=4)
    assert SinkSpec.parse("first:2") == SinkSpec(first_n=2)
    assert SinkSpec.parse("pos:0,7") == SinkSpec(first_n=0, positions=[0, 7])
    assert SinkSpec.parse("tok:1,2") == SinkSpec(first_n=0, token_ids=[1, 2])
    assert SinkSpec.parse("first:1; pos:5 ;tok:3") == SinkSpec(first_n=1, positions=[5], token_ids=[3])
    m = SinkSpec.parse("first:1;pos:4,50;tok:7").mask(torch.tensor([7, 1, 2, 7, 3, 7]))
    assert m.tolist() == [True, False, False, True, True, True]
    for bad in ("pos:a", "first:-1", "bogus:1", "first:1,2"):
        with pytest.raises(DriftError):
            SinkSpec.parse(bad)


def test_attention_api_errors(target):
    d = make_drafter(target, 4, 2, seed=7)
    res, cap, _ = run_eager(target, d, prompt(7, 6), mnt=4)
    with pytest.raises(DriftError, match="depth"):
        cap.attention(0, K + 1)
    with pytest.raises(DriftError, match="round"):
        cap.attention(len(res.rounds) + 5, 1)
    with pytest.raises(DriftError, match="keep_qk"):
        Capture(d).attention(0, 1)


def _lifts(tabs):
    import pyarrow as pa

    from drifttool.trace.layout import add_derived

    return add_derived("depths", pa.Table.from_pandas(tabs["depths"], preserve_index=False), None).to_pandas()


@pytest.mark.parametrize("recent", [3, 32])
def test_uniform_attention_has_lift_one_at_every_depth_and_context(target, recent):
    """Uniform attention puts count / n_keys on every key set: every lift is 1.0 wherever the set is non-empty (self
    from depth 2; sinks and recent slots as the rule gives them), at every context length the chain reaches; and the
    counts a trace without them derives from its manifest equal the capture's (first-N / explicit-position sinks)."""
    from drifttool.trace.key_counts import chain_counts
    from drifttool.trace.schema import LIFTS

    d = make_drafter(target, 4, 2, seed=5, zero_keys=True)
    ids = prompt(5, 11)
    ids[4] = ids[8] = 9
    caps = {s: Capture(d, sink=SinkSpec.parse(s), recent=recent, template_ids=TEMPLATE) for s in SINKS}
    for c in caps.values():
        c.attach()
    try:
        res = speculate(target, d, ids, depth=K, max_new_tokens=30, observers=list(caps.values()))
    finally:
        for c in caps.values():
            c.detach()
    assert len({r.context_len for r in res.rounds}) >= 5  # several context lengths
    for s, cap in caps.items():
        df = _lifts(prompt_tables("d", "p", res.rounds, cap.rounds, d.config.aux_layer_ids, 2048))
        for lift, (_, count) in LIFTS.items():
            have = df[count] > 0
            np.testing.assert_allclose(df.loc[have, lift], 1.0, atol=1e-5, err_msg=f"{lift} sink {s}")
            assert df.loc[~have, lift].isna().all()
        np.testing.assert_allclose(df["entropy_norm"].dropna(), 1.0, atol=1e-5)
        assert (df.loc[df.depth >= 2, "n_self"] == df.loc[df.depth >= 2, "depth"] - 1).all()
        spec = SinkSpec.parse(s)
        # a trace without the counts counts them with the same rules: equal wherever the rule needs positions only
        # (every count of a first-N / explicit-position sink rule but the chat template's), NaN where it needs tokens
        old = chain_counts(df["context_len"], df["position"], df["attn_window_start"], spec, recent)
        tokens = {m.count for m in metric_table.of_kind("context") if m.count and (spec.token_ids or m.keys == "template")}
        for c in KEY_COUNTS:
            assert np.isnan(old[c]).all() if c in tokens else (old[c] == df[c]).all(), (s, c)
