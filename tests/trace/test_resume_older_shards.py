"""A trace resumed by a newer drifttool holds shards with and without the columns added in between (the matched
and window masses, the recent / template key counts). Read together, each missing column takes the type of the
shards that have it (NaN for a float, null otherwise): a float64 NaN column beside float32 shards made the whole
trace unreadable ("Field matched_mass has incompatible types") after `capture --resume` had exited 0."""

from __future__ import annotations

import pyarrow.parquet as pq

from drifttool.trace.reader import read_trace
from drifttool.trace.schema import ADDED
from drifttool.trace.synthetic import write_trace


def test_shards_before_and_after_an_added_column_read_together(tmp_path):
    path = write_trace(tmp_path / "t.drift", {"d": {"accepted": [1, 2, 3, 1], "prompt": ["a", "a", "b", "b"]}},
                       depth=4)
    old = sorted((path / "depths").glob("*.parquet"))[0]  # one shard as an older drifttool wrote it
    for table in ("depths", "heads"):
        f = sorted((path / table).glob("*.parquet"))[0]
        t = pq.read_table(f)
        pq.write_table(t.drop_columns([c for c in ADDED[table] if c in t.column_names]), f)
    assert "matched_mass" not in pq.read_schema(old).names
    tr = read_trace(path)
    d = tr.table("depths")
    h = tr.table("heads")
    newer = sorted((path / "depths").glob("*.parquet"))[1]
    want = pq.read_schema(newer).field("matched_mass").type.to_pandas_dtype()
    assert d["matched_mass"].dtype == want and h["matched_mass"].dtype == want  # the newer shards' type
    first = sorted(d.prompt_id.astype(str).unique())[0]
    assert d.loc[d.prompt_id.astype(str) == first, "matched_mass"].isna().all()
    assert d.loc[(d.prompt_id.astype(str) != first) & (d.depth >= 2), "matched_mass"].notna().all()
    # an added key count the older shard lacks reads as unknown (as for a wholly older trace), never as a number
    assert d.loc[d.prompt_id.astype(str) == first, "n_recent"].isna().all()
    assert (d.loc[d.prompt_id.astype(str) != first, "n_recent"] >= 0).all()
