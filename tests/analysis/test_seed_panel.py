"""Seeds as the unit of an architecture claim (analysis.seeds): per seed and over seeds, with a planted difference
that one seed contradicts, on synthetic traces with the numbers chosen."""

from __future__ import annotations

import numpy as np
import pytest

from drifttool.analysis.compare import Comparison
from drifttool.analysis.seeds import differences, over_seeds, per_group, sentence
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace

K = 4
GROUPS = 8


def _drafter(rng, accepted_mean: int, rms_top: float):
    acc, prompts, groups = [], [], {}
    for g in range(GROUPS):
        pid = f"doc{g}"
        groups[pid] = pid
        for _ in range(5):
            prompts.append(pid)
            acc.append(accepted_mean)
    rms = np.tile(np.linspace(1.0, rms_top, K), (len(acc), 1))
    return {"accepted": acc, "prompt": prompts, "rms_in": rms}, groups


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds")
    rng = np.random.default_rng(0)
    traces = []
    for s, (a3, a31) in enumerate([(1, 2), (1, 3), (2, 1)]):  # seed 2 reverses the sign
        e3, groups = _drafter(rng, a3, 3.0)
        e31, _ = _drafter(rng, a31, 1.0)
        traces.append(read_trace(write_trace(root / f"s{s}.drift", {f"eagle3-s{s}": e3, f"eagle3.1-s{s}": e31}, K,
                                             groups=groups)))
    return Comparison.of(traces)


def test_per_seed_and_over_seeds(panel):
    rows = per_group(panel)
    assert set(rows.seed) == {0, 1, 2} and set(rows.variant) == {"eagle3", "eagle3.1"}
    diff = differences(rows)
    t = over_seeds(diff).set_index("quantity")
    al = t.loc["acceptance_length"]
    assert al.per_seed == [1.0, 2.0, -1.0]
    assert al.estimate == pytest.approx(2 / 3)
    assert al.seeds_agreeing == 2 and al.min_p == pytest.approx(0.25) and al.sign_p == pytest.approx(1.0)
    # the sign-flip test over the 3 seed means: |sum| 2 is reached by the patterns (+,+,+) 2, (+,+,-)... : exact
    patterns = [abs(a * 1.0 + b * 2.0 + c * -1.0) for a in (1, -1) for b in (1, -1) for c in (1, -1)]
    assert al.p == pytest.approx(np.mean(np.array(patterns) >= 2.0 - 1e-12))
    # a t-interval over the 3 seed means: mean 2/3, sd 1.528, t(0.975, 2) = 4.303
    half = 4.302652729911275 * np.std([1.0, 2.0, -1.0], ddof=1) / np.sqrt(3)
    assert (al.lo, al.hi) == pytest.approx((2 / 3 - half, 2 / 3 + half), rel=1e-9)
    assert t.loc["rms_growth", "estimate"] == pytest.approx(np.log(1.0 / 3.0))  # a factor, as a log difference
    text = sentence(over_seeds(diff))
    assert "3 seeds x 8 groups" in text and "no architecture verdict" in text and "cannot reach p < 0.05" in text


def test_seeds_are_read_by_the_groups_test_and_the_six_seed_floor():
    """Over seeds, the exact sign-flip test (as over groups): 7 of 8 seeds agreeing with the 8-seed scratch panel's
    per-seed means gives p 0.023 where the plain sign test gives 0.070; 5 seeds can never reach 0.05."""
    import pandas as pd
    from scipy.stats import permutation_test

    from drifttool.analysis.seeds import established, sign_test
    from drifttool.analysis.stats import SIGNFLIP_MDE

    assert sign_test(np.ones(5)) == pytest.approx(2 / 32) and sign_test(np.ones(6)) == pytest.approx(2 / 64)
    assert sign_test(np.array([1, 1, 1, 1, 1, -1])) == pytest.approx(14 / 64)
    per_seed = [0.051, 0.062, 0.018, 0.044, 0.071, -0.012, 0.039, 0.025]  # 7/8 positive
    diff = pd.DataFrame([{"seed": s, "group": g, "acceptance_length": v, "rms_growth": -0.5, "recency_ratio": 0.0,
                          "sink_retention": 0.0} for s, v in enumerate(per_seed) for g in range(4)])
    t = over_seeds(diff).set_index("quantity")
    al = t.loc["acceptance_length"]
    want = permutation_test((np.array(per_seed),), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert al.p == pytest.approx(want, rel=1e-9) and al.p < 0.05 < al.sign_p  # scipy's exact sign-flip test
    assert al.mde == pytest.approx(SIGNFLIP_MDE[8] * np.std(per_seed, ddof=1), rel=1e-9)  # the same rule's MDE
    assert established(al) and "the architectures differ" in sentence(over_seeds(diff))
    five = over_seeds(diff[diff.seed < 5]).set_index("quantity")
    assert not established(five.loc["acceptance_length"])  # 5 seeds: p >= 2 / 32, never < 0.05
    assert "cannot reach p < 0.05" in sentence(over_seeds(diff[diff.seed < 5]))
