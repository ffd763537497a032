"""Where heads look hardest: argmax slots categorised against the round's context length, shares per depth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from drifttool.analysis.where_attention import attention_targets, categorise, top_positions


def test_categorise_boundaries():
    n = np.full(7, 100)
    t = np.array([0, 1, 3, 4, 84, 99, 100])
    assert list(categorise(t, n)) == ["pos0", "early", "early", "other", "recent", "recent", "self"]
    # a short context: early wins over recent, pos0 over both
    assert list(categorise(np.array([0, 2, 5]), np.array([6, 6, 6]))) == ["pos0", "early", "recent"]


def test_shares_and_top_positions():
    rounds = pd.DataFrame({"series": "s", "drafter": "d", "prompt_id": "p", "round": [0, 1], "context_len": [50, 60]})
    heads = pd.DataFrame({
        "series": "s", "drafter": "d", "prompt_id": "p", "round": [0, 0, 1, 1, 0, 0, 1, 1],
        "depth": [1, 1, 1, 1, 2, 2, 2, 2], "head": [0, 1] * 4,
        "max_prob": [1.0, 0.5, 0.9, 0.7, 0.2, 0.4, 0.6, 0.8],
        "top_pos": [0, 0, 0, 59, 50, 51, 60, 3],
    })
    w = attention_targets(heads, rounds).set_index("depth")
    assert w.loc[1, "pos0"] == 0.75 and w.loc[1, "recent"] == 0.25 and w.loc[1, "n"] == 4
    assert w.loc[2, "self"] == 0.75 and w.loc[2, "early"] == 0.25
    np.testing.assert_allclose(w.loc[1, "max_prob"], 0.775)
    top = top_positions(heads, rounds, depth=1)
    assert top.iloc[0].slot == "pos 0" and top.iloc[0].share == 0.75 and top.iloc[1].slot == "ctx-1"


def test_old_traces_without_columns_give_empty():
    rounds = pd.DataFrame({"drafter": "d", "prompt_id": "p", "round": [0], "context_len": [5]})
    heads = pd.DataFrame({"drafter": "d", "prompt_id": "p", "round": [0], "depth": [1], "head": [0]})
    assert attention_targets(heads, rounds).empty


def test_notebook_and_json_carry_where(tmp_path):
    """End to end on a real capture: the notebook view and compare --json report where heads look."""
    import drifttool as dt
    from drifttool.model.tiny import tiny_drafter, tiny_target

    target = tiny_target(vocab=64, hidden=32, max_pos=256)
    d = tiny_drafter(target)
    with dt.capture(d, target, depth=3) as live:
        live.run(list(range(1, 40)), max_new_tokens=8)
    w = dt.load(live.to_trace(tmp_path / "t.drift")).where()
    assert not w.empty and set(w["depth"]) == {1, 2, 3}
    cats = ["pos0", "early", "recent", "self", "other"]
    np.testing.assert_allclose(w[cats].sum(axis=1), 1.0)
    assert (w.loc[w.depth == 1, "self"] == 0).all()  # depth 1 has no draft slot to look at


def test_counts_sum_to_the_same_shares():
    """The dashboard keeps per-prompt counts; summing them gives exactly attention_targets' shares."""
    from drifttool.analysis.where_attention import from_counts, prompt_counts

    rng = np.random.default_rng(0)
    n = 400
    rounds = pd.DataFrame({"drafter": "d", "prompt_id": np.repeat(["a", "b"], 10), "round": np.tile(np.arange(10), 2),
                           "context_len": rng.integers(20, 200, 20)})
    pick = rng.integers(0, 20, n)
    heads = pd.DataFrame({"drafter": "d", "prompt_id": rounds.prompt_id.to_numpy()[pick],
                          "round": rounds["round"].to_numpy()[pick], "depth": rng.integers(1, 4, n),
                          "head": rng.integers(0, 4, n), "max_prob": rng.random(n), "top_pos": rng.integers(0, 210, n)})
    direct = attention_targets(heads.assign(series="d"), rounds.assign(series="d"))
    summed = from_counts(prompt_counts(heads, rounds).assign(series="d"))
    pd.testing.assert_frame_equal(direct.reset_index(drop=True)[summed.columns], summed, check_names=False,
                                  check_dtype=False)


def test_where_plot_builder(tmp_path):
    from drifttool import plots

    w = pd.DataFrame({"series": ["eagle3", "eagle3", "eagle3.1"], "depth": [1, 2, 1], "pos0": [0.5, 0.2, 0.1],
                      "early": 0.0, "recent": [0.3, 0.3, 0.5], "self": [0.0, 0.4, 0.0], "other": [0.2, 0.1, 0.4],
                      "max_prob": [0.6, 0.5, 0.4], "n": 10})
    fig = plots.where_attention(w)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 10 and {t.name for t in bars} == {"pos0", "early", "recent", "self", "other"}
    assert "not recorded" in plots.where_attention(pd.DataFrame()).layout.annotations[0].text
