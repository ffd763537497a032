"""Compact traces: a finished trace's shards merge into one file per table (one row group per shard),
atomically: a crash before the manifest commit leaves the sharded trace, after it a readable merged one; old
(schema 1) traces migrate on read and through `drifttool compact`; derived columns are computed on read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from drifttool.analysis.compare import Comparison
from drifttool.analysis.views import build_view, load_trace
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.trace import compact as compact_mod
from drifttool.trace.compact import compact_trace
from drifttool.trace.reader import read_manifest, read_table, read_trace
from drifttool.trace.schema import SCHEMA_VERSION, SUMMARIES
from drifttool.trace.summary import head_summary
from drifttool.trace.synthetic import write_trace
from drifttool.trace.writer import TraceWriter

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_dashboard.py"
DRAFTERS = {
    "e3": {
        "accepted": [2, 1, 0, 2, 3, 1],
        "self_mass": [0.1, 0.2, 0.3, 0.2, 0.1, 0.4],
        "prompt": ["p0", "p0", "p1", "p1", "p2", "p2"],
    },
    "e31": {"accepted": [1, 1, 2, 0, 3, 3], "prompt": ["p0", "p0", "p1", "p1", "p2", "p2"]},
}


def sharded(path: Path) -> Path:
    return write_trace(path, DRAFTERS, depth=3)


def tables(path: Path) -> dict[str, pd.DataFrame]:
    out = {n: read_table(path, n) for n in ("rounds", "depths", "heads", "head_summary")}
    out = {n: df.astype({"drafter": str, "prompt_id": str}) for n, df in out.items()}
    return {
        n: df.sort_values(list(df.columns[:4]), kind="stable").reset_index(drop=True) for n, df in out.items()
    }


def same(a: dict, b: dict) -> None:
    for n in a:
        pd.testing.assert_frame_equal(a[n], b[n], check_dtype=False, check_categorical=False, obj=n)


def test_compact_merges_to_one_file_per_table_and_reads_the_same(tmp_path):
    t = sharded(tmp_path / "x.drift")
    before = tables(t)
    files_before = sorted(p.name for p in t.rglob("*.parquet"))
    assert "part-00002.parquet" in files_before
    assert main(["compact", str(t)]) == 0
    m = read_manifest(t)
    assert m["schema_version"] == SCHEMA_VERSION and all(s["merged"] == 1 for s in m["shards"])
    for n in ("rounds", "depths", "heads", "head_summary"):
        files = sorted((t / n).iterdir())
        assert [f.name for f in files] == ["merged-001.parquet"], n
        pf = pq.ParquetFile(files[0])
        assert pf.num_row_groups == 3  # one per shard (prompt)
        assert pf.schema_arrow.metadata is None or b"pandas" not in pf.schema_arrow.metadata  # no pandas blob
    assert "self_mass" not in pq.read_schema(t / "depths" / "merged-001.parquet").names  # derived: not stored
    assert pq.read_schema(t / "depths" / "merged-001.parquet").field("prompt_id").type.value_type == "string"
    same(before, tables(t))
    d = read_table(t, "depths")
    np.testing.assert_allclose(d["self_mass"], d["draft_mass"] + d["own_mass"], atol=1e-7)
    assert isinstance(d["prompt_id"].dtype, pd.CategoricalDtype)
    assert list(d["prompt_id"].cat.categories) == sorted(d["prompt_id"].cat.categories)
    assert compact_trace(t)["files_after"] == len(
        [p for p in t.rglob("*") if p.is_file() and p.name != ".lock"]
    )


def test_summary_equals_heads_aggregate(tmp_path):
    t = sharded(tmp_path / "x.drift")
    h, r = read_table(t, "heads"), read_table(t, "rounds")
    keys = ["drafter", "prompt_id", "depth", "head"]
    s = (
        read_table(t, "head_summary").astype({"drafter": str, "prompt_id": str}).sort_values(keys)
    )  # per shard
    want = head_summary(h, r).astype({"drafter": str, "prompt_id": str}).sort_values(keys)
    pd.testing.assert_frame_equal(
        s.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False, check_categorical=False
    )
    g = h.astype({"drafter": str, "prompt_id": str}).groupby(keys)
    np.testing.assert_allclose(s["sink_mass_sum"], g["sink_mass"].sum().to_numpy(), rtol=1e-6)
    assert (s["n"] == g.size().to_numpy()).all()
    assert set(SUMMARIES["head_summary"]) == set(s.columns)


def test_crash_before_commit_leaves_sharded_trace(tmp_path, monkeypatch):
    t = sharded(tmp_path / "x.drift")
    before = tables(t)

    def boom(*a, **kw):
        raise KeyboardInterrupt  # Ctrl-C during the commit, before the manifest's rename

    monkeypatch.setattr(compact_mod, "write_json_atomic", boom)
    with pytest.raises(KeyboardInterrupt):
        compact_trace(t)
    monkeypatch.undo()
    assert "merged" not in json.dumps(read_manifest(t)["shards"])
    assert not list(t.rglob("*merged*"))  # staged files removed
    same(before, tables(t))


def test_crash_after_commit_is_readable_and_settled(tmp_path, monkeypatch):
    """kill -9 after the manifest commit, before deletes and renames: readers take the hidden merged files;
    the next compact (or --resume) finishes."""
    t = sharded(tmp_path / "x.drift")
    before = tables(t)
    monkeypatch.setattr(
        compact_mod, "settle", lambda *a, **kw: None
    )  # the process dies right after the commit
    compact_trace(t)
    monkeypatch.undo()
    assert (t / "depths" / ".merged-001.parquet.tmp").is_file() and (
        t / "depths" / "part-00000.parquet"
    ).is_file()
    same(before, tables(t))
    compact_trace(t)  # settles (renames, deletes the replaced shards), then merges again as generation 2
    assert sorted(p.name for p in (t / "depths").iterdir()) == ["merged-002.parquet"]
    same(before, tables(t))


def test_resume_after_compact_adds_shards_and_merges_again(tmp_path):
    t = sharded(tmp_path / "x.drift")
    m = json.loads((t / "manifest.json").read_text())
    m["identity"] = {"settings": "same"}  # what a capture records and --resume compares
    (t / "manifest.json").write_text(json.dumps(m))
    compact_trace(t)
    m = read_manifest(t)
    extra = write_trace(
        tmp_path / "extra.drift",
        {
            "e3": {"accepted": [1, 2], "prompt": ["p9", "p9"]},
            "e31": {"accepted": [0, 1], "prompt": ["p9", "p9"]},
        },
        depth=3,
    )
    add = {n: read_table(extra, n) for n in ("rounds", "depths", "heads", "prompts", "aux")}  # a shard as captured
    with TraceWriter(t, {"identity": m["identity"]}, resume=True) as w:
        w.add("p9", add)
        assert (t / "depths" / "part-00003.parquet").is_file()
        assert len(read_table(t, "rounds")) == 16  # merged (12) + one shard (4), read together
        w.finish()
    m2 = read_manifest(t)
    assert [s["merged"] for s in m2["shards"]] == [2] * 4
    assert sorted(p.name for p in (t / "rounds").iterdir()) == ["merged-002.parquet"]
    assert set(read_table(t, "rounds")["prompt_id"]) == {"p0", "p1", "p2", "p9"}


def test_schema1_trace_migrates(tmp_path, capsys):
    """A schema-1 trace (derived columns stored, no summary, tokenizer.json copy) reads as before and
    `drifttool compact` rewrites it; inconsistent stored derived columns are refused, not dropped."""
    t = sharded(tmp_path / "old.drift")
    for f in t.rglob("part-*.parquet"):  # rewrite as schema 1 did: pandas, with derived columns, no summary
        df = pd.read_parquet(f)
        if f.parent.name == "head_summary":
            f.unlink()
            continue
        if f.parent.name in ("depths", "heads"):
            df["self_mass"] = (df["draft_mass"] + df["own_mass"]).astype(np.float32)
            df["prompt_mass"] = (1 - df["sink_mass"] - df["draft_mass"] - df["own_mass"]).astype(np.float32)
        df.astype({c: str for c in ("drafter", "prompt_id") if c in df}).to_parquet(f, index=False)
    for p in list(t.glob("head_summary")):
        p.rmdir()
    m = json.loads((t / "manifest.json").read_text())
    m["schema_version"] = 1
    (t / "manifest.json").write_text(json.dumps(m))
    before = tables(t)  # head summary computed from heads on read
    bad = tmp_path / "bad.drift"
    shutil.copytree(t, bad)
    f = bad / "depths" / "part-00001.parquet"
    df = pd.read_parquet(f)
    df["self_mass"] = df["self_mass"] + 0.05
    df.to_parquet(f, index=False)
    assert main(["compact", str(bad)]) == 2
    assert "'self_mass' differs from its definition" in capsys.readouterr().err
    assert read_manifest(bad)["schema_version"] == 1  # unchanged
    assert main(["compact", str(t)]) == 0
    assert f"schema {SCHEMA_VERSION}" in capsys.readouterr().out
    same(before, tables(t))
    assert not (t / "head_summary" / "merged-001.parquet").stat().st_size == 0


def full(path: Path) -> Path:
    """A sharded synthetic trace with every table (prompts and aux too), as the dashboard needs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_dashboard", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write_synthetic(path, rows=1200, heads=2, prompts=3, compact=False)


def test_dashboard_view_same_before_and_after_compact(tmp_path):
    t = full(tmp_path / "x.drift")
    c = tmp_path / "c.drift"
    shutil.copytree(t, c)
    compact_trace(c)
    a, b = build_view([load_trace(t)]), build_view([load_trace(c)])
    for attr in ("summary", "per_depth", "head_means", "where"):
        x, y = getattr(a, attr), getattr(b, attr)
        pd.testing.assert_frame_equal(
            x.reset_index(drop=True),
            y.reset_index(drop=True),
            check_dtype=False,
            check_categorical=False,
            obj=attr,
        )
    ref = Comparison.of([read_trace(t)]).summary()
    pd.testing.assert_frame_equal(ref, Comparison.of([read_trace(c)]).summary(), check_dtype=False)


def test_damaged_merged_file_is_one_line(tmp_path, capsys):
    t = full(tmp_path / "x.drift")
    compact_trace(t)
    f = t / "rounds" / "merged-001.parquet"
    f.write_bytes(f.read_bytes()[:200])
    rc = main(["compare", str(t)])
    err = capsys.readouterr().err
    assert (
        rc == 2
        and "rounds/merged-001.parquet" in err
        and "corrupt or truncated" in err
        and len(err.strip().splitlines()) == 1
    )
    t2 = full(tmp_path / "y.drift")
    compact_trace(t2)
    load_trace(t2)
    (t2 / "heads" / "merged-001.parquet").unlink()  # never read by the first page, still checked at load
    with pytest.raises(DriftError, match="heads/merged-001.parquet: missing"):
        load_trace(t2)


def test_token_table_replaces_tokenizer_copy(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(20)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    t = sharded(tmp_path / "x.drift")
    tok.save(str(t / "tokenizer.json"))
    compact_trace(t)
    assert not (t / "tokenizer.json").exists()
    m = read_manifest(t)
    assert m["tokenizer"]["tokens"] == "tokens.parquet" and len(m["tokenizer"]["sha256"]) == 64
    from drifttool.analysis.views import token_decoder

    dec = token_decoder(read_trace(t))
    assert dec(0) == "w0"  # synth traces hold token id 0 only
    assert m["tokenizer"]["n_tokens"] == 1
    assert {"rounds", "depths", "heads", "head_summary"} <= {p.name for p in t.iterdir()}
