"""Issue 53 item 3: a mistake that needs no model is refused at the call, before anything loads. Each case runs
the real CLI entry point (`drifttool.cli.main`, in-process so the loaders can be patched) with every model loader,
the demo's target fetch and the report renderer replaced by a recorder that fails the case if it is called, and
asserts exit 2, one line naming the flag / file and what was expected (with "did you mean" where a close name
exists), and that nothing was loaded or rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drifttool.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "smollm2-long_code.drift"


@pytest.fixture
def loaded(monkeypatch):
    """Every way a verb below could start heavy work, recorded (and refused) instead."""
    import drifttool.demo as demo
    import drifttool.model.checkpoint as checkpoint
    import drifttool.model.target as target
    import drifttool.plots.html_report as html_report
    import drifttool.run.drafters as drafters
    import drifttool.run.engines.hf as hf
    import drifttool.zoo.smollm2 as smollm2

    calls: list[str] = []

    def recorder(name):
        def called(*a, **k):
            calls.append(name)
            raise AssertionError(f"{name} was called for a mistake that needs no model")
        return called

    for mod, attr in ((hf, "load_target"), (hf, "load_drafters"), (target, "load_target"),
                      (checkpoint, "read_drafter"), (drafters, "read_drafter"), (demo, "run_demo"),
                      (smollm2, "fetch"), (html_report, "html_report")):
        if hasattr(mod, attr):
            monkeypatch.setattr(mod, attr, recorder(f"{mod.__name__}.{attr}"))
    return calls


@pytest.fixture
def where(tmp_path, monkeypatch):
    """Folders that look right from outside (config.json present) but would fail to load: reaching a loader is
    the bug being tested, and the recorder above catches it."""
    for name in ("target", "eagle3"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    (tmp_path / "noconfig").mkdir()
    (tmp_path / "probes.jsonl").write_text(json.dumps({"id": "a", "text": "hello"}) + "\n")
    (tmp_path / "old.drift").mkdir()
    (tmp_path / "old.drift" / "manifest.json").write_text(json.dumps({"schema_version": 4}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def capture(**over) -> list[str]:
    a = {"--target": "target", "--drafter": "eagle3", "--probes": "probes.jsonl", "--out": "new.drift", **over}
    argv = ["capture", "--quiet"]
    for k, v in a.items():
        argv += [k] if v is None else [k, v]
    return argv


CASES = {
    # name: (argv, fragments the one line must contain)
    "--out without .drift": (capture(**{"--out": "results"}), ["--out results", "must end in .drift"]),
    "--out is a file": (capture(**{"--out": "probes.jsonl/x.drift"}), ["--out", "is a file, not a folder"]),
    "--out exists": (capture(**{"--out": "old.drift"}), ["--out old.drift", "--resume or --overwrite"]),
    "--resume of nothing": (capture(**{"--resume": None}), ["--resume new.drift", "nothing to resume"]),
    "drafter path typo": (capture(**{"--drafter": "eagle3x"}),
                          ["--drafter eagle3x", "no such drafter folder", "did you mean 'eagle3'?"]),
    "drafter folder without config.json": (capture(**{"--drafter": "noconfig"}),
                                           ["--drafter noconfig", "no config.json"]),
    "drafter is a file": (capture(**{"--drafter": "probes.jsonl"}), ["--drafter probes.jsonl", "is a file"]),
    "target path typo": (capture(**{"--target": "targte"}),
                         ["--target targte", "no such target folder", "did you mean 'target'?"]),
    "target folder without config.json": (capture(**{"--target": "noconfig"}), ["--target noconfig",
                                                                               "no config.json"]),
    "probes file missing": (capture(**{"--probes": "probe.jsonl"}),
                            ["probe.jsonl", "probe suite not found", "did you mean 'probes.jsonl'?"]),
    "bundled suite typo with -": (capture(**{"--probes": "long-code"}), ["--probes 'long-code'",
                                                                         "did you mean 'long_code'?"]),
    "demo suite typo": (["demo", "--suite", "quik"], ["--suite 'quik'", "did you mean 'quick'?"]),
    "demo suite with -": (["demo", "--suite", "long-code"], ["--suite 'long-code'", "did you mean 'long_code'?"]),
    "demo specimen typo": (["demo", "--specimen", "smolm2"], ["--specimen 'smolm2'", "did you mean 'smollm2'?"]),
    "demo --out without .drift": (["demo", "--out", "demo"], ["--out demo", "must end in .drift"]),
    "report -o into a missing folder": (["report", str(SAMPLE), "-o", "nofolder/r.html"],
                                        ["-o nofolder/r.html", "nofolder does not exist"]),
    "conform with a missing target": (["conform", "drifttool/zoo/models/smollm2/eagle3.1", "--target", "/nonexistent-dir/x"],
                                      ["--target", "no such target folder"]),
    "report -o not html": (["report", str(SAMPLE), "-o", "r.pdf"], ["-o r.pdf: the report is one HTML file"]),
    "report --image-format": (["report", str(SAMPLE), "--images", "imgs", "--image-format", "jpg"],
                              ["--image-format 'jpg'", "png, svg"]),
    "report trace name with -": (["report", str(SAMPLE.with_name("smollm2-long-code.drift"))],
                                 ["trace not found", f"did you mean '{SAMPLE}'?"]),
    "compare trace name with -": (["compare", str(SAMPLE), str(SAMPLE.with_name("smollm2-short-chat.drift"))],
                                  ["trace not found", "smollm2-short_chat.drift'?"]),
    "info trace name with -": (["info", str(SAMPLE.with_name("smollm2-doc-qa.drift"))],
                               ["trace not found", "smollm2-doc_qa.drift'?"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_before_anything_loads(case, where, loaded, capsys):
    argv, fragments = CASES[case]
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("drifttool: error: "), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert loaded == [], loaded
    assert not (where / "new.drift").exists() and not (where / "nofolder").exists()


def test_the_python_api_refuses_the_same_before_loading(where, loaded):
    """`run_capture` (the notebook API's engine) runs the same checks first."""
    from drifttool.errors import DriftError
    from drifttool.run.engines.hf import DrafterSpec, run_capture

    for out, drafter, fragment in (("x", "eagle3", ".drift"), ("ok.drift", "noconfig", "no config.json")):
        with pytest.raises(DriftError, match=fragment):
            run_capture("target", [DrafterSpec.parse(drafter)], "probes.jsonl", out, progress=False)
    assert loaded == []


def test_an_mtp_drafter_in_its_target_folder_passes_the_location_check(where):
    """A target folder is also a valid drafter location (its MTP head): config.json is all the check asks."""
    from drifttool.run.drafters import DrafterSpec
    from drifttool.run.preflight import check_locations

    check_locations("target", [DrafterSpec.parse("target")], "fine.drift")
    check_locations("target", [DrafterSpec.parse("eagle3")], "old.drift", overwrite=True)
    check_locations("target", [DrafterSpec.parse("eagle3")], "old.drift", resume=True)
