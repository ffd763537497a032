"""Property-based fuzzing of what drifttool reads from disk: the trace reader (random bytes as manifest.json or as a
Parquet shard; valid manifests with fields deleted, retyped or given another schema_version) and the probe-suite
parser (random bytes, random lines, valid lines mutated). Whatever the input, the only exception allowed is
DriftError (the CLI's one-line exit-2 error); anything else would be a traceback for the user.

The base trace is built from hand-made round records (no model, no transformers import), so the module is fast."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from drifttool.analysis.views import build_view, load_trace
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.run.hooks import HEAD_FIELDS, RoundCapture
from drifttool.run.loop import RoundRecord
from drifttool.run.probes import load_suite
from drifttool.run.records import prompt_tables, row_samples
from drifttool.trace.key_counts import chain_counts
from drifttool.trace.reader import read_trace
from drifttool.trace.schema import KEY_COUNTS, TABLES
from drifttool.trace.sinks import SinkSpec
from drifttool.trace.writer import TraceWriter

BASE = settings(deadline=None, derandomize="DRIFT_FUZZ_EXAMPLES" not in os.environ, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def fuzz(n: int) -> settings:
    """n examples (fixed, derandomized: ~15 s for the module); DRIFT_FUZZ_EXAMPLES=500 explores at random."""
    return settings(BASE, max_examples=int(os.environ.get("DRIFT_FUZZ_EXAMPLES", n)))


K, HEADS, AUX = 2, 2, [1, 2, 3]


def _counts(ctx: int) -> np.ndarray:
    """Key counts that agree (each set no larger than the keys seen): every KEY_COUNTS column of a K-deep chain,
    counted by the capture's rules (a context of unknown tokens: no template slot)."""
    c = chain_counts(np.full(K, ctx), ctx - 1 + np.arange(K), np.zeros(K), SinkSpec(), ids=lambda n: np.full(n, -1))
    return np.stack([c[name] for name in KEY_COUNTS], -1).astype(np.int64)


def _prompt(name: str, rounds: int, rng: np.random.Generator) -> tuple[dict[str, pd.DataFrame], dict]:
    recs, caps = [], []
    for r in range(rounds):
        acc = int(rng.integers(0, K + 1))
        ctx = 5 + 2 * r
        recs.append(RoundRecord(round=r, context_len=ctx, draft_ids=[3, 4], target_ids=[3, 5], accepted=acc,
                                match=[True, False], bonus=6, input_ids=[2, 3], draft_s=0.01, verify_s=0.02))
        caps.append(RoundCapture(round=r, context_len=ctx, heads=rng.random((K, HEADS, len(HEAD_FIELDS))).astype(np.float32) / 4,
                                 hidden=rng.random((K, 7)).astype(np.float32), aux=rng.random((3, 3)).astype(np.float32),
                                 row=rng.random((K, ctx + K)).astype(np.float16), slot_tokens=list(range(ctx + K - 1)),
                                 counts=_counts(ctx)))
    tabs = prompt_tables("e3", name, recs, caps, AUX, 2048)
    tabs["prompts"] = pd.DataFrame([{"drafter": "e3", "prompt_id": name, "tags": "t", "prompt_len": 5,
                                     "n_generated": rounds * 2, "n_rounds": rounds, "accepted_total": 1,
                                     "mean_acceptance_length": 1.5, "wall_s": 0.1}])
    idx, rows = row_samples("e3", name, caps[:1])
    tabs["rows_index"] = idx
    return tabs, rows


# The manifest of a two-prompt synthetic trace (also used by test_interrupt_guard).
MANIFEST = {"target": {"path": "t", "num_layers": 4, "hidden_size": 8, "aux_layer_ids": AUX, "config_hash": "t"},
            "drafters": [{"name": "e3", "layout": "speculators", "variant": "eagle3", "flags": {"fc_norm": False},
                          "overrides": {}, "assumptions": {"rope": "x"}, "config_hash": "d",
                          "max_position_embeddings": 2048, "rope_scaling": None}],
            "capture": {"depth": K, "mode": "generate", "sink": {"first_n": 4, "positions": [], "token_ids": []},
                        "seed": 0, "dtype": "float32", "probes": {"path": "p.jsonl", "sha256": "x", "n_prompts": 2}},
            "settings_hash": "h"}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    w = TraceWriter(root / "base.drift", MANIFEST)
    rng = np.random.default_rng(0)
    for i, n in enumerate((3, 2)):
        w.add(f"p{i}", *_prompt(f"p{i}", n, rng))
    w.finish(compact=False)  # shards: the fuzzers rewrite part files
    return w.path


def consume(path: Path, deep: bool = False) -> None:
    """Everything a user does with a trace: read it, every table, the sampled rows, `info`, the dashboard
    loader (and, with `deep`, the comparison statistics, `compare` and `check`). Must raise nothing but DriftError."""
    t = read_trace(path)
    for name in TABLES:
        t.table(name)
    for r in t.rows_index().itertuples():
        t.attention_row(r.drafter, r.prompt_id, r.round)
    for argv in (["info", str(path)], ["info", str(path), "--json"]):
        rc = main(argv)
        assert rc in (0, 2), (argv, rc)
        if rc == 2:
            return
    lt = load_trace(path)
    if deep:
        v = build_view([lt])
        v.summary, v.per_depth, v.head_means, v.aux_summary  # noqa: B018
        for argv in (["compare", str(path)], ["check", str(path), "--rule", "al>=1", "--rule", "self_mass@depth2<=1"]):
            assert main(argv) in (0, 1, 2), argv


def resume(path: Path) -> None:
    """`capture --resume` on the trace: one more shard through the writer, then read back."""
    m = json.loads((path / "manifest.json").read_text())
    w = TraceWriter(path, {"settings_hash": m.get("settings_hash") if isinstance(m, dict) else None}, resume=True)
    w.add("new", *_prompt("new", 1, np.random.default_rng(1)))
    w.finish(compact=False)  # shards: the fuzzers rewrite part files
    read_trace(path).table("rounds")


def attempt(fn, *a, **kw) -> None:
    try:
        fn(*a, **kw)
    except DriftError as e:
        msg = str(e)
        assert msg and "\n" not in msg, repr(msg)


@pytest.fixture
def work(base, tmp_path):
    """A fresh copy of the base trace per example (hypothesis reuses the function-scoped tmp_path)."""
    def fresh() -> Path:
        d = tmp_path / "t.drift"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        return d
    return fresh


def test_base_trace_is_valid(base, capsys):
    consume(base, deep=True)
    assert "complete" in capsys.readouterr().out


# --- manifest.json -------------------------------------------------------------------------------------------

@fuzz(30)
@given(blob=st.binary(max_size=300))
@example(blob=b"[" * 50_000)  # nesting beyond the JSON parser's recursion limit
@example(blob=b'{"schema_version": 1' + b"1" * 5000 + b"}")  # int beyond Python's digit limit
@example(blob=b"\xff\xfe{}")
def test_random_bytes_as_manifest(work, blob, capsys):
    d = work()
    (d / "manifest.json").write_bytes(blob)
    attempt(consume, d)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=8)
    | st.sampled_from(["[/x]", "[bold", "\n", "../x"]),  # rich markup, newlines, paths
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=6)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_manifest(draw, manifest: dict):
    m = copy.deepcopy(manifest)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(m) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = m
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["delete", "retype", "schema"]))
        if op == "schema":
            m["schema_version"] = draw(st.integers(-2, 5) | json_values)
        elif op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    return m


@fuzz(16)
@given(data=st.data())
def test_mutated_manifest(base, work, data, capsys):
    valid = json.loads((base / "manifest.json").read_text())
    m = data.draw(mutated_manifest(valid))
    d = work()
    (d / "manifest.json").write_text(json.dumps(m))
    attempt(consume, d, deep=True)
    attempt(resume, d)


# --- Parquet shards ------------------------------------------------------------------------------------------

@fuzz(20)
@given(table=st.sampled_from([*TABLES, "rows_index"]), blob=st.binary(max_size=300), keep=st.integers(0, 4000),
       mode=st.sampled_from(["random", "truncate", "flip"]))
def test_random_bytes_as_parquet_shard(work, table, blob, keep, mode, capsys):
    d = work()
    f = d / table / "part-00000.parquet"
    good = f.read_bytes()
    if mode == "random":
        bad = blob
    elif mode == "truncate":
        bad = good[: keep % max(1, len(good))]
    else:  # overwrite a stretch in the middle (footer kept: the reader gets as far as decoding pages)
        at = keep % max(1, len(good) - len(blob))
        bad = good[:at] + blob + good[at + len(blob):]
    f.write_bytes(bad)
    attempt(consume, d)


@fuzz(8)
@given(table=st.sampled_from(list(TABLES)), col=st.integers(0, 30),
       value=st.sampled_from(["text", None, 1.5, True, -7]))
def test_valid_parquet_with_wrong_columns(work, table, col, value, capsys):
    """A well-formed Parquet shard whose columns are missing or of another type."""
    d = work()
    f = d / table / "part-00001.parquet"
    df = pd.read_parquet(f)
    name = df.columns[col % len(df.columns)]
    if col % 2:
        df = df.drop(columns=[name])
    else:
        df[name] = value
    df.to_parquet(f, index=False)
    attempt(consume, d, deep=True)


# --- probe suites --------------------------------------------------------------------------------------------

def _load(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "probes.jsonl"
    p.write_bytes(data)
    attempt(load_suite, p)


@fuzz(60)
@given(blob=st.binary(max_size=400))
@example(blob=b'{"id": "a", "token_ids": [' * 30_000)
@example(blob=b'{"id": "a", "max_new_tokens": ' + b"9" * 5000 + b', "text": "x"}')
@example(blob=b'{"id": "a", "source": {"file": "a\\u0000b"}}')
@example(blob=b'{"id": "a", "source": {"stdlib_module": "\\u0000"}}')
@example(blob=b'{"id": "a", "source": {"stdlib_module": "../../nope"}}')
def test_random_bytes_as_probe_suite(tmp_path, blob):
    _load(tmp_path, blob)


@fuzz(40)
@given(lines=st.lists(st.text(max_size=60), max_size=6))
def test_random_lines_as_probe_suite(tmp_path, lines):
    _load(tmp_path, "\n".join(lines).encode("utf-8", "surrogatepass"))


VALID = [{"id": "a", "text": "hello", "tags": ["x"], "max_new_tokens": 4},
         {"id": "b", "token_ids": [1, 2, 3], "cut": [2, 3], "keep": "end"},
         {"id": "c", "messages": [{"role": "user", "content": "hi"}]},
         {"id": "d", "source": {"stdlib_module": "difflib"}, "cut": 5}]


@fuzz(40)
@given(data=st.data())
def test_mutated_probe_lines(tmp_path, data):
    lines = []
    for obj in copy.deepcopy(VALID):
        m = data.draw(mutated_manifest(obj)) if data.draw(st.booleans()) else obj
        lines.append(json.dumps(m))
    _load(tmp_path, "\n".join(lines).encode())
