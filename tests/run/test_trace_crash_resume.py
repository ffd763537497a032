"""A capture killed mid-run (a real `python -m drifttool.cli capture` subprocess, SIGINT or SIGTERM after its
first shard) exits 130 with one line and leaves a readable trace marked partial; `--resume` finishes it and
the result equals an uninterrupted capture, table for table (wall-clock columns aside). Every table is plain
Parquet that pandas reads as a folder without drifttool."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from drifttool.cli import main
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace import writer as writer_mod
from drifttool.trace.reader import read_manifest, read_table, read_trace
from drifttool.trace.schema import DERIVED, STORED, TABLES
from drifttool.trace.sinks import SinkSpec
from drifttool.trace.writer import TraceWriter
from tests.support.capture import build_models, child_env, prompt, write_probes

DEPTH = 3
N_PROMPTS = 4
WALL = ("wall_s", "draft_s", "verify_s", "prefill_s")  # wall-clock columns: differ run to run


SIGNALS = {"int": signal.SIGINT, "term": signal.SIGTERM}


# The real CLI in a child, whose trace writer waits (up to 5 min) after committing its first shard, so the signal
# always lands on a run that is still going: on an idle machine the tiny run otherwise finished before the
# parent, busy building the reference, got to look (CI saw rc 0 instead of 130).
PAUSED_CLI = """
import sys, time
from drifttool.trace.writer import TraceWriter
_add = TraceWriter.add
def add(self, *a, **k):
    _add(self, *a, **k)
    if len(self.manifest["shards"]) == 1:
        time.sleep(300)
TraceWriter.add = add
from drifttool.cli import main
sys.exit(main(sys.argv[1:]))
"""


def start_capture(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PAUSED_CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Starts the two captures to interrupt (SIGINT / SIGTERM) at once, then builds the uninterrupted
    reference in-process while they start up (interpreter start-up dominates on this shared machine)."""
    root = tmp_path_factory.mktemp("crash")
    paths = build_models(root)
    # a quick first prompt (the first shard lands fast), then long ones (the signal lands mid-prompt)
    probes = [{"id": "p0", "token_ids": prompt(0, 10), "max_new_tokens": 2, "tags": ["quick"]},
              {"id": "p1", "token_ids": prompt(1, 12), "max_new_tokens": 1}]  # no drafting round at all
    probes += [{"id": f"p{i}", "token_ids": prompt(i, 14), "max_new_tokens": 32} for i in range(2, N_PROMPTS)]
    suite = write_probes(root / "probes.jsonl", probes)
    drafters = [f"e3={paths['eagle3']}", f"e31={paths['eagle31']}?norm_output=false"]
    args = {}
    for name in SIGNALS:
        a = ["capture", "--target", paths["target"], "--probes", suite, "--out", root / f"{name}.drift",
             "--depth", DEPTH, "--quiet"]
        for d in drafters:
            a += ["--drafter", d]
        args[name] = [str(x) for x in a]
    procs = {name: start_capture(a) for name, a in args.items()}
    try:
        ref = run_capture(str(paths["target"]), [DrafterSpec.parse(d) for d in drafters], str(suite),
                          str(root / "ref.drift"), depth=DEPTH, progress=False, sink=SinkSpec.parse("auto"))
        yield {"root": root, "ref": ref, "args": args, "procs": procs,
               "out": {name: root / f"{name}.drift" for name in SIGNALS}}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def shards(trace: Path) -> int:
    try:
        return len(json.loads((trace / "manifest.json").read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def interrupt_when_first_shard(setup) -> dict[str, tuple[int, str]]:
    """Send each capture its signal as soon as its manifest lists one shard; return {name: (rc, stderr)}."""
    pending = dict(setup["procs"])
    deadline = time.monotonic() + 300
    while pending:
        for name, proc in list(pending.items()):
            if shards(setup["out"][name]) >= 1:
                proc.send_signal(SIGNALS[name])
                del pending[name]
            elif proc.poll() is not None:
                pytest.fail(f"capture {name} ended (rc {proc.returncode}) before its first shard: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no shard appeared in time for {sorted(pending)}")
        time.sleep(0.01)
    out = {}
    for name, proc in setup["procs"].items():
        _, err = proc.communicate(timeout=1800)
        out[name] = (proc.returncode, err)
    return out


def assert_partial(trace: Path, err: str, rc: int, min_shards: int) -> int:
    assert rc == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]  # --quiet: one line, no loading bars, no traceback
    assert len(lines) == 1 and "interrupted" in lines[0] and "--resume" in lines[0], err
    m = read_manifest(trace)
    assert m["status"] == "partial"
    n = len(m["shards"])
    assert min_shards <= n < N_PROMPTS, "the run finished before the signal landed"
    assert m["counts"]["prompts"] == n == len(m["prompts_done"])
    for name in TABLES:  # every listed shard readable, and nothing unlisted lying around
        read_table(trace, name)
        assert len(list((trace / name).glob("part-*.parquet"))) == n
    assert not list(trace.rglob(".*.tmp"))
    return n


def tables_equal(a: Path, b: Path) -> None:
    def load(trace: Path, name: str) -> pd.DataFrame:
        df = read_table(trace, name) if name in TABLES else read_trace(trace).rows_index()
        return df.drop(columns=[c for c in WALL if c in df])

    for name in [*TABLES, "rows_index"]:
        x, y = load(a, name), load(b, name)
        assert len(x) > 0, name
        pd.testing.assert_frame_equal(x.reset_index(drop=True), y.reset_index(drop=True), check_exact=True,
                                      obj=name)


def test_interrupt_resume_equals_uninterrupted(setup, capsys):
    results = interrupt_when_first_shard(setup)
    for name, (rc, err) in results.items():
        out = setup["out"][name]
        assert_partial(out, err, rc, 1)

        # `drifttool info` on the partial trace
        assert main(["info", str(out)]) == 0
        text = capsys.readouterr().out
        assert "partial" in text and "all listed shards readable" in text
        assert main(["info", str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "partial"

        # a partial trace is plain Parquet too: keep a copy for the pandas check below
        shutil.copytree(out, setup["root"] / f"partial-{name}.drift")

        # resume finishes it (in-process: `main` is what `python -m drifttool.cli` runs)
        assert main([*setup["args"][name], "--resume"]) == 0
        assert "trace written" in capsys.readouterr().out
        m = read_manifest(out)
        assert m["status"] == "complete"
        assert m["prompts_done"] == [f"p{i}" for i in range(N_PROMPTS)]
        ref = read_manifest(setup["ref"])
        for key in ("counts", "capture", "drafters", "settings_hash", "prompts_done", "shards", "schema_version"):
            assert m[key] == ref[key], key
        tables_equal(out, setup["ref"])
        # sampled attention rows (safetensors) identical too
        t, tr = read_trace(out), read_trace(setup["ref"])
        idx = t.rows_index()
        assert len(idx) > 0
        for row in idx.itertuples():
            a, sa = t.attention_row(row.drafter, row.prompt_id, row.round)
            b, sb = tr.attention_row(row.drafter, row.prompt_id, row.round)
            np.testing.assert_array_equal(a, b)
            assert sa == sb


PANDAS_ONLY = r"""
import json, sys
from pathlib import Path
import pandas as pd
out = {}
for trace in sys.argv[1:]:
    p = Path(trace)
    m = json.loads((p / "manifest.json").read_text())
    out[p.name] = {"status": m["status"], "tables": {}}
    for name in ["prompts", "rounds", "depths", "heads", "aux", "rows_index", "head_summary"]:
        df = pd.read_parquet(p / name)
        out[p.name]["tables"][name] = [len(df), sorted(df.columns)]
assert not any(k == "drifttool" or k.startswith("drifttool.") for k in sys.modules), "drifttool was imported"
print(json.dumps(out))
"""


def test_pandas_reads_trace_folders_without_drifttool(setup):
    """Runs after the resume test (same module): the finished trace, the reference and the partial copy."""
    traces = [setup["ref"], *sorted(setup["root"].glob("partial-*.drift"))]
    traces += [p for p in setup["out"].values() if (p / "manifest.json").is_file()]
    r = subprocess.run([sys.executable, "-c", PANDAS_ONLY, *map(str, traces)], capture_output=True, text=True,
                       timeout=1800, env=child_env(), cwd=setup["root"])
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    for trace in traces:
        g = got[trace.name]
        for name, (n, cols) in g["tables"].items():
            want = read_table(trace, name) if name != "rows_index" else read_trace(trace).rows_index()
            if "shard" not in cols:  # a merged rows_index stores each row's shard; a shard's own file does not
                want = want.drop(columns="shard", errors="ignore")
            assert n == len(want), (trace.name, name)
            derived = DERIVED.get(name, {})  # computed on read, not stored (schema 2)
            assert cols == sorted(c for c in want.columns if c not in derived), (trace.name, name)
            if name in TABLES:
                assert set(STORED[name]) <= set(cols)
    for name in SIGNALS:
        if f"partial-{name}.drift" in got:
            assert got[f"partial-{name}.drift"]["status"] == "partial"


def test_interrupt_mid_shard_leaves_no_unlisted_files(tmp_path, monkeypatch):
    """Ctrl-C while a shard's tables are being written: earlier files of that shard are removed."""
    w = TraceWriter(tmp_path / "x.drift", {"capture": {}, "drafters": []})
    df = pd.DataFrame({c: [1] for c in TABLES["prompts"]})
    w.add("a", {"prompts": df})
    calls = {"n": 0}
    orig = writer_mod.write_parquet

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return orig(*a, **kw)

    monkeypatch.setattr(writer_mod, "write_parquet", flaky)
    with pytest.raises(KeyboardInterrupt):
        w.add("b", {"prompts": df, "rounds": pd.DataFrame({c: [1] for c in TABLES["rounds"]})})
    monkeypatch.undo()
    files = sorted(p.relative_to(w.path).as_posix() for p in w.path.rglob("*") if p.is_file())
    assert files == [".lock", "manifest.json", "prompts/part-00000.parquet"]  # .lock: the writer's lock file
    assert read_manifest(w.path)["prompts_done"] == ["a"]
