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
# Run in a child process: the row is added before any stage imports the table (as a real declaration is).
CHILD = r'''
import json, sys
from pathlib import Path
import torch
from drifttool.trace import metric_table as mt

mt.METRICS = (*mt.METRICS, mt.Metric("last_slot_mass", "last-slot mass", mt.MASS, "attention on the last context slot",
                                     "context", keys=lambda c: torch.tensor([c.n - 1]), count="n_last", better=-1,
                                     added=True))
from drifttool.cli import main
import drifttool as dt
from tests.support.capture import build_models, prompt, write_probes

root, sample = Path(sys.argv[1]), sys.argv[2]
m = build_models(root)
probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 24), "max_new_tokens": 10}
                                         for i in range(3)])
out, rc = {}, {}
for name, full in (("a", "1"), ("b", "0")):  # full rows every round, and the kernel's lse path only
    rc["capture_" + name] = main(["capture", "--target", str(m["target"]), "--drafter", f"e3={m['eagle3']}",
                                  "--drafter", f"e31={m['eagle31']}", "--probes", str(probes), "--depth", "3",
                                  "--full-every", full, "--quiet", "--out", str(root / f"{name}.drift")])
a, b = dt.load(root / "a.drift"), dt.load(root / "b.drift")
da, db = a.depths, b.depths
out["mass_max_diff_lse_vs_full"] = float((da["last_slot_mass"] - db["last_slot_mass"]).abs().max())
out["mass_range"] = [float(da["last_slot_mass"].min()), float(da["last_slot_mass"].max())]
lift = da["last_slot_mass"].astype(float) * da["n_keys"] / da["n_last"]
out["lift_recomputed"] = float((lift - da["last_slot_lift"]).abs().max())
out["n_last"] = sorted(set(da["n_last"].tolist()))
out["heads_cols"] = "last_slot_mass" in a.heads.columns
import contextlib, io
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc["compare"] = main(["compare", str(root / "a.drift"), "--json"])
pd_rows = json.loads(buf.getvalue())["per_depth"]
out["compare_has"] = all("last_slot_lift" in r and "last_slot_mass" in r for r in pd_rows)
rc["check_pass"] = main(["check", str(root / "a.drift"), "--rule", "last_slot_lift@depth1>=0"])
rc["check_fail"] = main(["check", str(root / "a.drift"), "--rule", "last_slot_mass@depth1>=2"])
rc["check_baseline"] = main(["check", str(root / "b.drift"), "--baseline", str(root / "a.drift"),
                             "--baseline-metric", "last_slot_mass@depth1"])
rc["report"] = main(["report", str(root / "a.drift"), "-o", str(root / "r.html")])
out["report_has"] = "last" in (root / "r.html").read_text()
old = dt.load(sample).depths
out["old_trace_nan"] = bool(old["last_slot_mass"].isna().all() and old["last_slot_lift"].isna().all())

from streamlit.testing.v1 import AppTest
app = Path(dt.__file__).parent / "dashboard" / "app.py"
sys.argv = [str(app), str(root / "a.drift")]
at = AppTest.from_file(str(app), default_timeout=120)
at.run()
at.switch_page("app_pages/heads.py").run()
at.radio(key="heads_read").set_value("mass").run()
at.selectbox(key="heads_metric").set_value("last_slot_mass").run()
out["dashboard_exceptions"] = [str(e.message) for e in at.exception]
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
                       timeout=600, cwd=repo, env=child_env())
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, p.stderr[-3000:]
    r = json.loads(line[len("RESULT "):])
    assert r["rc"] == {"capture_a": 0, "capture_b": 0, "compare": 0, "check_pass": 0, "check_fail": 1,
                       "check_baseline": 0, "report": 0}, r
    assert r["mass_max_diff_lse_vs_full"] < 1e-5  # the kernel's lse path and the full rows agree
    assert 0 <= r["mass_range"][0] and 0 < r["mass_range"][1] <= 1
    assert r["lift_recomputed"] < 1e-4 and r["n_last"] == [1]
    assert r["heads_cols"] and r["compare_has"] and r["report_has"] and r["old_trace_nan"]
    assert r["dashboard_exceptions"] == [] and r["dashboard_charts"] >= 1
