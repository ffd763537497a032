"""The paired statistics behind every verdict, recomputed from the raw Parquet with numpy/scipy on synthetic traces:
a planted depth effect is detected, no effect gives no detection and the right MDE, a clustered sample gives a group
bootstrap CI wider than the prompt-level one, and the prefix-correct population equals a hand count."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from drifttool.analysis import stats
from drifttool.analysis.compare import Comparison
from drifttool.analysis.metrics import bootstrap_ratio
from drifttool.cli import main
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace

K = 4
N_GROUPS = 10
PROMPTS_PER_GROUP = 2
ROUNDS = 6


def _spec(rng: np.random.Generator, effect: float, noise: float = 0.01) -> tuple[dict, dict[str, str]]:
    """Rounds of N_GROUPS groups x 2 prompts x 6 rounds; sink mass = group level + effect * (depth - 1) + noise."""
    prompts, sink, acc = [], [], []
    groups = {}
    for g in range(N_GROUPS):
        level = rng.uniform(0.05, 0.15)
        slope = effect + rng.normal(0, noise)  # each group's own change per depth
        for j in range(PROMPTS_PER_GROUP):
            pid = f"doc{g}@{512 * (j + 1)}"
            groups[pid] = f"doc{g}"
            for _ in range(ROUNDS):
                prompts.append(pid)
                sink.append(level + slope * np.arange(K) + rng.normal(0, 0.002, K))
                acc.append(int(rng.integers(0, K + 1)))
    return {"accepted": acc, "prompt": prompts, "context": np.full(len(acc), 300), "sink_mass": np.array(sink)}, groups


def _raw(path: Path, table: str) -> pd.DataFrame:
    files = sorted((path / table).glob("*.parquet"))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True).astype({"prompt_id": str, "drafter": str})


def _groups(path: Path) -> dict[str, str]:
    p = _raw(path, "prompts")
    return dict(zip(p.prompt_id.astype(str), p.group.astype(str)))


def _group_changes(path: Path, drafter: str, metric: str, d_from: int, d_to: int) -> np.ndarray:
    """Independent: per group, mean of the metric over its rows at d_to minus the same at d_from."""
    d = _raw(path, "depths")
    d = d[d.drafter.astype(str) == drafter]
    g = d.prompt_id.map(_groups(path))
    m = d.assign(group=g).groupby(["group", "depth"])[metric].mean().unstack()
    return (m[d_to] - m[d_from]).to_numpy()


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stats")
    rng = np.random.default_rng(7)
    a, groups = _spec(rng, effect=0.01)
    b, _ = _spec(rng, effect=0.0)
    return {"planted": write_trace(root / "planted.drift", {"e3": a}, K, groups=groups),
            "null": write_trace(root / "null.drift", {"e3": b}, K, groups=groups),
            "both": write_trace(root / "both.drift", {"e3": a, "e31": b}, K, groups=groups)}


def _trend(path: Path, population: str = "all", metric: str = "sink_mass", depth: int = K) -> pd.Series:
    tr = Comparison.of([read_trace(path)]).trends()
    return tr[(tr.population == population) & (tr.metric == metric) & (tr.depth == depth)].iloc[0]


def test_planted_depth_effect_is_detected_and_recomputes(traces):
    r = _trend(traces["planted"])
    x = _group_changes(traces["planted"], "e3", "sink_mass", 1, K)
    assert r.n_groups == N_GROUPS == len(x) and r.n_prompts == N_GROUPS * PROMPTS_PER_GROUP
    assert r.change == pytest.approx(x.mean(), abs=1e-9)
    lo, hi = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
    assert (r.change_lo, r.change_hi) == pytest.approx((lo, hi), abs=1e-9)
    perm = sps.permutation_test((x,), np.mean, permutation_type="samples", alternative="two-sided", n_resamples=np.inf)
    assert r.p == pytest.approx(perm.pvalue, abs=1e-9)  # scipy's exact sign-flip test
    assert r.p < 0.05 and r.verdict == "rise" and r.change == pytest.approx(0.03, abs=0.01)


def test_no_effect_gives_no_detection_and_the_right_mde(traces):
    r = _trend(traces["null"])
    x = _group_changes(traces["null"], "e3", "sink_mass", 1, K)
    n, sd = len(x), x.std(ddof=1)
    # the sign-flip test's own MDE (tests/analysis/test_signflip_power.py checks its power by simulation)
    want = stats.mde(sd, n)
    assert r.mde == pytest.approx(want, rel=1e-9) and r.sd == pytest.approx(sd, rel=1e-9)
    assert want == pytest.approx(stats.SIGNFLIP_MDE[n] * sd if n in stats.SIGNFLIP_MDE else
                                 (sps.t.ppf(0.975, n - 1) + sps.t.ppf(0.8, n - 1)) * sd / np.sqrt(n), rel=1e-9)
    assert r.p >= 0.05 and r.verdict == "no change detected" and r.mde < r.base_value


def test_too_few_groups_are_underpowered_whatever_the_effect(tmp_path):
    rng = np.random.default_rng(1)
    a, groups = _spec(rng, effect=0.05)
    keep = [i for i, p in enumerate(a["prompt"]) if groups[p] in ("doc0", "doc1", "doc2")]
    a = {k: np.asarray(v)[keep] for k, v in a.items()}
    path = write_trace(tmp_path / "three.drift", {"e3": a}, K, groups=groups)
    r = _trend(path)
    assert r.n_groups == 3 and r.p == pytest.approx(0.25)  # 2 / 2^3: no test over 3 groups reaches 0.05
    assert r.mde == np.inf and r.verdict == "underpowered"
    assert stats.min_p(5) > 0.05 >= stats.min_p(6)


def test_group_bootstrap_is_wider_than_the_naive_one_on_clustered_prompts(tmp_path):
    rng = np.random.default_rng(3)
    acc, prompts, groups = [], [], {}
    for g in range(8):  # 8 documents x 6 cuts: cuts of one document share its acceptance level
        p_doc = rng.uniform(0.05, 0.95)
        for j in range(6):
            pid = f"doc{g}@{j}"
            groups[pid] = f"doc{g}"
            for _ in range(5):
                prompts.append(pid)
                acc.append(int(rng.binomial(K, p_doc)))
    path = write_trace(tmp_path / "clustered.drift", {"e3": {"accepted": acc, "prompt": prompts}}, K, groups=groups)
    s = Comparison.of([read_trace(path)]).summary().iloc[0]
    r = _raw(path, "rounds")
    # independent: the same seeded multinomial bootstrap over groups, and the naive one over prompts
    for unit, want_wider in (("group", True), ("prompt_id", False)):
        key = r.prompt_id.map(groups) if unit == "group" else r.prompt_id
        g = r.assign(u=key).groupby("u")["accepted"].agg(["sum", "count"]).sort_index()
        est, lo, hi = bootstrap_ratio(g["sum"].to_numpy(), g["count"].to_numpy())
        if want_wider:
            assert (1 + lo, 1 + hi) == pytest.approx((s.al_lo, s.al_hi))  # what compare reports: the group CI
            group_width = hi - lo
        else:
            naive_width = hi - lo
    assert group_width > 1.3 * naive_width and s.groups == 8 and s.prompts == 48


def test_prefix_correct_population_equals_a_hand_count(traces):
    cmp = Comparison.of([read_trace(traces["planted"])])
    pc = cmp.per_depth(population="prefix_correct").set_index("depth")
    r = _raw(traces["planted"], "rounds")
    for d in range(1, K + 1):
        hand = int((r.accepted >= d - 1).sum())  # every earlier draft accepted
        assert pc.loc[d, "n_rounds"] == hand
    tr = cmp.trends()
    row = tr[(tr.population == "prefix_correct") & (tr.metric == "sink_mass") & (tr.depth == K)].iloc[0]
    assert row.n_rounds == int((r.accepted >= K - 1).sum())
    # teacher-forced: every depth is on the true prefix, so the two populations are the same rounds
    d = cmp.depths
    from drifttool.analysis.stats import population_mask

    assert population_mask(d, "prefix_correct", "teacher-forced").all()


def test_drafter_difference_of_changes_is_paired_over_groups(traces):
    cmp = Comparison.of([read_trace(traces["both"])])
    td = cmp.trend_differences()
    r = td[(td.population == "all") & (td.metric == "sink_mass") & (td.depth == K) & (td.series == "e31")].iloc[0]
    x = _group_changes(traces["both"], "e31", "sink_mass", 1, K) - _group_changes(traces["both"], "e3", "sink_mass",
                                                                                    1, K)
    assert r.difference == pytest.approx(x.mean(), abs=1e-9) and r.n_groups == N_GROUPS
    assert r.p < 0.05 and r.verdict == "fall"  # e31 has no planted rise: its change is smaller
    ad = cmp.acceptance_differences().iloc[0]
    rr = _raw(traces["both"], "rounds")
    al = rr.assign(g=rr.prompt_id.map(_groups(traces["both"]))).groupby(["drafter", "g"])["accepted"].mean() + 1
    diff = (al.loc["e31"] - al.loc["e3"]).to_numpy()
    assert ad.difference == pytest.approx(diff.mean(), abs=1e-9) and ad.n_groups == N_GROUPS


def test_check_rule_on_a_depth_trend(traces, capsys):
    assert main(["check", str(traces["planted"]), "--rule", f"sink_mass@depth{K}-depth1<=0.01", "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    r = rep["rules"][0]
    x = _group_changes(traces["planted"], "e3", "sink_mass", 1, K)
    assert r["value"] == pytest.approx(x.mean()) and r["n_groups"] == N_GROUPS and r["p"] < 0.05
    assert main(["check", str(traces["null"]), "--rule", f"sink_mass@depth{K}-depth1<=0.01"]) == 0
    capsys.readouterr()
    assert main(["check", str(traces["null"]), "--rule", "sink_mass@depth2-depth2<=0.01"]) == 2
    assert "two different depths" in capsys.readouterr().err


def test_plan_inverts_the_mde(traces, capsys):
    assert main(["plan", str(traces["null"]), "--metric", f"sink_mass@depth{K}-depth1", "--effect", "0.002",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)[0]
    n = r["groups_needed"]
    assert stats.mde(r["sd"], n) <= 0.002 < stats.mde(r["sd"], n - 1) or n == 6
    assert r["n_groups"] == N_GROUPS and r["mde_now"] == pytest.approx(stats.mde(r["sd"], N_GROUPS))
    assert stats.groups_needed(1.0, 1e9) == 6  # never fewer than the sign-flip test needs


def test_compare_on_a_sample_trace_prints_mde_and_prefix_correct_n(capsys):
    import re

    trace = Path(__file__).resolve().parents[2] / "sample_traces" / "smollm2-long_code.drift"
    assert main(["compare", str(trace)]) == 0
    text = capsys.readouterr().out
    assert "MDE" in text and "underpowered" in text and "groups (source documents)" in text
    rounds = read_trace(trace).rounds
    block = text[text.index("Per depth: acceptance"):text.index("Per depth: change")]
    rows = re.findall(r"^(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s", block, re.M)
    assert len(rows) == 8 * rounds["drafter"].nunique()
    for depth, series, n, pc in rows:
        r = rounds[rounds.drafter.astype(str) == series]
        assert int(n) == len(r) and int(pc) == int((r.accepted >= int(depth) - 1).sum())


def test_entropy_carries_its_own_n(tmp_path):
    """--full-every N: entropy exists on full rounds only; its n is theirs, not every round's."""
    from drifttool import plots

    n = 48
    ent = np.full((n, K), np.nan)
    ent[::4] = 2.0  # every 4th round is a full round: 12 of 48
    path = write_trace(tmp_path / "fe.drift", {"e3": {"accepted": [1] * n, "entropy": ent}}, K)
    pdp = Comparison.of([read_trace(path)]).per_depth()
    assert (pdp["n_rounds"] == n).all() and (pdp["n_entropy"] == 12).all()
    assert plots.N_COLUMN["entropy"] == "n_entropy"
    fig = plots.metric_by_depth(pdp, ["entropy"], "entropy")
    assert any("only n=" in (t.hovertemplate or "") for t in fig.data)  # 12 < 20 rounds: drawn as small-n


def test_series_of_another_probe_suite_are_not_paired(tmp_path):
    """The same group id in another suite is another document: no group-by-group pairing across suites."""
    rng = np.random.default_rng(5)
    a, groups = _spec(rng, effect=0.01)
    b, _ = _spec(rng, effect=0.0)
    pa = write_trace(tmp_path / "a.drift", {"e3": a}, K, groups=groups)
    pb = write_trace(tmp_path / "b.drift", {"e31": b}, K, groups=groups)
    m = json.loads((pb / "manifest.json").read_text())
    m["capture"]["probes"] = {"sha256": "another-suite"}
    (pb / "manifest.json").write_text(json.dumps(m))
    cmp = Comparison.of([read_trace(pa), read_trace(pb)])
    assert cmp.acceptance_differences().empty and cmp.trend_differences().empty
    assert any("mixed probe suites" in n for n in cmp.notes)
    same = Comparison.of([read_trace(pa), read_trace(write_trace(tmp_path / "c.drift", {"e31": b}, K, groups=groups))])
    assert len(same.acceptance_differences()) == 1


def test_prefix_correct_change_is_within_the_same_rounds():
    """A metric constant along each round's chain, but higher in rounds that survive (it tracks acceptance):
    no round changes with depth, so no depth trend. Comparing all rounds' depth 1 with the survivors' depth 3
    (what the trend did before) reads a rise of about 0.1 here."""
    rng = np.random.default_rng(3)
    rows = []
    for g in range(12):
        for r in range(20):
            survive = int(rng.integers(1, 4))  # the chain is correct up to this depth
            value = 1.0 + 0.1 * survive + rng.normal(0, 0.01)
            for d in range(1, 4):
                rows.append({"series": "s", "group": f"g{g}", "prompt_id": f"g{g}-p", "round": r, "depth": d,
                             "reached": d <= survive, "rms_in": value})
    depths = pd.DataFrame(rows)
    tr = stats.depth_trends(depths, "generate", metrics=("rms_in",), populations=("prefix_correct",))
    at3 = tr[tr.depth == 3].iloc[0]
    assert abs(at3["change"]) < 1e-12 and at3["verdict"] == "no change detected"
    assert at3["base_value"] == pytest.approx(1.3, abs=0.01)  # the survivors' own depth-1 value
    naive = depths[depths.reached & (depths.depth == 3)].rms_in.mean() - depths[depths.depth == 1].rms_in.mean()
    assert naive > 0.05
    st = stats.change_between(depths[depths.reached], "rms_in", 1, 3)
    assert abs(st["mean"]) < 1e-12 and st["n"] == 12


def test_in_short_names_pooled_and_per_group_acceptance_apart(tmp_path):
    """Groups with unequal rounds: the pooled AL (the summary table's) and the mean of per-group ALs differ; the
    "In short" sentence gives the pooled one as "acceptance length" and the per-group means as such (it printed
    the per-group mean as the acceptance length)."""
    from drifttool.analysis.report_stats import findings

    prompts, acc_a, acc_b, groups = [], [], [], {}
    for g in range(8):
        n = 2 if g % 2 else 30  # long groups with low acceptance, short ones with high
        pid = f"doc{g}"
        groups[pid] = pid
        for _ in range(n):
            prompts.append(pid)
            acc_a.append(0 if n == 30 else 4)
            acc_b.append(1 if n == 30 else 4)
    spec = lambda acc: {"accepted": acc, "prompt": prompts, "context": np.full(len(acc), 300)}  # noqa: E731
    t = write_trace(tmp_path / "t.drift", {"eagle3": spec(acc_a), "eagle3.1": spec(acc_b)}, K, groups=groups)
    cmp = Comparison.of([read_trace(t)])
    al = cmp.summary().set_index("series")["mean_acceptance_length"]
    ad = cmp.acceptance_differences().iloc[0]
    pooled = (f"acceptance length {al[ad.series]:.2f} vs {al[ad.baseline]:.2f} (pooled over rounds); "
              f"per group {ad.base_value + ad.difference:.2f} vs {ad.base_value:.2f} on average")
    assert abs(al[ad.baseline] - ad.base_value) > 1.0  # 1.25 pooled vs 3.0 per group
    assert any(pooled in f for f in findings(cmp))
