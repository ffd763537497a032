"""`drifttool patch`'s attention sites (run/attention_edits.py) with known truth: at strength 0 each is the clean pass
bit for bit; the capture's masses under an edit equal the edited run's eager attention rows (full rounds and
log-sum-exp rounds alike); `attention.sink` / `attention.own` leave no mass on what they remove; `attention.recency`
puts every head's non-sink own-slot share at its recency-matched control (the round's ratio exactly 1), and
`attention.sinkhold` every head's sink at its depth-1 share. On the planted-drift control the recency edit removes
the drift: its recency-matched ratio comes back to the same drafter's without the drift term."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drifttool.model.controls import plant
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run import attention_stats as stats
from drifttool.run.engines.patch import chain_pass, schedule_of
from drifttool.run.hooks import Capture
from drifttool.run.interventions import applied, parse
from drifttool.run.loop import teacher_forcing_data
from drifttool.trace.sinks import SinkSpec
from tests.run.test_capture_attention import EagerRows

K, NEW, SINK = 5, 20, 2
SITES = ["attention.sink@2", "attention.own@2", "attention.recency@2", "attention.sinkhold@3", "attention.recency@2*0.5"]


def _target():
    t = tiny_target(vocab=64, hidden=64, layers=4, heads=4, kv_heads=2, max_pos=1024)
    with torch.no_grad():
        t.model.lm_head.weight[SINK].zero_()  # the planted sink token is never generated: it stays at slot 0
    return t


def _ids(seed: int, n: int = 90) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [5, SINK] + torch.randint(3, 64, (n,), generator=g).tolist()


@pytest.fixture(scope="module")
def setup():
    t = _target()
    d = plant(tiny_drafter(t, seed=1), recency=3.0, sink=6.0, drift=6.0, sink_token=SINK)
    t.set_aux_layer_ids(d.config.input_aux_layer_ids)
    ids = _ids(0)
    forced = teacher_forcing_data(t, ids, K, NEW)
    clean, cap = _pass(d, None, forced, ids, None)
    return t, d, ids, forced, clean, cap.rounds


def _pass(d, iv, forced, ids, schedule, full_every: int = 1, eager=None):
    observers = [eager] if eager is not None else []
    with Capture(d, sink=SinkSpec.parse("pos:0"), full_every=full_every) as cap, applied(d, iv, K, forced[1], cap):
        rounds = chain_pass(d, ids, K, NEW, forced, [cap, *observers], schedule)
    return rounds, cap


def _fields(rc) -> dict[str, np.ndarray]:
    return stats.head_fields(rc.heads)  # each [K, nh]


def test_strength_zero_is_the_clean_pass_bit_for_bit(setup):
    _, d, ids, forced, clean, clean_caps = setup
    for site in ("attention.sink@2*0", "attention.own@2*0", "attention.recency@2*0", "attention.sinkhold@2*0"):
        rounds, cap = _pass(d, parse(site), forced, ids, schedule_of(clean))
        assert [r.draft_ids for r in rounds] == [r.draft_ids for r in clean], site
        for a, b in zip(cap.rounds, clean_caps):
            np.testing.assert_array_equal(a.heads, b.heads, err_msg=site)


@pytest.mark.parametrize("site", SITES)
def test_masses_under_an_edit_equal_the_edited_eager_rows(setup, site):
    """The eager rows are what the edited drafter attended (hook_probs after the bias); the capture recomputes its
    masses from q, k and the kernel's log-sum-exp plus the same shifts, on full rounds and on lse rounds."""
    _, d, ids, forced, clean, _ = setup
    sched = schedule_of(clean)
    d.set_attn_impl("eager")
    eager = EagerRows(d)
    try:
        rounds, full = _pass(d, parse(site), forced, ids, sched, 1, eager)
    finally:
        eager.h.remove()
        d.set_attn_impl("sdpa")
    _, lse = _pass(d, parse(site), forced, ids, sched, 0)  # the fused kernel, lse rounds
    assert len(eager.rounds) == len(rounds) > 3
    for r, (rows, n) in enumerate(zip(eager.rounds, eager.ctx)):
        for j, row in enumerate(rows[-K:]):  # the round's K query rows, depth j + 1
            row = row.double().numpy()
            want_sink, want_self = row[:, 0], row[:, n:n + j].sum(-1)
            for cap in (full, lse):
                f = _fields(cap.rounds[r])
                np.testing.assert_allclose(f["sink_mass"][j], want_sink, atol=2e-6, err_msg=f"{site} r{r} d{j + 1}")
                np.testing.assert_allclose(f["self_mass"][j], want_self, atol=2e-6, err_msg=f"{site} r{r} d{j + 1}")


def test_each_site_does_what_it_says(setup):
    _, d, ids, forced, clean, clean_caps = setup
    sched = schedule_of(clean)
    caps = {s: _pass(d, parse(s), forced, ids, sched, 1)[1].rounds for s in SITES[:4]}
    for r, base in enumerate(clean_caps):
        b = _fields(base)
        sink, own, rec, hold = (_fields(caps[s][r]) for s in SITES[:4])
        assert np.abs(sink["sink_mass"][1:]).max() < 1e-12 and np.array_equal(sink["sink_mass"][0], b["sink_mass"][0])
        assert np.abs(own["self_mass"][1:]).max() < 1e-12
        # recency: own / (1 - sink at k) == the depth-1 row's control / (1 - sink at 1), per head, at depth >= 2
        s_ns = rec["self_mass"][1:] / (1 - rec["sink_mass"][1:])
        c_ns = rec["matched_mass"][1:] / (1 - rec["sink_mass"][0])
        np.testing.assert_allclose(s_ns, c_ns, rtol=1e-4)
        np.testing.assert_allclose(hold["sink_mass"][2:], np.broadcast_to(hold["sink_mass"][0], (K - 2, 4)), rtol=1e-4)
    b = np.stack([_fields(c)["self_mass"][1:] / (1 - _fields(c)["sink_mass"][1:]) for c in clean_caps])
    m = np.stack([_fields(c)["matched_mass"][1:] / (1 - _fields(c)["sink_mass"][0]) for c in clean_caps])
    assert (b / m).mean() > 1.5  # the planted drift the recency edit removed was there


def _ratio(caps) -> float:
    """The recency-matched ratio on non-sink shares at depth K, pooled: mean own share / mean control share."""
    s = np.mean([_fields(c)["self_mass"][-1] / (1 - _fields(c)["sink_mass"][-1]) for c in caps])
    m = np.mean([_fields(c)["matched_mass"][-1] / (1 - _fields(c)["sink_mass"][0]) for c in caps])
    return float(s / m)


def test_removing_the_planted_drift_gives_the_undrifted_drafters_ratio(setup):
    """Known truth: the same control without its drift term is the drafter the edit should turn it into (for the
    attention's ratio; its drafts may differ)."""
    t, d, _, _, _, _ = setup
    base = plant(tiny_drafter(t, seed=1), recency=3.0, sink=6.0, sink_token=SINK)
    edited, clean, undrifted = [], [], []
    for seed in range(3):
        ids = _ids(10 + seed)
        forced = teacher_forcing_data(t, ids, K, NEW)
        rounds, cap = _pass(d, None, forced, ids, None)
        clean += cap.rounds
        edited += _pass(d, parse("attention.recency@2"), forced, ids, schedule_of(rounds))[1].rounds
        undrifted += _pass(base, None, forced, ids, None)[1].rounds
    assert _ratio(clean) > 1.5
    assert abs(_ratio(edited) - 1) < 0.05 and abs(_ratio(undrifted) - 1) < 0.25
    assert abs(_ratio(edited) - _ratio(undrifted)) < 0.25
