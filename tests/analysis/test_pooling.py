"""Pooling series across traces (analysis.pooling): one series per drafter over every trace, prompt ids and groups
kept distinct per drafter, and new tables: the Comparison given is not edited (the docs' generator once pooled by
rewriting a Comparison's tables in place)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from drifttool.analysis.compare import Comparison
from drifttool.analysis.pooling import by_drafter, pool_by_drafter
from drifttool.trace import read_trace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_pooled_series_per_drafter_and_the_input_untouched():
    cmp = Comparison.of([read_trace(SAMPLES / f"smollm2-{s}.drift") for s in ("short_chat", "agent_traces")])
    before = {k: getattr(cmp, k).copy() for k in ("rounds", "depths")}
    labels = set(cmp.rounds["series"].astype(str))
    assert all(":" in s for s in labels)  # one drafter name in two traces: trace-prefixed series

    pooled = pool_by_drafter(cmp)

    for k, df in before.items():  # the given Comparison's tables are the same objects, unchanged
        pd.testing.assert_frame_equal(getattr(cmp, k), df)
    assert pooled.series is cmp.series and pooled.notes is cmp.notes
    drafters = set(cmp.rounds["drafter"].astype(str))
    for k in ("rounds", "depths"):
        got, was = getattr(pooled, k), getattr(cmp, k)
        assert got is not was and list(got.columns) == list(was.columns) and len(got) == len(was)
        assert set(got["series"]) == drafters
        assert (got["prompt_id"] == was["prompt_id"].astype(str) + "|" + was["drafter"].astype(str)).all()
        assert (got["group"] == was["group"].astype(str) + "|" + was["drafter"].astype(str)).all()
    # one series per drafter now holds both traces' rounds
    n = cmp.rounds.groupby(cmp.rounds["drafter"].astype(str)).size()
    assert pooled.rounds.groupby("series").size().to_dict() == n.to_dict()


def test_by_drafter_on_a_table_without_groups():
    df = pd.DataFrame({"drafter": pd.Categorical(["a", "b"]), "prompt_id": pd.Categorical(["p1", "p1"]),
                       "series": ["t1:a", "t2:b"], "x": [1.0, 2.0]})
    out = by_drafter(df)
    assert out["series"].tolist() == ["a", "b"] and out["prompt_id"].tolist() == ["p1|a", "p1|b"]
    assert "group" not in out and df["series"].tolist() == ["t1:a", "t2:b"]
