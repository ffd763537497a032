"""`drifttool demo` answers (issue #53, item 1): its first screen is the shipped traces' verdict in plain words —
the very sentences the README leads with, each half a detected finding — and then it proves the install: two of
the shipped long-code prompts recaptured live with the bundled drafters reproduce the shipped rounds (drafted tokens
and acceptance identical, masses within the stated tolerance); a reproduction that fails exits 1 and says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drifttool import demo
from drifttool.cli import app

ROOT = Path(__file__).resolve().parents[2]


def readme_plain() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text[text.index("<!-- answer:begin"):text.index("<!-- answer:end")]
    return [ln for ln in block.splitlines() if "in plain words" in ln]


def run_demo(tmp_path, monkeypatch, result: dict):
    monkeypatch.setattr(demo, "reproduce", lambda out, progress=True: result)
    return CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d.drift"), "--quiet"], prog_name="drifttool",
                              env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_the_demo_leads_with_the_readmes_answer_and_it_is_a_detected_verdict(tmp_path, monkeypatch):
    ok = {"prompts": ["a@512", "b@512"], "rounds": 77, "rows": 600, "problems": [], "worst_rel": 1e-5,
          "exact": ["draft_id", "accepted"], "compared": ["sink_mass", "rms_post"]}
    r = run_demo(tmp_path, monkeypatch, ok)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    first = lines[: lines.index(next(ln for ln in lines if ln.startswith("All the numbers")))]
    said = [ln.strip() for ln in first if ln.startswith("  The ")]
    suites = [ln.split(" ")[0] for ln in first if ln.endswith(".drift):")]
    assert suites == list(demo.SHIPPED) and len(said) == 3 * len(suites)  # the state, attention, acceptance
    readme = readme_plain()
    assert len(readme) == len(suites)
    for suite, plain in zip(suites, readme):  # the same sentences, in the same order, in the README
        assert plain.startswith(f"- **{suite}**")
        for sentence in said[:3]:
            assert sentence in plain, (sentence, plain)
        said = said[3:]
    text = "\n".join(first)
    for verdict in re.findall(r"EAGLE-3(?:\.1)? (does not drift|drifts|attends uniformly)", text):
        assert verdict  # each drafter's attention verdict is a detected one, not "not established"
    assert len(re.findall(r"EAGLE-3(?:\.1)? (?:does not drift|drifts)", text)) == 2 * len(suites)
    assert "reproduced: 2 prompts x 2 drafters, 77 rounds: 2 integer columns identical" in r.output


def test_a_failed_reproduction_exits_1_and_says_what_differs(tmp_path, monkeypatch):
    bad = {"prompts": ["a@512"], "rounds": 30, "rows": 240, "problems": ["accepted differs in 3 of 240 rows"],
           "worst_rel": 0.0}
    r = run_demo(tmp_path, monkeypatch, bad)
    assert r.exit_code == 1 and "NOT reproduced" in r.output and "accepted differs in 3 of 240 rows" in r.output


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    # the real target: converted by scripts/setup.sh, so this is the bundled model the README's demo runs
    return demo.reproduce(str(tmp_path_factory.mktemp("demo") / "live.drift"), progress=False)


def test_this_install_reproduces_the_shipped_rounds(live):
    assert live["problems"] == [] and live["rounds"] > 20 and live["worst_rel"] <= demo.MASS_TOL, live


def test_the_reproduction_check_catches_a_changed_round(live):
    from drifttool.trace.reader import read_trace

    got = read_trace(live["trace"]).table("depths")
    ref = read_trace(ROOT / "sample_traces" / demo.SHIPPED["long_code"][0]).table("depths")
    flipped = ref.copy()
    row = flipped.index[(flipped.prompt_id == got.prompt_id.iloc[0]) & (flipped.drafter == "eagle3")][3]
    flipped.loc[row, "accepted"] = not bool(flipped.loc[row, "accepted"])
    assert any("accepted differs in 1 of" in p for p in demo.same_rounds(flipped, got)["problems"])
    scaled = ref.copy()
    scaled["sink_mass"] = scaled["sink_mass"] * 1.01
    assert any("relative" in p for p in demo.same_rounds(scaled, got)["problems"])
    shorter = ref.drop(index=row)
    assert any("only one of the two" in p for p in demo.same_rounds(shorter, got)["problems"])
    # every measured column is compared, not five named ones: a doubled recent_all_mass or a tripled rms_post is
    # caught, and so is a changed key count
    for col, f in (("recent_all_mass", 2.0), ("rms_post", 3.0), ("l2_pre", 1.01)):
        bad = ref.copy()
        bad[col] = bad[col] * f
        assert any(p.startswith(f"{col} differs by") for p in demo.same_rounds(bad, got)["problems"]), col
    counts = ref.copy()
    counts.loc[row, "n_keys"] += 1
    assert any("n_keys differs in 1 of" in p for p in demo.same_rounds(counts, got)["problems"])
    assert {"sink_mass", "recent_all_mass", "rms_post", "l2_in", "entropy"} <= set(live["compared"])


def test_the_demo_never_replaces_a_trace_it_did_not_write(tmp_path, monkeypatch, capsys):
    """--out at the shipped long-code trace (the demo's own reference) is refused even with --overwrite; another
    trace there is refused without --overwrite; the demo's own trace is replaced. All before anything loads."""
    import shutil

    from drifttool.trace.synthetic import write_trace

    shipped = ROOT / "sample_traces" / demo.SHIPPED["long_code"][0]
    from drifttool.cli import main

    monkeypatch.setattr(demo, "reproduce", lambda out, progress=True: pytest.fail("must not capture"))
    for extra in ([], ["--overwrite"]):
        assert main(["demo", "--out", str(shipped), "--quiet", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "a shipped trace (the demo's reference)" in err, err
    other = write_trace(tmp_path / "mine.drift", {"d": {"accepted": [1, 2]}}, depth=4)
    before = sorted(p.name for p in other.rglob("*"))
    assert main(["demo", "--out", str(other), "--quiet"]) == 2
    assert "a trace the demo did not write is there" in capsys.readouterr().err
    assert sorted(p.name for p in other.rglob("*")) == before
    mf = other / "manifest.json"
    import json

    mf.write_text(json.dumps({**json.loads(mf.read_text()), "demo": True}))
    from drifttool.cli import _demo_checks

    _demo_checks(str(other), "smollm2", "quick")  # its own trace: accepted
    shutil.rmtree(other)


def test_the_live_check_without_its_reference_is_one_line(tmp_path):
    """The live check reads the shipped long-code trace and its probe lines: without them, one line (was KeyError)."""
    from drifttool.errors import DriftError

    with pytest.raises(DriftError, match="the shipped long_code trace is missing"):
        demo.reproduce(str(tmp_path / "x.drift"), root=tmp_path)
