"""Traces written before the key counts and the recent mass existed stay readable: the counts are derived from the
manifest's sink rule and the depth rows' positions, the recent mass reads as NaN, and the lifts follow from the
counts exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import drifttool as dt

# a trace written before the counts existed: the checkpoint series once shipped in sample_traces/training (the
# samples users open were all recaptured with today's schema; tests/faces/test_shipped_traces_current.py)
SAMPLE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "smollm2-ci-series-old.drift"


def test_an_older_sample_trace_reads_with_derived_counts_and_lifts():
    import pyarrow.parquet as pq

    stored = set(pq.read_schema(next((SAMPLE / "depths").glob("*.parquet"))).names)
    d = dt.load(SAMPLE).depths
    assert "n_keys" not in stored  # the fixture is the old schema
    ws = d["attn_window_start"] if "attn_window_start" in d else 0
    assert (d["n_keys"] == d["position"] - ws + 1).all()
    assert (d["n_self"] == d["depth"] - 1).all()
    assert d["recent_mass"].isna().all() and d["recent_lift"].isna().all()
    want = d["sink_mass"].astype(np.float64) * d["n_keys"] / d["n_sink"]
    np.testing.assert_allclose(d["sink_lift"], want, rtol=0, atol=1e-9)
    deep = d[d.depth >= 2]
    want = (deep["draft_mass"].astype(np.float64) + deep["own_mass"]).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(deep["self_lift"], want * deep["n_keys"] / deep["n_self"], rtol=1e-6, atol=0)
