"""`drifttool compare --json` on small real traces, and the acceptance definitions of metrics.acceptance()
on hand-made accepted counts (vLLM mean acceptance length and per-position rate, EAGLE n-alpha, draft
acceptance rate, the i.i.d. estimate), with bootstrap CIs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from drifttool.analysis.compare import DEPTH_METRICS, PREDICTORS, Comparison
from drifttool.analysis.metrics import acceptance, bootstrap_ratio, cluster_mean
from drifttool.cli import main
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace.reader import read_trace
from tests.support.capture import build_models, prompt, write_probes

K = 3


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    p = build_models(root)
    suite = write_probes(root / "probes.jsonl", [
        {"id": "short", "token_ids": prompt(1, 8), "tags": ["chat"]},
        {"id": "mid", "token_ids": prompt(2, 20), "tags": ["code"]},
        {"id": "long", "token_ids": prompt(3, 130), "tags": ["code"]},  # a second context bucket
    ])
    kw = {"depth": K, "max_new_tokens": 14, "progress": False}
    out = {
        "a": run_capture(str(p["target"]), [DrafterSpec.parse(f"eagle3={p['eagle3']}")], str(suite),
                         str(root / "a.drift"), **kw),
        "b": run_capture(str(p["target"]), [DrafterSpec.parse(f"eagle31={p['eagle31']}")], str(suite),
                         str(root / "b.drift"), **kw),
        # sampled verification: accepted != (draft == target argmax), so definitions can't lean on `match`
        "sampled": run_capture(str(p["target"]), [DrafterSpec.parse(f"e3={p['eagle3']}"),
                                                  DrafterSpec.parse(f"e31={p['eagle31']}")],
                               str(suite), str(root / "s.drift"), temperature=1.0, **kw),
    }
    return out


def test_compare_json(traces, capsys):
    assert main(["compare", str(traces["a"]), str(traces["b"]), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    for key in ("summary", "per_depth", "by_context", "predictors"):
        assert isinstance(j[key], list) and j[key], key
    assert [s["label"] for s in j["series"]] == ["eagle3", "eagle31"]
    assert {r["series"] for r in j["summary"]} == {"eagle3", "eagle31"}
    per = {(r["series"], r["depth"]) for r in j["per_depth"]}
    assert per == {(s, d) for s in ("eagle3", "eagle31") for d in range(1, K + 1)}
    for r in j["per_depth"]:
        for m in (*DEPTH_METRICS, "acceptance_rate"):
            assert m in r and f"{m}_lo" in r and f"{m}_hi" in r
        if r["depth"] == 1:
            assert r["self_mass"] == 0 and r["draft_mass"] == 0 and r["own_mass"] == 0
    assert {r["context_bucket"] for r in j["by_context"]} == {"0-127", "128-255"}
    assert {(r["series"], r["depth"]) for r in j["by_context"]} == per
    assert {r["metric"] for r in j["predictors"]} <= set(PREDICTORS)
    assert {r["series"] for r in j["predictors"]} == {"eagle3", "eagle31"}
    assert {r["depth"] for r in j["predictors"]} <= set(range(1, K + 1))
    for r in j["predictors"]:
        assert 0 <= r["acceptance"] <= 1 and r["n"] > 0 and r["lo"] <= r["hi"]

    # the summary agrees with the trace's own rounds table (vLLM definitions)
    for s in j["summary"]:
        t = read_trace(traces["a" if s["series"] == "eagle3" else "b"])
        acc = t.rounds["accepted"].to_numpy()
        assert s["prompts"] == 3 and s["drafts"] == len(acc)
        assert s["mean_acceptance_length"] == pytest.approx(1 + acc.mean())
        # three groups: no bootstrap CI (analysis.metrics.MIN_CLUSTERS = 6)
        assert s["groups"] == 3 and s["al_lo"] is None and s["al_hi"] is None
        assert s["per_position_rate"] == pytest.approx([(acc >= i).mean() for i in range(1, K + 1)])
        assert s["draft_acceptance_rate"] == pytest.approx(acc.sum() / (len(acc) * K))
        assert s["self_lift_lo"] is None and s["self_lift_trend_hi"] is None and s["sink_lift_d1_lo"] is None


def test_compare_text_report(traces, capsys):
    assert main(["compare", str(traces["a"]), str(traces["b"])]) == 0
    out = capsys.readouterr().out
    assert "eagle3" in out and "eagle31" in out


@pytest.mark.parametrize("which", ["a", "sampled"])
def test_per_depth_matches_definitions(traces, which):
    """per_depth's acceptance_rate / n_alpha pool chains exactly like acceptance() does, greedy or sampled."""
    cmp = Comparison.of([read_trace(traces[which])])
    per = cmp.per_depth()
    for s in cmp.summary().itertuples():
        rows = per[per.series == s.series].sort_values("depth")
        np.testing.assert_allclose(rows["acceptance_rate"], s.per_position_rate, atol=1e-12)
        np.testing.assert_allclose(rows["n_alpha"], s.n_alpha, atol=1e-12)
    if which == "sampled":  # the case that tells `accepted` from `match` actually occurs
        d = cmp.depths
        assert (d["accepted"] & ~d["match"]).any()


# -- acceptance definitions on hand-made counts --------------------------------------------------------
def test_acceptance_hand_made():
    a = acceptance(np.array([0, 1, 2, 3, 3]), 3)
    assert a["drafts"] == 5
    assert a["mean_acceptance_length"] == pytest.approx(1 + 9 / 5)
    assert a["per_position_rate"] == pytest.approx([4 / 5, 3 / 5, 2 / 5])
    assert a["n_alpha"] == pytest.approx([4 / 5, 3 / 4, 2 / 3])
    assert a["draft_acceptance_rate"] == pytest.approx(9 / 15)
    assert a["iid_p"] == pytest.approx(9 / (5 + 4 + 3))  # accepted / depths reached
    assert a["iid_acceptance_length"] == pytest.approx(1 + 0.75 + 0.75**2 + 0.75**3)


def test_iid_estimate_differs_when_acceptance_is_not_independent():
    # bimodal chains: all-or-nothing. Measured AL 2.5; the i.i.d. model with p = 6/8 says 2.734375.
    a = acceptance(np.array([0, 0, 3, 3]), 3)
    assert a["mean_acceptance_length"] == pytest.approx(2.5)
    assert a["iid_p"] == pytest.approx(0.75)
    assert a["iid_acceptance_length"] == pytest.approx(2.734375)
    assert a["n_alpha"] == pytest.approx([0.5, 1.0, 1.0])
    assert a["per_position_rate"] == pytest.approx([0.5, 0.5, 0.5])
    # and a case where they agree: with K = 1 the i.i.d. model is exact
    b = acceptance(np.array([0, 1, 1, 0, 1]), 1)
    assert b["iid_acceptance_length"] == pytest.approx(b["mean_acceptance_length"]) == pytest.approx(1.6)


def test_acceptance_edges():
    assert acceptance(np.array([], dtype=int), 4) == {"drafts": 0}
    full = acceptance(np.array([2, 2, 2]), 2)
    assert full["iid_acceptance_length"] == full["mean_acceptance_length"] == 3.0
    assert full["per_position_rate"] == [1.0, 1.0] and full["n_alpha"] == [1.0, 1.0]
    none = acceptance(np.array([0, 0]), 3)
    assert none["mean_acceptance_length"] == 1.0 and none["iid_acceptance_length"] == 1.0
    assert none["per_position_rate"] == [0.0, 0.0, 0.0]
    assert none["n_alpha"][0] == 0.0 and all(math.isnan(x) for x in none["n_alpha"][1:])
    assert none["draft_acceptance_rate"] == 0.0


def test_bootstrap_ci_contains_estimate():
    est, lo, hi = bootstrap_ratio(np.array([3, 5, 2, 8, 1, 4]), np.array([4, 4, 4, 4, 2, 4]))
    assert est == pytest.approx(23 / 22)
    assert lo < est < hi
    assert bootstrap_ratio(np.array([3, 5, 2, 8, 1, 4]), np.array([4, 4, 4, 4, 2, 4])) == (est, lo, hi)  # seeded
    # five clusters: no interval (MIN_CLUSTERS); the estimate stands
    e5, l5, h5 = bootstrap_ratio(np.array([3, 5, 2, 8, 1]), np.array([4, 4, 4, 4, 2]))
    assert e5 == pytest.approx(19 / 18) and math.isnan(l5) and math.isnan(h5)
    e1, l1, h1 = bootstrap_ratio(np.array([3.0]), np.array([4.0]))
    assert e1 == 0.75 and math.isnan(l1) and math.isnan(h1)  # one prompt: no interval
    assert all(math.isnan(x) for x in bootstrap_ratio(np.array([0.0]), np.array([0.0])))
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = rng.integers(6, 14)
        counts = rng.integers(1, 30, n)
        sums = rng.binomial(counts, rng.uniform(0.1, 0.9))
        est, lo, hi = bootstrap_ratio(sums, counts, n_boot=300)
        assert lo <= est <= hi


def test_cluster_mean_is_pooled_ratio():
    import pandas as pd

    df = pd.DataFrame({"prompt_id": ["a", "a", "a", "b", "c", "c", "d", "e", "f"],
                       "depth": [1, 1, 2, 1, 1, 2, 1, 1, 1], "x": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]})
    out = cluster_mean(df, "x", ["depth"]).set_index("depth")
    assert out.loc[1, "x"] == pytest.approx(4 / 7) and out.loc[2, "x"] == pytest.approx(1 / 2)
    assert out.loc[1, "x_lo"] <= out.loc[1, "x"] <= out.loc[1, "x_hi"]  # six prompts at depth 1: a CI
    assert math.isnan(out.loc[2, "x_lo"])  # two at depth 2: none


def test_mixed_probe_suites_make_one_note_not_one_per_trace():
    from types import SimpleNamespace

    from drifttool.analysis.compare import suite_notes

    def fake(suite, sha):
        return SimpleNamespace(manifest={"capture": {"probes": {"path": f"probes/{suite}.jsonl", "sha256": sha}}})

    same = [fake("long_code", "a"), fake("long_code", "a")]
    assert suite_notes(same) == []
    mixed = [fake(s, s) for s in ("long_code", "doc_qa", "short_chat", "agent_traces")] * 2
    notes = suite_notes(mixed)
    assert len(notes) == 1 and "8 traces cover 4 suites" in notes[0]
    assert "long_code (2 traces)" in notes[0] and "doc_qa (2 traces)" in notes[0]


def test_acceptance_under_another_rejection_method_is_not_compared(tmp_path):
    """Issue #63 item 8: every trace records the rejection method it was verified under (`capture.rejection`);
    compare refuses to pair acceptance across methods (vLLM's synthetic or other samplers against the standard
    one), in one line naming the field."""
    import json

    import pytest

    from drifttool.analysis.compare import Comparison
    from drifttool.errors import DriftError
    from drifttool.trace.reader import read_trace
    from drifttool.trace.synthetic import write_trace

    paths = [write_trace(tmp_path / f"{n}.drift", {"e3": {"accepted": [1, 2, 0, 3]}}, depth=3) for n in "ab"]
    man = json.loads((paths[1] / "manifest.json").read_text())
    man["capture"]["rejection"] = "probabilistic"
    (paths[1] / "manifest.json").write_text(json.dumps(man))
    first = json.loads((paths[0] / "manifest.json").read_text())
    first["capture"]["rejection"] = "standard"
    (paths[0] / "manifest.json").write_text(json.dumps(first))
    with pytest.raises(DriftError, match="capture.rejection 'probabilistic' differs") as e:
        Comparison.of([read_trace(p) for p in paths])
    assert "\n" not in str(e.value)
