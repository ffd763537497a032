"""Traces written before the key counts and the recent mass existed stay readable: the counts are derived from the
manifest's sink rule and the depth rows' positions, the recent mass reads as NaN, and the lifts follow from the
counts exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import drifttool as dt

# a shipped trace written before the counts existed (the generate-mode samples were recaptured with them)
SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "training" / "smollm2-ci-series.drift"


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample traces not in this checkout")
def test_an_older_sample_trace_reads_with_derived_counts_and_lifts():
    import pyarrow.parquet as pq

    stored = set(pq.read_schema(next((SAMPLE / "depths").glob("*.parquet"))).names)
    d = dt.load(SAMPLE).depths
    if "n_keys" in stored:
        pytest.skip("the sample trace stores its counts (recaptured)")
    ws = d["attn_window_start"] if "attn_window_start" in d else 0
    assert (d["n_keys"] == d["position"] - ws + 1).all()
    assert (d["n_self"] == d["depth"] - 1).all()
    assert d["recent_mass"].isna().all() and d["recent_lift"].isna().all()
    want = d["sink_mass"].astype(np.float64) * d["n_keys"] / d["n_sink"]
    np.testing.assert_allclose(d["sink_lift"], want, rtol=0, atol=1e-9)
    deep = d[d.depth >= 2]
    want = (deep["draft_mass"].astype(np.float64) + deep["own_mass"]).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(deep["self_lift"], want * deep["n_keys"] / deep["n_self"], rtol=1e-6, atol=0)
