"""Drift across training: a folder of step-N checkpoints captured as one trace (one drafter per checkpoint, named
VARIANT@STEP), and its statistics lined up against the step in compare, the notebook and the dashboard."""

from __future__ import annotations

import json
import shutil

import pytest

import drifttool
from drifttool.analysis.compare import Comparison
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.run.series import find_checkpoints, series_specs, step_of
from drifttool.trace.reader import read_trace
from drifttool.zoo import MODELS_DIR

PLAIN = MODELS_DIR / "plain"


def test_step_names_of_every_trainer():
    assert [step_of(n) for n in ("step-000400", "checkpoint-400", "epoch_0_step_400", "3", "final")] == \
        [400, 400, 400, 3, None]


def test_layouts_and_errors(tmp_path):
    per_variant = tmp_path / "run"  # drifttool's trainer: step-N/<variant>/
    for s in (100, 20):
        for v in ("eagle3", "eagle3.1"):
            shutil.copytree(PLAIN / v, per_variant / f"step-{s:06d}" / v)
    assert [(v, s) for v, s, _ in find_checkpoints(per_variant)] == \
        [("eagle3", 20), ("eagle3", 100), ("eagle3.1", 20), ("eagle3.1", 100)]
    flat = tmp_path / "specforge_run"  # one drafter per step dir: the variant is the folder's name
    for s in (10, 30, 50, 70):
        shutil.copytree(PLAIN / "eagle3", flat / f"epoch_0_step_{s}")
    (flat / "logs").mkdir()  # no step: skipped
    assert [n for n, _ in series_specs(flat, keep=3)] == ["specforge_run@10", "specforge_run@50", "specforge_run@70"]
    with pytest.raises(DriftError, match="no checkpoints"):
        find_checkpoints(flat / "logs")
    with pytest.raises(DriftError, match="not a folder"):
        find_checkpoints(tmp_path / "missing")
    shutil.copytree(PLAIN / "eagle3", flat / "checkpoint-10")
    with pytest.raises(DriftError, match="step 10 .* twice"):
        find_checkpoints(flat)


def test_series_capture_compare_notebook_and_page(tmp_path, capsys, monkeypatch):
    root = tmp_path / "ckpts"
    for s in (1, 2):
        for v in ("eagle3", "eagle3.1"):
            shutil.copytree(PLAIN / v, root / f"step-{s:06d}" / v)
    probes = tmp_path / "p.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": list(range(1 + i, 21 + i))}) + "\n"
                              for i in range(3)))
    out = tmp_path / "series.drift"
    assert main(["capture", "--target", str(PLAIN / "target"), "--drafter-series", str(root), "--probes",
                 str(probes), "--out", str(out), "--depth", "3", "--max-new-tokens", "6", "--quiet"]) == 0
    capsys.readouterr()
    t = read_trace(out)
    assert [d["name"] for d in t.manifest["drafters"]] == ["eagle3@1", "eagle3@2", "eagle3.1@1", "eagle3.1@2"]
    cmp = Comparison.of([t])
    curves = cmp.training()
    s = cmp.summary().set_index("series")
    pdp = cmp.per_depth().set_index(["series", "depth"])
    assert set(zip(curves.variant, curves.step)) == {("eagle3", 1), ("eagle3", 2), ("eagle3.1", 1), ("eagle3.1", 2)}
    for r in curves.itertuples():
        label = f"{r.variant}@{r.step}"
        assert r.mean_acceptance_length == pytest.approx(s.loc[label, "mean_acceptance_length"])
        assert r.sink_mass == pytest.approx(pdp.loc[(label, r.depth), "sink_mass"])
    assert main(["compare", str(out)]) == 0
    assert "Across training checkpoints" in capsys.readouterr().out
    assert main(["compare", str(out), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["training"]) == len(curves)
    tr = drifttool.load(out)
    assert len(tr.training()) == len(curves) and len(tr.plot.training().data) == 2
    # two runs with the same variant names are two curves, not one curve pooling both runs
    other = tmp_path / "again" / "series.drift"
    shutil.copytree(out, other)
    both = Comparison.of([t, read_trace(other)]).training()
    assert len(set(both.variant)) == 4 and len(both) == 2 * len(curves)
    # ':' separates trace and drafter in labels: a series folder named x:e3 would read as variant e3
    colon = tmp_path / "x:e3"
    shutil.copytree(PLAIN / "eagle3", colon / "step-000001")
    assert main(["capture", "--target", str(PLAIN / "target"), "--drafter-series", str(colon), "--probes",
                 str(probes), "--out", str(tmp_path / "c.drift"), "--depth", "3", "--max-new-tokens", "6",
                 "--quiet"]) == 2
    assert "contains ':'" in capsys.readouterr().err
    # the dashboard page
    pytest.importorskip("streamlit")
    import sys
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    app = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard" / "app.py"
    monkeypatch.setattr(sys, "argv", [str(app), str(out)])
    at = AppTest.from_file(str(app), default_timeout=1800)
    at.run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception and len(at.get("plotly_chart")) == 4


def test_a_plain_trace_has_no_training_curves():
    t = read_trace(MODELS_DIR.parents[2] / "sample_traces" / "smollm2-short_chat.drift")
    assert Comparison.of([t]).training().empty
