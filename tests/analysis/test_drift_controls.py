"""The drift verdict on drafters of known truth (drifttool/model/controls.py), captured through the real CLI on the
tiny target at 12 groups: uniform attention reads "uniform" in every sentence and passes a flat gate; a drafter whose
attention depends on key distance alone (with or without a sink) never reads "drift"; nor does one whose sink fades
with depth while every other score depends on distance alone (truth: no drift, sink retention well below 1; the raw
ratio of two rows' shares, and a renormalisation of head means, both read it as drift); an anti-drift drafter reads
"no drift"; planted drift, weak and strong (attention moves from the sink onto the drafter's own slots with depth,
checked on eager attention rows here), reads "drift" with the sink's loss stated. The recency-matched ratio
recomputes from the stored per-head masses (an independent loop over rows), and no In short arrow disagrees with its
test."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from drifttool import save_drafter
from drifttool.analysis.answer import answer, short
from drifttool.analysis.compare import Comparison
from drifttool.analysis.verdict import FLAT
from drifttool.model.controls import plant
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.loop import speculate
from drifttool.trace.reader import read_trace
from tests.run.test_capture_attention import EagerRows
from tests.support.capture import cli

SINK, K, GROUPS = 2, 6, 12
CONTROLS = {
    "uniform": {},
    "recency": {"recency": 3.0},
    "sinkrec": {"recency": 3.0, "sink": 6.0, "sink_token": SINK},
    "weak": {"recency": 3.0, "sink": 6.0, "drift": 1.5, "sink_token": SINK},
    "strong": {"recency": 3.0, "sink": 6.0, "drift": 6.0, "sink_token": SINK},
    "fade": {"recency": 3.0, "sink": 6.0, "sink_fade": 6.0, "head_spread": 0.6, "sink_token": SINK},
    "anti": {"recency": 3.0, "sink": 6.0, "drift": -3.0, "sink_token": SINK},
}
EXPECTED = {"uniform": {"uniform"}, "recency": {"no drift", "not established"},
            "sinkrec": {"no drift", "not established"}, "weak": {"drift"}, "strong": {"drift"},
            "fade": {"no drift", "not established"}, "anti": {"no drift"}}


def _target():
    t = tiny_target(vocab=64, hidden=64, layers=4, heads=4, kv_heads=2, max_pos=1024)
    with torch.no_grad():
        t.model.lm_head.weight[SINK].zero_()  # the planted sink token is never generated: it stays at slot 0
    return t


def _drafter(t, name):
    return plant(tiny_drafter(t, seed=1), **CONTROLS[name])


def _prompts(n: int = GROUPS) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    # slot t holds token t+1's embedding: the sink token at position 1 puts the planted sink on slot 0
    return [[5, SINK] + torch.randint(3, 64, (int(torch.randint(120, 200, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


@pytest.fixture(scope="module")
def controls(tmp_path_factory):
    root = tmp_path_factory.mktemp("controls")
    t = _target()
    t.model.save_pretrained(root / "target")
    args = []
    for name in CONTROLS:
        save_drafter(_drafter(t, name), root / name)
        args += ["--drafter", f"{name}={root / name}"]
    probes = root / "probes.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": ids}) + "\n" for i, ids in enumerate(_prompts())))
    out = root / "controls.drift"
    r = cli("capture", "--target", root / "target", *args, "--probes", probes, "--out", out, "--depth", K,
            "--max-new-tokens", 24, "--sink", "pos:0", timeout=1800)
    assert r.returncode == 0, r.stderr
    cmp = Comparison.of([read_trace(out)])
    return cmp, cmp.summary().set_index("series"), out


def test_each_control_gets_its_verdict(controls):
    _, s, _ = controls
    for name, want in EXPECTED.items():
        assert s.loc[name, "drift_verdict"] in want, (name, s.loc[name, ["drift_verdict", "drift_why", "recency_ratio",
                                                                          "recency_ratio_p"]].tolist())
        assert s.loc[name, "groups"] == GROUPS
    assert s.loc["strong", "recency_ratio"] > s.loc["weak", "recency_ratio"] > FLAT
    # the sink half: both planted drafters attend the sink, and the strong one is seen losing part of it
    assert (s.loc[["sinkrec", "weak", "strong"], "sink_lift_d1_lo"] > 2).all()
    assert s.loc["strong", "sink_retention_hi"] < 1 and s.loc["strong", "sink_retention_p"] < 0.05


def test_recency_ratio_recomputes_from_the_stored_masses(controls):
    """RM(K) on non-sink shares, rebuilt row by row from the stored per-head table (a plain loop, not the package's
    merge): per round, the head means of own / (1 - sink at K) and matched / (1 - sink at 1); float64 sums of
    float32 values, so equal to float64 rounding (1e-12 relative)."""
    cmp, s, out = controls
    h = read_trace(out).table("heads")
    h = h[h.depth.isin([1, K])]
    for name in CONTROLS:
        x = h[h.drafter == name]
        sink1 = {(r.prompt_id, r.round, r.head): float(r.sink_mass) for r in x[x.depth == 1].itertuples()}
        per_round: dict = {}
        for r in x[x.depth == K].itertuples():
            if not np.isfinite(r.matched_mass):
                continue
            s1 = sink1[(r.prompt_id, r.round, r.head)]
            num = (float(r.draft_mass) + float(r.own_mass)) / (1 - float(r.sink_mass))
            per_round.setdefault((r.prompt_id, r.round), []).append((num, float(r.matched_mass) / (1 - s1)))
        num = sum(np.mean([a for a, _ in v]) for v in per_round.values())
        den = sum(np.mean([b for _, b in v]) for v in per_round.values())
        assert num / den == pytest.approx(s.loc[name, "recency_ratio"], rel=1e-12)
        assert s.loc[name, "recency_basis"] == "non-sink shares"


def test_a_fading_sink_is_not_drift(controls):
    """The control whose sink fades with depth (distance-only elsewhere): its sink retention is detected well below
    1, the verdict is not drift, and the two statistics a fading sink fools read it as drift: the raw ratio of the two
    rows' shares, and a renormalisation of head means (its heads' sinks and recency profiles differ)."""
    cmp, s, _ = controls
    assert s.loc["fade", "sink_retention_hi"] < 0.6 and s.loc["fade", "sink_retention_p"] < 0.05
    assert s.loc["fade", "drift_verdict"] != "drift" and s.loc["fade", "drift_depths"] == ""
    d = cmp.depths[cmp.depths.series == "fade"]
    one = d[d.depth == 1].set_index(["prompt_id", "round"])["sink_mass"].astype(np.float64)
    for k in range(2, K + 1):
        x = d[(d.depth == k) & d.matched_mass.notna()].set_index(["prompt_id", "round"])
        raw = x.self_mass.astype(np.float64).sum() / x.matched_mass.astype(np.float64).sum()
        s1 = one.loc[x.index]
        mean_heads = ((x.self_mass.astype(np.float64) / (1 - x.sink_mass.astype(np.float64))).sum()
                      / (x.matched_mass.astype(np.float64) / (1 - s1)).sum())
        # what the fading sink does to the others: the raw ratio reads drift, the head-mean renormalisation misreads
        # it too (its heads' recency differs and only every other head's sink fades)
        assert raw > FLAT and abs(np.log(mean_heads)) > np.log(FLAT), (k, raw, mean_heads)
    curve = cmp.recency_curve().set_index(["series", "depth"])
    assert not curve.loc["fade", "drift"].any()
    assert (abs(np.log(curve.loc["fade", "recency_ratio"])) < np.log(FLAT)).all()


def test_the_curve_names_the_depths(controls):
    """The strong control drifts at every depth, the weak one at least at depth K; the anti-drift one never."""
    cmp, s, _ = controls
    curve = cmp.recency_curve().set_index(["series", "depth"])
    assert curve.loc["strong", "drift"].all() and s.loc["strong", "drift_depths"] == f"2\u2013{K}"
    assert curve.loc["weak", "drift"].loc[K]
    assert not curve.loc["anti", "drift"].any() and curve.loc["anti", "no_drift"].all()
    p, holm = curve.loc["strong", "recency_ratio_p"], curve.loc["strong", "recency_ratio_p_holm"]
    assert (holm >= p).all() and (holm <= 1).all()


def test_the_uniform_drafter_says_uniform_everywhere(controls, tmp_path):
    cmp, s, out = controls
    sub = Comparison.of([read_trace(out)])
    sub.series = [x for x in sub.series if x.label == "uniform"]
    lines = answer(sub)
    assert len(lines) == 1 and "uniform attention" in lines[0]
    assert "sink" not in lines[0] and "drift:" not in lines[0]  # no float-noise findings
    row = next(x for x in short(sub) if x.startswith("uniform "))
    assert row.rstrip().endswith("uniform")
    r = cli("check", out, "--drafter", "uniform", "--rule", "self_lift_trend<=1", "--rule", "sink_lift_d1<=1")
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_in_short_arrow_disagrees_with_its_test(controls):
    cmp, s, _ = controls
    block = short(cmp)
    for name in CONTROLS:
        row = next(x for x in block if x.startswith(name + " "))
        for col in ("rms_growth", "recency_ratio"):
            v, p, ml = s.loc[name, col], s.loc[name, f"{col}_p"], s.loc[name, f"{col}_mean_log"]
            up = p < 0.05 and ml > 0 and v > 1 and abs(math.log(v)) >= math.log(FLAT)
            down = p < 0.05 and ml < 0 and v < 1 and abs(math.log(v)) >= math.log(FLAT)
            cell = f"x{v:.2f}" + ("↑" if up else "↓" if down else "·")
            assert cell in row, (name, col, cell, row)


def test_compare_json_carries_the_verdict_fields(controls):
    _, _, out = controls
    r = cli("compare", out, "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["summary"]
    need = {"drift_verdict", "recency_ratio", "recency_ratio_lo", "recency_ratio_hi", "recency_ratio_p",
            "sink_retention", "sink_retention_lo", "sink_retention_hi", "sink_retention_p"}
    for row in rows:
        assert need <= set(row), need - set(row)
        assert row["drift_verdict"] in {"drift", "no drift", "not established", "uniform"}


def _eager_rounds(t, d, ids):
    d.set_attn_impl("eager")
    eager = EagerRows(d)
    try:
        res = speculate(t, d, ids, depth=K, max_new_tokens=16, observers=[eager])
    finally:
        eager.h.remove()
        d.set_attn_impl("sdpa")
    return res, eager.rounds


def test_the_constructions_are_what_they_claim_on_eager_rows():
    """Distance alone: at depth k the own slot at distance j gets, relative to the prompt key at distance D, exactly
    what the depth-1 query gave the key at distance j relative to the one at distance D. Planted drift: at depth K
    the own slots draw more than the depth-1 query's K-1 most recent keys, and the sink draws less than at depth 1."""
    t = _target()
    ids = _prompts(1)[0]
    res, rounds = _eager_rounds(t, _drafter(t, "recency"), ids)
    for rec, rows in zip(res.rounds, rounds):
        n = rec.context_len
        p1, pk = rows[0].double(), rows[K - 1].double()  # [nh, n], [nh, n + K - 1]
        far = 20  # a prompt key at distance 20 from each query
        for j in range(K - 1):
            want = p1[:, n - 1 - j] / p1[:, n - 1 - far]
            got = pk[:, n + K - 2 - j] / pk[:, n + K - 2 - far]
            torch.testing.assert_close(got, want, rtol=1e-4, atol=0)
    res, rounds = _eager_rounds(t, _drafter(t, "strong"), ids)
    own = sum(float(r[K - 1][:, -(K - 1):].sum()) for r in rounds)
    matched = sum(float(r[0][:, -(K - 1):].sum()) for r in rounds)
    sink1 = sum(float(r[0][:, 0].sum()) for r in rounds)
    sink_k = sum(float(r[K - 1][:, 0].sum()) for r in rounds)
    assert own > 2 * matched and sink_k < 0.95 * sink1



def test_no_sink_retention_contrast_without_a_sink(tmp_path):
    """A sink-retention factor between two drafters is NaN where either has no depth-1 sink mass (noise / noise)."""
    from drifttool.trace.synthetic import write_trace

    rounds = {"accepted": [3] * 12, "prompt": [f"d{i % 6}" for i in range(12)]}
    sinkless = dict(rounds, sink_mass=np.tile(np.linspace(1e-5, 4e-5, 4), (12, 1)))
    withsink = dict(rounds, sink_mass=np.tile(np.linspace(0.5, 0.2, 4), (12, 1)))
    t = write_trace(tmp_path / "t.drift", {"eagle3": sinkless, "eagle3.1": withsink}, 4)
    ct = Comparison.of([read_trace(t)]).contrasts().set_index("quantity")
    assert ct.loc["sink_retention", "factor"] != ct.loc["sink_retention", "factor"]  # NaN: eagle3 has no sink
    assert np.isfinite(ct.loc["rms_growth", "factor"])
