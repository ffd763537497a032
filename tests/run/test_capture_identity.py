"""Capture only stashes references: drafting with capture attached (every option on) is bitwise identical to
drafting without it -- every drafter logit, every fed-back hidden, every chosen token and round record."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.hooks import Capture
from drifttool.run.loop import speculate, teacher_forcing_data
from drifttool.trace.sinks import SinkSpec
from tests.support.capture import TINY, prompt

TIMING = ("draft_s", "verify_s")


@pytest.fixture(scope="module")
def models():
    t = tiny_target(**TINY)
    return t, {"eagle3": tiny_drafter(t, seed=1), "eagle31": tiny_drafter(t, seed=2, fc_norm=True, norm_output=True)}


def run(t, d, ids, capture: bool, **kw):
    logits, post, feedback_in = [], [], []
    hs = [
        d.lm_head.register_forward_hook(lambda _m, _i, o: logits.append(o.clone())),
        d.hook_post.register_forward_hook(lambda _m, _i, o: post.append(o.clone())),
        d.hook_layer_in.register_forward_hook(lambda _m, _i, o: feedback_in.append(o.clone())),
    ]
    cap = Capture(d, sink=SinkSpec.parse("first:2;tok:9"), keep_rows=3, keep_qk=True) if capture else None
    try:
        if cap:
            cap.attach()
        res = speculate(t, d, ids, observers=[cap] if cap else [], **kw)
    finally:
        if cap:
            cap.detach()
        for h in hs:
            h.remove()
    return res, logits, post, feedback_in, cap


def records(res):
    return [{k: v for k, v in dataclasses.asdict(r).items() if k not in TIMING} for r in res.rounds]


@pytest.mark.parametrize("drafter", ["eagle3", "eagle31"])
@pytest.mark.parametrize("kw", [
    {"mode": "generate"},
    {"mode": "teacher-forced"},
    {"mode": "generate", "temperature": 0.8, "seed": 3},
], ids=["generate", "teacher-forced", "sampled"])
def test_capture_on_off_bitwise_identical(models, drafter, kw):
    t, ds = models
    d = ds[drafter]
    ids = prompt(21, 10)
    kw = dict(kw, depth=4, max_new_tokens=16)
    off = run(t, d, ids, capture=False, **kw)
    on = run(t, d, ids, capture=True, **kw)
    assert on[0].output_ids == off[0].output_ids
    assert records(on[0]) == records(off[0])
    assert len(on[0].rounds) >= 3
    for a, b in zip(on[1:4], off[1:4]):
        assert len(a) == len(b) > 0
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    cap = on[4]
    assert len(cap.rounds) == len(on[0].rounds)  # and the capture did see every round
    assert not d._forward_hooks and not d.lm_head._forward_hooks  # detach removes everything
    assert all(not m._forward_hooks for m in d.modules())


def test_teacher_forced_shared_data_identical(models):
    """capture_prompt shares one teacher-forcing pass across drafters: same result as computing it per run."""
    t, ds = models
    d = ds["eagle3"]
    ids = prompt(22, 9)
    forced = teacher_forcing_data(t, ids, 3, 12)
    a = run(t, d, ids, capture=True, mode="teacher-forced", depth=3, max_new_tokens=12, forced=forced)
    b = run(t, d, ids, capture=False, mode="teacher-forced", depth=3, max_new_tokens=12)
    assert records(a[0]) == records(b[0])
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1]))
