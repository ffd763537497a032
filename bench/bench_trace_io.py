"""Trace I/O: write and read throughput of a 1M-row `depths` table through TraceWriter / read_table.

The rows are shaped by the library's own `records.prompt_tables` from synthetic round records and
captures (random values, K=8), then written as shards the way a capture writes them (one shard per
prompt, manifest committed after each) and read back with `read_table` (validated, concatenated).

    python bench/bench_trace_io.py             # 1M rows in 20 shards, 3 repetitions
    python bench/bench_trace_io.py --smoke
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import median, print_table

from drifttool.run.attention_stats import Gathered, key_counts
from drifttool.run.hooks import HEAD_FIELDS, RoundCapture
from drifttool.run.loop import RoundRecord
from drifttool.run.records import prompt_tables
from drifttool.trace import TraceWriter, read_table
from drifttool.trace.key_sets import TailSlots

K = 8


def depths_shard(rounds: int, seed: int = 0):
    """A `depths` table of rounds x K rows, shaped by prompt_tables (one head: the heads table stays small)."""
    rng = np.random.default_rng(seed)
    recs, caps = [], []
    for r in range(rounds):
        ids = rng.integers(0, 2048, 2 * K).tolist()
        acc = int(rng.integers(0, K + 1))
        recs.append(RoundRecord(round=r, context_len=512 + 2 * r, draft_ids=ids[:K], target_ids=ids[K:],
                                accepted=acc, match=[j < acc for j in range(K)], bonus=ids[0],
                                input_ids=ids[K:]))
        heads = rng.random((K, 1, len(HEAD_FIELDS)), dtype=np.float32)
        heads[..., [HEAD_FIELDS.index(f) for f in ("sink_mass", "draft_mass", "own_mass")]] /= 3  # sink, draft, own: a distribution's masses (sum <= 1), as the reader checks
        n = 512 + 2 * r  # key counts that agree with each other (the reader checks them): 4 sinks, 32 recent
        sets = [np.arange(4), np.arange(n - 32, n), np.zeros(0, dtype=np.int64)]
        caps.append(RoundCapture(round=r, context_len=n, heads=heads,
                                 hidden=rng.random((K, 7), dtype=np.float32),
                                 aux=rng.random((3, 3), dtype=np.float32), counts=key_counts(Gathered.of(n, sets, TailSlots.chain(K)))))
    return prompt_tables("eagle3", "p", recs, caps, [1, 2, 3], 2048)["depths"]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rows, a.shards, a.reps = 20_000, 2, 1
    per = a.rows // a.shards // K
    base = depths_shard(per)
    rows = len(base) * a.shards
    manifest = {"drafters": [{"name": "eagle3"}], "capture": {"depth": K, "bench": "trace_io"}}
    t_write, t_read, t_cols, size = [], [], [], 0
    with tempfile.TemporaryDirectory(prefix="drift-io-") as tmp:
        for rep in range(a.reps):
            path = Path(tmp) / f"io{rep}.drift"
            t0 = time.perf_counter()
            w = TraceWriter(path, manifest)
            for s in range(a.shards):
                w.add(f"p{s}", {"depths": base.assign(prompt_id=f"p{s}")})
            w.finish()
            t_write.append(time.perf_counter() - t0)
            size = sum(f.stat().st_size for f in (path / "depths").glob("*.parquet"))
            t0 = time.perf_counter()
            df = read_table(path, "depths")
            t_read.append(time.perf_counter() - t0)
            assert len(df) == rows
            t0 = time.perf_counter()
            read_table(path, "depths", columns=["depth", "self_mass"])
            t_cols.append(time.perf_counter() - t0)
            if rep < a.reps - 1:
                shutil.rmtree(path)
    mb = size / 2**20
    table = [[name, f"{median(t):.3f}", f"{rows / median(t) / 1e6:.2f}", f"{mb / median(t):.1f}"]
             for name, t in (("write (TraceWriter.add x shards)", t_write), ("read_table, all columns", t_read),
                             ("read_table, 2 columns", t_cols))]
    print(f"# trace I/O: {rows:,} depths rows ({len(base.columns)} columns) in {a.shards} shards, "
          f"{mb:.1f} MiB of Parquet on disk; median of {a.reps}")
    print_table(["operation", "seconds", "M rows/s", "MiB/s (on disk)"], table)
    wr, rd = rows / median(t_write), rows / median(t_read)
    print(f"SUMMARY trace_io: write {wr / 1e6:.2f} M rows/s, read {rd / 1e6:.2f} M rows/s "
          f"({rows:,} depths rows, {mb:.1f} MiB)")
    return {"write_rows_s": wr, "read_rows_s": rd, "rows": rows}


if __name__ == "__main__":
    main()
