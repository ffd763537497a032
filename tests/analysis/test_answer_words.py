"""The answer's clauses read each quantity against what gives it meaning: a flat RMS says what its groups could
have detected; a sink is judged by its lift's CI against uniform, never a fixed floor, and where there is one its
retention by depth K is stated; float noise at 1 is flat, never a finding; every word follows its own test."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from drifttool.analysis.answer import drift, growth, sink
from drifttool.analysis.verdict import classify


def _row(**kw):
    base = dict(series="a", depth_k=8, rms_growth=1.01, rms_growth_lo=0.99, rms_growth_hi=1.03, rms_growth_p=0.4,
                rms_growth_mean_log=0.01, rms_growth_n=24, rms_growth_mde=1.25, sink_lift_d1=0.9, sink_lift_d1_lo=0.8,
                sink_lift_d1_hi=1.1, sink_retention=np.nan, sink_retention_lo=np.nan, sink_retention_hi=np.nan,
                sink_retention_p=np.nan, sink_retention_mean_log=np.nan)
    base.update(kw)
    return SimpleNamespace(**base)


def test_flat_rms_states_the_change_its_groups_could_detect():
    assert growth(_row(), 8) == ("fed-back RMS stays flat x1.01 [0.99, 1.03] from depth 1 to 8, p 0.40 (its 24 groups "
                                 "detect x1.25 or more at 80% power)")
    few = _row(rms_growth_mde=np.inf, rms_growth_n=3)
    assert growth(few, 8).endswith("(its 3 groups are too few to detect any change)")
    grown = _row(rms_growth=1.8, rms_growth_lo=1.7, rms_growth_hi=1.9, rms_growth_p=0.0001, rms_growth_mean_log=0.58)
    assert growth(grown, 8).startswith("fed-back RMS grows x1.80") and "detect" not in growth(grown, 8)
    # a big pooled ratio the paired test does not detect is not "grows"
    undetected = _row(rms_growth=1.8, rms_growth_p=0.2, rms_growth_mean_log=0.58)
    assert "grows" not in growth(undetected, 8)
    # one long group falling x0.97 beside many one-round groups rising x1.3: the pooled ratio sits in the flat band,
    # the paired test detects a rise; the words never say "flat" beside a detected change
    split = _row(rms_growth=0.97, rms_growth_lo=0.95, rms_growth_hi=0.99, rms_growth_p=0.0001,
                 rms_growth_mean_log=np.log(1.3), rms_growth_n=21)
    said = growth(split, 8)
    assert "flat" not in said and "grows x1.30 on average" in said and "x0.97" in said and "disagree" in said


def test_sink_is_judged_by_its_lift_against_uniform_and_its_retention_stated():
    assert sink(_row()).startswith("no sink to lose (depth-1 sink lift 0.90 [0.80, 1.10]")
    noise = _row(sink_lift_d1=1.0000000105, sink_lift_d1_lo=1.0000000101, sink_lift_d1_hi=1.0000000109)
    assert sink(noise).startswith("no sink to lose") and "above" not in sink(noise)  # float noise is not a sink
    lost = _row(sink_lift_d1=4.74, sink_lift_d1_lo=4.1, sink_lift_d1_hi=5.3, sink_retention=0.16,
                sink_retention_lo=0.12, sink_retention_hi=0.21, sink_retention_p=0.0005,
                sink_retention_mean_log=-1.8)
    assert sink(lost) == ("attends the sink (depth-1 sink lift 4.74 [4.10, 5.30]) and keeps x0.16 [0.12, 0.21] of it by "
                          "depth 8, p < 0.001: loses most of it")
    # graded: a 96 % loss is not "part of it"; a gain is not a loss
    for r, word in ((0.04, "loses nearly all of it"), (0.7, "keeps most of it")):
        got = sink(_row(sink_lift_d1=4.74, sink_lift_d1_lo=4.1, sink_lift_d1_hi=5.3, sink_retention=r,
                        sink_retention_lo=r * 0.8, sink_retention_hi=r * 1.2, sink_retention_p=0.0005,
                        sink_retention_mean_log=np.log(r)))
        assert got.endswith(word), got
    gain = sink(_row(sink_lift_d1=4.74, sink_lift_d1_lo=4.1, sink_lift_d1_hi=5.3, sink_retention=1.8,
                     sink_retention_lo=1.53, sink_retention_hi=2.1, sink_retention_p=0.001, sink_retention_mean_log=0.6))
    assert gain.endswith("gains sink mass with depth (a sink gained, not lost)")
    # no sink at depth 1, but deeper queries attend it more (EAGLE-3 on mt_chat): said, and not as a loss
    grows = sink(_row(sink_lift_d1=0.55, sink_lift_d1_lo=0.5, sink_lift_d1_hi=0.61, sink_retention=1.19,
                      sink_retention_lo=1.06, sink_retention_hi=1.32, sink_retention_p=0.007,
                      sink_retention_mean_log=np.log(1.19)))
    assert grows == ("no sink to lose (depth-1 sink lift 0.55 [0.50, 0.61]: below uniform), but gains sink mass with "
                     "depth: x1.19 [1.06, 1.32] by depth 8, p 0.007 (a sink gained, not lost)")
    assert "gains" not in sink(_row(sink_retention=1.19, sink_retention_p=0.4, sink_retention_mean_log=0.17))
    # a lift of 153 over 3 groups has no interval: neither "no sink" nor "no more than uniform" (the CI prompts'
    # checkpoint series said both)
    few = sink(_row(sink_lift_d1=152.97, sink_lift_d1_lo=np.nan, sink_lift_d1_hi=np.nan))
    assert few == ("sink not placed against uniform (depth-1 sink lift 152.97 (no CI: < 6 groups): too few groups "
                   "for an interval)"), few


def _curve(**by_depth):
    """An RM curve over depths 2..8: every depth `rm` unless given (d2=..., d3=...); Holm's p as given."""
    rm = {"value": 1.57, "lo": 1.42, "hi": 1.74, "p": 0.001, "p_holm": 0.007, "mean_log": 0.45, "n": 24,
          "mde_factor": 1.2}
    return {k: {**rm, **by_depth.get(f"d{k}", by_depth.get("all", {}))} for k in range(2, 9)}


def test_the_verdict_words_follow_the_recency_matched_test():
    assert classify(_curve(), False, True, 8) == ("drift", "own drafts draw more than equally recent prompt tokens did "
                                                  "at depths 2\u20138")
    assert classify(_curve(all={"p": 0.2, "p_holm": 1.0}), False, True, 8)[0] == "not established"
    below = {"value": 0.5, "lo": 0.4, "hi": 0.6, "mean_log": -0.7}
    assert classify(_curve(all=below), False, True, 8)[0] == "no drift"
    # the pooled ratio and the groups' mean log ratio on different sides: no detection either way
    assert classify(_curve(all={"value": 1.2, "mean_log": -0.1}), False, True, 8)[0] == "not established"
    equiv = {"value": 1.01, "lo": 0.97, "hi": 1.05, "p": 0.6, "p_holm": 1.0, "mean_log": 0.01}
    assert classify(_curve(all=equiv), False, True, 8)[0] == "no drift"  # equivalence at every depth
    assert classify(_curve(), True, True, 8)[0] == "uniform"
    assert classify(_curve(), False, False, 8) == ("not established",
                                                   "recency-matched ratio not recorded in this trace; recapture")
    assert classify(_curve(d8={"n": 5}), False, True, 8)[0] == "not established"
    # early drift, gone by K: named by depth (the verdict no longer reads depth K alone)
    early = _curve(all=below, d2={}, d3={})
    assert classify(early, False, True, 8) == ("drift", "own drafts draw more than equally recent prompt tokens did "
                                               "at depths 2\u20133; not detected at depth 8")
    # detected at depth 3 by its own p but not under Holm over the 7 depths: not drift
    assert classify(_curve(all=below, d3={"p": 0.02, "p_holm": 0.14}), False, True, 8)[0] == "not established"
    # no drift needs every depth: one open depth leaves it not established, and says where
    v, why = classify(_curve(all=equiv, d2={"p": 0.3, "p_holm": 1.0, "hi": 1.9, "mde_factor": 1.6}), False, True, 8)
    assert v == "not established" and why.startswith("at depth 2 the groups neither detect") and "x1.60" in why
    row = SimpleNamespace(drift_verdict="drift", drift_why="", recency_ratio=1.57, recency_ratio_lo=1.42,
                          recency_ratio_hi=1.74, recency_ratio_p=0.001, recency_ratio_n=24)
    assert drift(row, 8) == ("drift at depth 8: own drafts draw x1.57 [1.42, 1.74] what equally recent prompt tokens "
                             "drew at depth 1 (recency-matched ratio at depth 8, p 0.001, 24 groups)")
    early = SimpleNamespace(**{**vars(row), "recency_ratio": 0.67, "recency_ratio_lo": 0.6, "recency_ratio_hi": 0.75,
                               "recency_ratio_p": 0.001, "drift_depths": "2\u20133", "recency_ratio_max": 1.58,
                               "recency_ratio_max_lo": 1.4, "recency_ratio_max_hi": 1.8, "recency_ratio_max_depth": 2,
                               "recency_ratio_max_p_holm": 0.007})
    assert drift(early, 8) == ("drift at depths 2\u20133: own drafts draw x1.58 [1.40, 1.80] what equally recent prompt "
                               "tokens drew at depth 1 at depth 2 (the curve's peak, p 0.007 under Holm over depths "
                               "2\u20138, 24 groups); at depth 8 x0.67 [0.60, 0.75], p 0.001")
    # the curve's peak at a depth the test does not detect (EAGLE-3.1 on agent_traces: drift at 3-4, peak x2.21 at
    # depth 2 with Holm p 1.00) is never quoted as the evidence for the drift
    off = SimpleNamespace(**{**vars(early), "drift_depths": "3\u20134", "recency_ratio_max": 2.21,
                             "recency_ratio_max_lo": 1.53, "recency_ratio_max_hi": 2.86, "recency_ratio_max_p_holm": 1.0})
    assert drift(off, 8) == ("drift at depths 3\u20134 (Holm over depths 2\u20138, 24 groups); the curve's peak, x2.21 "
                             "[1.53, 2.86] at depth 2, is not detected there (p 1.00 under Holm); at depth 8 x0.67 "
                             "[0.60, 0.75], p 0.001"), drift(off, 8)
