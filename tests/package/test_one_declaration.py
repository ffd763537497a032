"""A new drafter flag is one row of model/flags.py: added here at run time (no other file touched), it is read,
overridden, saved and reloaded in every layout that can express it, varied by conform and reported by conformance.
Before the table, a flag the SpecForge / SafeAILab writers did not name was dropped on save with exit 0."""

from __future__ import annotations

import json

import pytest

import drifttool
from drifttool.model import flags as flag_table
from drifttool.model.conformance import static_findings
from drifttool.model.layouts import savable
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.conform import _describe
from drifttool.run.follow import varied

DUMMY = flag_table.Flag("dummy_gate", "a flag no engine has (test only)", applied="dummy gate applied",
                        ignored="dummy gate ignored")


@pytest.fixture
def dummy_flag(monkeypatch):
    monkeypatch.setattr(flag_table, "FLAGS", (*flag_table.FLAGS, DUMMY))
    return DUMMY.name


@pytest.fixture(scope="module")
def target():
    return tiny_target(vocab=64, hidden=32, layers=6, seed=3)


@pytest.mark.parametrize("layout", savable())
@pytest.mark.parametrize("value", [True, False])
def test_a_flag_declared_once_round_trips_in_every_layout(layout, value, dummy_flag, target, tmp_path):
    d = tiny_drafter(target)
    d.config.extra_flags[dummy_flag] = value
    out = drifttool.save_drafter(d, tmp_path / layout, layout=layout)
    conf = json.loads((out / "config.json").read_text())
    assert conf[dummy_flag] is value, f"{layout} did not write {dummy_flag}"
    again = drifttool.load_drafter(out, target=target)
    assert again.config.flag(dummy_flag) is value
    assert again.config.flags()[dummy_flag] is value
    info, _ = static_findings(out)
    assert info["flags"][dummy_flag] is value


def test_a_declared_flag_is_overridable_varied_and_named(dummy_flag, target, tmp_path):
    out = drifttool.save_drafter(tiny_drafter(target), tmp_path / "d")
    d = drifttool.load_drafter(out, target=target, overrides={dummy_flag: "true"})
    assert d.config.flag(dummy_flag) is True
    assert d.config.overrides[dummy_flag] == {"checkpoint": False, "override": True}
    assert dummy_flag in varied()
    assert _describe({dummy_flag: False}, {dummy_flag: True}) == "dummy gate applied"


def test_exclusive_flags_are_one_rule(dummy_flag, monkeypatch, target, tmp_path):
    excl = flag_table.Flag("dummy_gate", "x", excludes=("norm_output",))
    monkeypatch.setattr(flag_table, "FLAGS", (*flag_table.FLAGS[:-1], excl))
    assert flag_table.conflicts({"dummy_gate": True, "norm_output": True}) == [("dummy_gate", "norm_output")]
    out = drifttool.save_drafter(tiny_drafter(target, norm_output=True), tmp_path / "d")
    with pytest.raises(drifttool.DriftError, match="dummy_gate and norm_output are mutually exclusive"):
        drifttool.load_drafter(out, target=target, overrides={dummy_flag: "true"})


def test_safeailab_refuses_every_eagle31_flag_it_cannot_write(target, tmp_path):
    for name in [f.name for f in flag_table.FLAGS if f.eagle31]:
        with pytest.raises(drifttool.DriftError, match=f"cannot express {name}"):
            drifttool.save_drafter(tiny_drafter(target, **{name: True}), tmp_path / name, layout="safeailab")


def test_the_four_eagle_flags_keep_their_hash(target):
    """extra_flags is left out of the config hash when empty: drafters hash as before the table."""
    d = tiny_drafter(target)
    assert "extra_flags" not in d.config.weights_hash_fields()


# -- a per-head metric: one Metric row, end to end ------------------------------------------------------------------
# Run in a child process: the rows are added before any stage imports the table (as a real declaration is). Two rows:
# a context mass (a key rule) and a mass on the drafted slots (a slot rule over each query row's ancestor / own masks,
# applied to chains and trees alike): the first drafted slot of the row's path.
CHILD = r'''
import json, sys
from pathlib import Path
import numpy as np
import torch
from drifttool.trace import metric_table as mt


def first_slot(t):  # the path's first drafted slot (the depth-2 input): one-hot per row, none for a row without one
    w = np.zeros(t.anc.shape)
    rows = np.flatnonzero(t.path.any(1))
    w[rows, t.path[rows].argmax(1)] = 1
    return w


mt.METRICS = (*mt.METRICS,
              mt.Metric("last_slot_mass", "last-slot mass", mt.MASS, "attention on the last context slot", "context",
                        keys=lambda c: np.array([c.n - 1]), count="n_last", better=-1, added=True),
              mt.Metric("first_draft_mass", "first-draft mass", mt.MASS, "attention on the path's first drafted slot",
                        "tail", slots=first_slot, count="n_first", better=-1, added=True, base_depth=2,
                        live=("lift", "sum")))
from drifttool.cli import main
import drifttool as dt
from tests.support.capture import TINY, build_models, make_drafter, prompt, write_probes

root, sample = Path(sys.argv[1]), sys.argv[2]
out, rc = {}, {}

# captured: against the drafter's own eager attention rows (lse path and full rows), chains; a tree of width one
from drifttool.model.tiny import tiny_target
from drifttool.run.hooks import Capture
from drifttool.run.tree import parse_tree
from drifttool.run.tree_capture import TreeCapture
from drifttool.run.tree_loop import speculate_tree

t = tiny_target(**TINY)
d = make_drafter(t, 4, 2, 3)
ids = prompt(17, 11)
rows = []
h = d.layer.self_attn.hook_probs.register_forward_hook(lambda _m, _i, o: rows.append(o[0, :, -1].double()))
d.set_attn_impl("eager")
caps = [Capture(d, full_every=0), Capture(d, full_every=1)]
with caps[0], caps[1]:
    res = dt.speculate(t, d, ids, depth=4, max_new_tokens=14, mode="teacher-forced", observers=caps)
h.remove()
d.set_attn_impl("sdpa")
worst, depth1 = 0.0, 0.0
for i, rec in enumerate(res.rounds):
    n = rec.context_len
    for j in range(4):
        want = rows[i * 4 + j][:, n].numpy() if j else np.zeros(4)  # depth j+1 >= 2 sees slot n, the first draft
        for c in caps:
            worst = max(worst, float(np.abs(c.rounds[i].field("first_draft_mass")[j] - want).max()))
out["eager_max_diff"] = worst
out["eager_rounds"] = len(res.rounds)
counts = caps[0].rounds[0].counts[:, list(mt.key_counts()).index("n_first")]
out["n_first"] = counts.tolist()
with Capture(d) as cc:
    dt.speculate(t, d, ids, depth=4, max_new_tokens=14, observers=[cc])
with TreeCapture(d) as tc:
    speculate_tree(t, d, ids, parse_tree("dynamic:top_k=1,depth=4,total=5"), max_new_tokens=14, observers=[tc])
out["tree_vs_chain"] = max(float(np.abs(a.field("first_draft_mass") - b.field("first_draft_mass")).max())
                           for a, b in zip(cc.rounds, tc.rounds))

m = build_models(root)
probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 24), "max_new_tokens": 10}
                                         for i in range(3)])
for name, full in (("a", "1"), ("b", "0")):  # full rows every round, and the kernel's lse path only
    rc["capture_" + name] = main(["capture", "--target", str(m["target"]), "--drafter", f"e3={m['eagle3']}",
                                  "--drafter", f"e31={m['eagle31']}", "--probes", str(probes), "--depth", "3",
                                  "--full-every", full, "--quiet", "--out", str(root / f"{name}.drift")])
a, b = dt.load(root / "a.drift"), dt.load(root / "b.drift")
da, db = a.depths, b.depths
for mass, count, lift in (("last_slot_mass", "n_last", "last_slot_lift"), ("first_draft_mass", "n_first",
                                                                          "first_draft_lift")):
    out[mass] = {"lse_vs_full": float((da[mass] - db[mass]).abs().max()),
                 "range": [float(da[mass].min()), float(da[mass].max())],
                 "lift_recomputed": float((da[mass].astype(float) * da["n_keys"] / da[count] - da[lift]).abs().max()),
                 "counts": sorted(set(da[count].tolist())), "heads_col": mass in a.heads.columns}
import contextlib, io
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc["compare"] = main(["compare", str(root / "a.drift"), "--json"])
pd_rows = json.loads(buf.getvalue())["per_depth"]
out["compare_has"] = all(all(k in r for k in ("last_slot_lift", "last_slot_mass", "first_draft_mass",
                                              "first_draft_lift")) for r in pd_rows)
rc["check_pass"] = main(["check", str(root / "a.drift"), "--rule", "last_slot_lift@depth1>=0"])
rc["check_fail"] = main(["check", str(root / "a.drift"), "--rule", "last_slot_mass@depth1>=2"])
rc["check_tail_fail"] = main(["check", str(root / "a.drift"), "--rule", "first_draft_mass@depth2>=2"])
rc["check_baseline"] = main(["check", str(root / "b.drift"), "--baseline", str(root / "a.drift"),
                             "--baseline-metric", "last_slot_mass@depth1"])
rc["report"] = main(["report", str(root / "a.drift"), "-o", str(root / "r.html")])
html = (root / "r.html").read_text()
out["report_has"] = "last-slot mass" in html and "first-draft mass" in html and "first-draft lift" in html
old = dt.load(sample).depths
out["old_trace_nan"] = bool(old["last_slot_mass"].isna().all() and old["last_slot_lift"].isna().all()
                            and old["first_draft_mass"].isna().all())

# exported: the live monitor's series on /metrics, from the same depths table the trace stores
from drifttool.monitor.metrics import Aggregates, exposition
from drifttool.trace.reader import read_trace
dep = read_trace(root / "a.drift").table("depths")
dep = dep[dep["drafter"] == "e3"]
agg = Aggregates()
agg.add_request(dep, {"model_name": "m", "engine": "0", "drafter": "e3"})
agg.write(root / "metrics" / "run1-replay.json")
text = exposition(root / "metrics", "run1")
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(text)}
got = sum(s.value for s in fams["drifttool:attention_mass"].samples if s.labels["keys"] == "first_draft")
out["metrics_sum"] = [got, float(dep["first_draft_mass"].sum())]
hist = [s for s in fams["drifttool:first_draft_lift"].samples if s.name.endswith("_count")]
out["metrics_hist_count"] = [sum(s.value for s in hist), int(np.isfinite(dep["first_draft_mass"]).sum())]

from streamlit.testing.v1 import AppTest
app = Path(dt.__file__).parent / "dashboard" / "app.py"
sys.argv = [str(app), str(root / "a.drift")]
at = AppTest.from_file(str(app), default_timeout=1800)
at.run()
at.switch_page("app_pages/heads.py").run()
at.radio(key="heads_read").set_value("mass").run()
at.selectbox(key="heads_metric").set_value("last_slot_mass").run()
out["dashboard_exceptions"] = [str(e.message) for e in at.exception]
at.selectbox(key="heads_metric").set_value("first_draft_mass").run()
out["dashboard_exceptions"] += [str(e.message) for e in at.exception]
out["dashboard_charts"] = len(at.get("plotly_chart"))
out["rc"] = rc
print("RESULT " + json.dumps(out))
'''


def test_a_metric_declared_once_runs_end_to_end(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.capture import child_env

    repo = Path(__file__).resolve().parents[2]
    sample = repo / "sample_traces" / "smollm2-short_chat.drift"
    if not sample.is_dir():
        pytest.skip("sample traces not in this checkout")
    p = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(sample)], capture_output=True, text=True,
                       timeout=1800, cwd=repo, env=child_env())
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, p.stderr[-3000:]
    r = json.loads(line[len("RESULT "):])
    assert r["rc"] == {"capture_a": 0, "capture_b": 0, "compare": 0, "check_pass": 0, "check_fail": 1,
                       "check_tail_fail": 1, "check_baseline": 0, "report": 0}, r
    # the tail row: captured as the eager rows say (lse path and full rows), a width-one tree as the chain
    assert r["eager_rounds"] >= 3 and r["eager_max_diff"] < 1e-5 and r["tree_vs_chain"] < 1e-5, r
    assert r["n_first"] == [0, 1, 1, 1]  # depth 1 has no drafted slot; deeper ones see exactly one first slot
    for mass in ("last_slot_mass", "first_draft_mass"):  # stored: lse = full rows, in range, lift from the counts
        x = r[mass]
        assert x["lse_vs_full"] < 1e-5 and 0 <= x["range"][0] and 0 < x["range"][1] <= 1, (mass, x)
        assert x["lift_recomputed"] < 1e-4 and x["heads_col"], (mass, x)
    assert r["last_slot_mass"]["counts"] == [1] and r["first_draft_mass"]["counts"] == [0, 1]
    assert r["compare_has"] and r["report_has"] and r["old_trace_nan"]
    assert r["dashboard_exceptions"] == [] and r["dashboard_charts"] >= 1
    # exported on /metrics: the summed mass equals the table's, and the lift histogram holds every finite row
    assert abs(r["metrics_sum"][0] - r["metrics_sum"][1]) < 1e-3 * max(1.0, r["metrics_sum"][1]), r["metrics_sum"]
    assert r["metrics_hist_count"][0] > 0
