"""Every shipped trace gives today's verdict (issue #62, item 2): each chain trace under sample_traces/ records the
recency-matched control the drift verdict reads, and each tree trace the tree's control, so no page, report or
`compare` of a shipped trace answers "not recorded in this trace; recapture". A trace written by an older schema
belongs in tests/data (the old-trace readers' fixtures), not among the samples users open."""

from __future__ import annotations

from pathlib import Path

import pytest

import drifttool as dt
from drifttool.analysis.tree_compare import tree_verdicts

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TRACES = sorted(p.parent for p in SAMPLES.glob("**/manifest.json"))


def test_the_samples_are_found():
    if not SAMPLES.is_dir():
        pytest.skip("sample traces not in this checkout")
    assert len(TRACES) >= 20, [str(p) for p in TRACES]


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(SAMPLES)) for p in TRACES])
def test_a_shipped_trace_holds_what_its_verdict_reads(path):
    t = dt.load(path)
    if t.is_tree:
        v = tree_verdicts([t.data])
    else:
        v = t.compare()
    assert len(v), path
    stale = v[v["drift_why"].astype(str).str.contains("not recorded")]
    assert stale.empty, f"{path.relative_to(SAMPLES)}: {stale['drift_why'].iloc[0]}"
    if not t.is_tree and t.manifest["capture"].get("depth", 0) >= 2:
        assert t.depths.loc[t.depths.depth >= 2, "matched_mass"].notna().any(), path
