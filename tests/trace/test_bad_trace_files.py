"""No silent wrong numbers from a trace on disk: typed, range-checked tables, non-finite values as one note,
series identity, shards a plain Parquet reader sees only when committed (even after kill -9), every read confined
to the trace folder, sampled rows checked by `info`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import drifttool as dt
from drifttool.analysis.compare import Comparison
from drifttool.analysis.export import comparison_json
from drifttool.analysis.views import build_view, load_trace
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.trace.compact import compact_trace
from drifttool.trace.reader import read_manifest, read_table, read_trace
from drifttool.trace.synthetic import write_trace
from drifttool.trace.writer import TraceWriter

APP = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard"


def one_line_error(argv: list[str], capsys, *fragments: str) -> str:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def synth(path: Path, self_mass: float = 0.2, accepted=(2, 1, 0, 2)) -> Path:
    return write_trace(path, {"e3": {"accepted": list(accepted), "self_mass": self_mass}}, depth=3)


def rewrite(f: Path, edit) -> None:
    df = pd.read_parquet(f)
    edit(df)
    df.to_parquet(f, index=False)


# --- column types and value ranges -----------------------------------------------------------------------------

@pytest.mark.parametrize("column,edit,fragments", [
    ("sink_mass", lambda df: df.__setitem__("sink_mass", df["sink_mass"].astype(str)), ["'sink_mass'", "expected float"]),
    ("sink_mass", lambda df: df.__setitem__("sink_mass", -5.0), ["'sink_mass'", "-5.0", "expected [-0.0001"]),
    ("self_mass", lambda df: df.__setitem__("self_mass", 1.7), ["'self_mass'", "1.7"]),
    ("depth", lambda df: df.__setitem__("depth", 9), ["'depth'", "expected [1, 3]"]),
    ("match", lambda df: df.__setitem__("match", df["match"].astype(int)), ["'match'", "expected bool"]),
    ("sink_mass", lambda df: df.__setitem__("sink_mass", np.nan), ["'sink_mass'", "NaN/inf"]),
])
def test_bad_column_is_one_line(tmp_path, capsys, column, edit, fragments):
    t = synth(tmp_path / "x.drift")
    rewrite(t / "depths" / "part-00001.parquet", edit)
    frag = ["depths/part-00001.parquet", *fragments]
    with pytest.raises(DriftError) as e:
        read_table(t, "depths")
    assert all(f in str(e.value) for f in frag), str(e.value)
    one_line_error(["compare", t], capsys, *frag)
    # the regression gate no longer passes a rule on a mass of -5 (it exited 0 before)
    one_line_error(["check", t, "--rule", "sink_mass@depth1<=0.5"], capsys, *frag)


def test_rounds_accepted_beyond_depth(tmp_path, capsys):
    t = synth(tmp_path / "x.drift")
    rewrite(t / "rounds" / "part-00000.parquet", lambda df: df.__setitem__("accepted", 7))
    one_line_error(["compare", t], capsys, "rounds/part-00000.parquet", "'accepted'", "[0, 3]")


def test_rows_of_another_prompt_in_a_shard(tmp_path, capsys):
    """A shard file copied over another: its rows belong to a prompt the manifest lists elsewhere."""
    t = synth(tmp_path / "x.drift")
    shutil.copyfile(t / "depths" / "part-00000.parquet", t / "depths" / "part-00001.parquet")
    one_line_error(["compare", t], capsys, "depths/part-00001.parquet", "prompt 'p0'", "does not list")


def test_vllm_shard_keys(tmp_path):
    """The vllm engine keys shards DRAFTER:PROMPT while rows hold the bare prompt id: both read; a row of an
    unlisted prompt is still refused."""
    src = synth(tmp_path / "src.drift")
    tabs = {n: read_table(src, n) for n in ("rounds", "depths")}
    man = {"capture": {"depth": 3, "vllm": {"shard_key": "DRAFTER:PROMPT"}}, "drafters": [{"name": "e3"}],
           "target": {}, "identity": {}}
    with TraceWriter(tmp_path / "v.drift", man) as w:
        for p in ("p0", "p1"):
            w.add(f"e3:{p}", {n: t[t.prompt_id == p] for n, t in tabs.items()})
        w.finish(compact=False)
    assert len(read_table(tmp_path / "v.drift", "depths")) == len(tabs["depths"])
    shutil.copytree(tmp_path / "v.drift", tmp_path / "vc.drift")
    compact_trace(tmp_path / "vc.drift")  # merged: one file, still read with the bare prompt ids
    pd.testing.assert_frame_equal(read_table(tmp_path / "vc.drift", "depths"), read_table(tmp_path / "v.drift", "depths"))
    shutil.copyfile(tmp_path / "v.drift" / "depths" / "part-00000.parquet", tmp_path / "v.drift" / "depths" / "part-00001.parquet")
    with pytest.raises(DriftError, match="prompt 'p0'"):
        read_table(tmp_path / "v.drift", "depths")


@pytest.mark.parametrize("dup", ["shard", "prompt"])
def test_shard_listed_twice(tmp_path, capsys, dup):
    t = synth(tmp_path / "x.drift")
    m = json.loads((t / "manifest.json").read_text())
    before = Comparison.of([read_trace(t)]).summary()["drafts"].iloc[0]
    m["shards"].append(dict(m["shards"][0]) if dup == "shard" else {**m["shards"][0], "index": 1})
    (t / "manifest.json").write_text(json.dumps(m))
    one_line_error(["compare", t], capsys, "manifest.json", "twice")
    assert before == 4


def test_dashboard_skips_a_typed_bad_trace_and_keeps_the_others(dash_traces, tmp_path, monkeypatch):
    """One trace with string masses: one error line; Overview, Depth and Rejection still render the good one."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    bad = tmp_path / "strings.drift"
    shutil.copytree(dash_traces["b"], bad)
    rewrite(bad / "depths" / "merged-001.parquet", lambda df: df.__setitem__("sink_mass", df["sink_mass"].astype(str)))
    monkeypatch.setattr(sys, "argv", [str(APP / "app.py"), str(dash_traces["a"]), str(bad)])
    at = AppTest.from_file(str(APP / "app.py"), default_timeout=1800)
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] and all("strings.drift" in e.value and "'sink_mass'" in e.value
                                              for e in at.error)
    for page in ("overview", "depth", "rejection"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, page
        assert at.get("plotly_chart") or at.dataframe, page


# --- non-finite magnitudes: one note, no numpy warnings ---------------------------------------------------------

def test_nonfinite_magnitudes_are_one_note(tmp_path, capsys):
    t = synth(tmp_path / "x.drift")
    rewrite(t / "depths" / "part-00000.parquet", lambda df: df.__setitem__("rms_in", np.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any numpy RuntimeWarning fails the test
        cmp = Comparison.of([read_trace(t)])
        js = comparison_json(cmp)
    notes = [n for n in js["notes"] if "non-finite" in n]
    assert len(notes) == 1 and "depths.rms_in" in notes[0], js["notes"]
    assert main(["compare", str(t)]) == 0
    out = capsys.readouterr()
    assert out.out.count("non-finite") == 1 and "Warning" not in out.err, out


# --- series identity ---------------------------------------------------------------------------------------------

def test_same_named_traces_stay_apart(tmp_path, capsys):
    """a/x.drift and b/x.drift with the same drafter name: two series with their own numbers (they pooled)."""
    a = synth(tmp_path / "a" / "x.drift", self_mass=0.1)
    b = synth(tmp_path / "b" / "x.drift", self_mass=0.4)
    s = Comparison.of([read_trace(a), read_trace(b)]).summary().set_index("series")
    assert list(s.index) == ["a/x:e3", "b/x:e3"]
    # self mass 0.1 vs 0.4 at the same slot counts: self lifts in the ratio 4
    assert s.loc["b/x:e3", "self_lift"] / s.loc["a/x:e3", "self_lift"] == pytest.approx(4.0, rel=1e-5)
    assert s["drafts"].tolist() == [4, 4]


def test_dashboard_series_of_same_named_traces(dash_traces, tmp_path):
    """The dashboard's tables: two captures both in folders named a.drift keep four series."""
    for sub in ("p", "q"):
        shutil.copytree(dash_traces["a"], tmp_path / sub / "a.drift")
    m = json.loads((tmp_path / "q" / "a.drift" / "manifest.json").read_text())
    m["trace_id"] = "another-capture"
    (tmp_path / "q" / "a.drift" / "manifest.json").write_text(json.dumps(m))
    v = build_view([load_trace(tmp_path / sub / "a.drift") for sub in ("p", "q")])
    assert v.series == ["p/a:e3", "p/a:e31", "q/a:e3", "q/a:e31"]
    one = build_view([load_trace(tmp_path / "p" / "a.drift")]).summary.set_index("series")
    both = v.summary.set_index("series")
    assert both.loc["p/a:e3", "drafts"] == both.loc["q/a:e3", "drafts"] == one.loc["e3", "drafts"]


def test_same_trace_twice_is_refused(tmp_path, capsys):
    a = synth(tmp_path / "a" / "x.drift")
    one_line_error(["compare", a, a], capsys, "x.drift", "given twice")
    one_line_error(["compare", a, tmp_path / "a" / ".." / "a" / "x.drift"], capsys, "given twice")
    copy = tmp_path / "c" / "x.drift"
    shutil.copytree(a, copy)
    cmp = Comparison.of([read_trace(a), read_trace(copy)])  # a copy: its own series, and a note
    assert [s.label for s in cmp.series] == ["a/x:e3", "c/x:e3"]
    assert any("unchanged copy" in n for n in cmp.notes)
    with pytest.raises(DriftError, match="given twice"):
        dt.compare_many([a, a])


def test_dashboard_given_one_trace_twice(dash_traces, monkeypatch):
    """The same folder twice on the dashboard's command line: shown once, one error line, pages work."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    a = str(dash_traces["a"])
    monkeypatch.setattr(sys, "argv", [str(APP / "app.py"), a, a])
    at = AppTest.from_file(str(APP / "app.py"), default_timeout=1800)
    at.run()
    assert not at.exception and [e.value for e in at.error] == [f"Trace skipped: {a}: given twice; shown once"]
    at.switch_page("app_pages/overview.py").run()
    assert not at.exception and not at.error[1:]


# --- a reader without drifttool never sees uncommitted rows, even after kill -9 ----------------------------------

def test_kill_at_every_step_of_a_commit(tmp_path, monkeypatch):
    """Snapshot the folder right before and after every rename of a shard commit (exactly what kill -9 there
    leaves behind): pandas reading a table folder sees only committed prompts; drifttool reads every committed
    prompt; --resume settles the folder so pandas sees all of them."""
    src = synth(tmp_path / "src.drift")
    tabs = {n: read_table(src, n) for n in ("rounds", "depths")}
    snaps: list[Path] = []
    real = os.replace

    def spy(a, b, *args, **kw):
        if "x.drift" in str(b):
            snaps.append(tmp_path / f"snap{len(snaps):02d}.drift")
            shutil.copytree(tmp_path / "x.drift", snaps[-1])
        real(a, b, *args, **kw)
        if "x.drift" in str(b):
            snaps.append(tmp_path / f"snap{len(snaps):02d}.drift")
            shutil.copytree(tmp_path / "x.drift", snaps[-1])

    man = {"capture": {"depth": 3}, "drafters": [{"name": "e3"}], "target": {}, "identity": {"k": 1}}
    w = TraceWriter(tmp_path / "x.drift", man)
    w.add("p0", {n: t[t.prompt_id == "p0"] for n, t in tabs.items()})
    monkeypatch.setattr(os, "replace", spy)
    w.add("p1", {n: t[t.prompt_id == "p1"] for n, t in tabs.items()})
    monkeypatch.undo()
    w.finish()
    assert len(snaps) >= 6
    for s in snaps:
        committed = {p for sh in read_manifest(s)["shards"] for p in sh["prompts"]}
        for name in tabs:
            plain = set(pd.read_parquet(s / name)["prompt_id"])
            assert plain <= committed, (s.name, name, plain, committed)  # never an uncommitted prompt
            assert set(read_table(s, name)["prompt_id"]) == committed, (s.name, name)
        TraceWriter(s, man, resume=True).close()  # --resume settles the folder
        for name in tabs:
            assert set(pd.read_parquet(s / name)["prompt_id"]) == committed, (s.name, name)
        assert not list(s.rglob("*.tmp"))


# --- sampled rows and links -----------------------------------------------------------------------------------

def test_info_checks_sampled_rows(dash_traces, tmp_path, capsys):
    t = tmp_path / "a.drift"
    shutil.copytree(dash_traces["a"], t)
    (t / "rows" / "merged-001.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"broken")
    one_line_error(["info", t], capsys, "rows/merged-001.safetensors")
    (t / "rows" / "merged-001.safetensors").unlink()
    one_line_error(["info", t], capsys, "rows/merged-001.safetensors", "missing")


def test_link_swapped_in_after_load_is_refused(dash_traces, tmp_path):
    """The dashboard's trace was loaded and checked; then a rows/ file becomes a link outside the folder."""
    t = tmp_path / "a.drift"
    shutil.copytree(dash_traces["a"], t)
    lt = load_trace(t)
    idx = lt.rows_index()
    r = idx.iloc[0]
    lt.attention_row(r.drafter, r.prompt_id, int(r["round"]))  # fine before the swap
    f = lt.rows_file(int(r.shard))
    outside = tmp_path / "outside.safetensors"
    shutil.move(f, outside)
    f.symlink_to(outside)
    with pytest.raises(DriftError, match="outside the trace folder"):
        lt.attention_row(r.drafter, r.prompt_id, int(r["round"]))
    (t / "depths").rename(tmp_path / "depths")  # a whole table folder swapped for a link
    (t / "depths").symlink_to(tmp_path / "depths")
    with pytest.raises(DriftError, match="outside the trace folder"):
        read_table(t, "depths")


def test_drilldown_with_broken_rows_shows_one_error(dash_traces, tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    t = tmp_path / "a.drift"
    shutil.copytree(dash_traces["a"], t)
    files = list((t / "rows").glob("*.safetensors"))  # the merged file of a finished capture
    assert files
    for f in files:
        f.write_bytes(b"garbage")
    monkeypatch.setattr(sys, "argv", [str(APP / "app.py"), str(t)])
    at = AppTest.from_file(str(APP / "app.py"), default_timeout=1800)
    at.run()
    at.switch_page("app_pages/drilldown.py").run()
    assert not at.exception
    assert len(at.error) == 1 and "rows/merged-" in at.error[0].value, [e.value for e in at.error]
