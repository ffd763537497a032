"""`drifttool check`: rule parsing, pass/fail exit codes, baseline comparison, user errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from drifttool.analysis.check import parse_drop, parse_rule, run_check
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace

# K = 4. good: AL = 1 + 12/4 = 4.0; weak: AL = 1 + 4/4 = 2.0; self mass 0.2 / 0.5 at depths >= 2
GOOD = {"accepted": [4, 3, 4, 1], "self_mass": 0.2}
WEAK = {"accepted": [1, 1, 2, 0], "self_mass": 0.5}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("check")
    cur = write_trace(d / "cur.drift", {"good": GOOD, "weak": WEAK}, depth=4)
    base = write_trace(d / "base.drift", {"good": {"accepted": [4, 4, 4, 1], "self_mass": 0.2}, "weak": WEAK},
                       depth=4)  # good's baseline AL = 4.25: the current 4.0 is a 5.9 % drop
    other = write_trace(d / "k3.drift", {"good": {"accepted": [3, 3]}}, depth=3)
    return cur, base, other


def test_parse_rules():
    r = parse_rule("acceptance_length>=2.0")
    assert (r.metric, r.depth, r.op, r.threshold) == ("mean_acceptance_length", None, ">=", 2.0)
    r = parse_rule(" self_mass @ depth5 <= 0.4 ")
    assert (r.metric, r.depth, r.op, r.threshold) == ("self_mass", 5, "<=", 0.4)
    assert parse_rule("draft_acceptance_rate>40%").threshold == pytest.approx(0.4)
    assert parse_rule("per_position_rate@depth2==1e-1").metric == "acceptance_rate"
    assert parse_rule("n_alpha@depth1<0.5").holds(0.4) and not parse_rule("al>=2").holds(float("nan"))
    assert parse_drop("2%") == pytest.approx(0.02) and parse_drop("0.05") == pytest.approx(0.05)


@pytest.mark.parametrize("text,msg", [
    ("acceptance_lenght>=2", "unknown metric 'acceptance_lenght'"),
    ("acceptance_length=>2", "malformed"),
    ("acceptance_length>=", "malformed"),
    ("self_mass<=0.4", "per-depth metric"),
    ("self_lift_trend@depth2<=0.4", "drop '@depth2'"),
    ("drift_score<=0.4", "'drift_score' was retired"),  # a silently redefined gate would flip with exit 0
    ("drift<=0.4", "use self_lift_trend"),
    ("drift_per_doubling<=0", "use self_lift_per_doubling"),
    ("self_mass@depth0<=0.4", "depths start at 1"),
])
def test_rule_errors_name_the_rule(text, msg):
    with pytest.raises(DriftError) as e:
        parse_rule(text)
    assert msg in str(e.value) and repr(text) in str(e.value)


def test_run_check_values(traces):
    cur, base, _ = traces
    rep = run_check(read_trace(cur), ["al>=3", "self_mass@depth3<=0.4", "n_alpha@depth1>=0.5"])
    by = {(r["rule"], r["drafter"]): r for r in rep["rules"]}
    assert by[("al>=3", "good")]["value"] == pytest.approx(4.0) and by[("al>=3", "good")]["passed"]
    assert by[("al>=3", "weak")]["value"] == pytest.approx(2.0) and not by[("al>=3", "weak")]["passed"]
    assert by[("self_mass@depth3<=0.4", "weak")]["value"] == pytest.approx(0.5)
    assert not rep["passed"] and rep["failed"] == 2
    only = run_check(read_trace(cur), ["al>=3"], drafter="good")
    assert only["passed"] and [r["drafter"] for r in only["rules"]] == ["good"]
    with pytest.raises(DriftError, match="depth 9 is beyond"):
        run_check(read_trace(cur), ["self_mass@depth9<=0.4"])
    with pytest.raises(DriftError, match="--drafter 'nope'"):
        run_check(read_trace(cur), ["al>=1"], drafter="nope")


def _cli(*args):
    p = subprocess.run([sys.executable, "-m", "drifttool.cli", "check", *map(str, args)], capture_output=True,
                       text=True, timeout=1800)
    return p.returncode, p.stdout, p.stderr


def test_cli_exit_codes(traces):
    cur, _, _ = traces
    rc, out, _ = _cli(cur, "--rule", "acceptance_length>=3.0", "--rule", "self_mass@depth2<=0.4")
    assert rc == 1
    assert "acceptance_length>=3.0" in out and "FAIL" in out and "PASS" in out and "2 of 4 checks failed" in out
    rc, out, _ = _cli(cur, "--rule", "acceptance_length>=2.0", "--rule", "self_mass@depth2<=0.6")
    assert rc == 0 and "all 4 checks passed" in out and "FAIL" not in out
    rc, out, err = _cli(cur, "--rule", "acceptance_length=>2")
    assert rc == 2 and out == ""
    assert err.strip().count("\n") == 0 and "--rule 'acceptance_length=>2': malformed" in err


def test_cli_baseline(traces, capsys):
    cur, base, other = traces
    assert main(["check", str(cur), "--baseline", str(base), "--max-drop", "2%"]) == 1
    out = capsys.readouterr().out
    assert "against baseline" in out and "FAIL" in out
    assert main(["check", str(cur), "--baseline", str(base), "--max-drop", "10%", "--json",
                 "--baseline-metric", "mean_acceptance_length", "--baseline-metric", "self_mass@depth2"]) == 0
    rep = json.loads(capsys.readouterr().out)
    good = next(r for r in rep["baseline"] if r["drafter"] == "good" and r["metric"] == "mean_acceptance_length")
    assert good["relative_drop"] == pytest.approx((4.25 - 4.0) / 4.25) and good["passed"]
    assert rep["passed"] and len(rep["baseline"]) == 4
    assert main(["check", str(cur), "--baseline", str(other)]) == 2  # depth 4 vs 3: not comparable
    assert "depth" in capsys.readouterr().err
    assert main(["check", str(cur), "--baseline", str(base), "--max-drop", "lots"]) == 2
    assert main(["check", str(cur)]) == 2  # nothing to check


def _edited(src, dst, edit):
    """A copy of a trace with its manifest edited (what a flagged, partial or foreign capture records)."""
    import shutil

    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    edit(m)
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def test_gate_fails_on_flagged_or_partial_traces(traces, tmp_path, capsys):
    """A gate on numbers the capture itself flagged (or on a partial capture) fails, naming why; it used to pass
    with no note."""
    cur, base, _ = traces
    flagged = _edited(cur, tmp_path / "flagged.drift", lambda m: m.setdefault("flags", []).append(
        {"key": "p0:eagle3", "check": "replay", "message": "replayed drafts differ from vLLM's"}))
    rep = run_check(read_trace(flagged), ["al>=1"], baseline=read_trace(base), max_drop="50%")
    assert all(r["passed"] for r in rep["rules"] + rep["baseline"]) and not rep["passed"]
    assert [r["check"] for r in rep["integrity"]] == ["faithfulness"] and rep["failed"] == 1
    assert main(["check", str(flagged), "--rule", "al>=1"]) == 1
    assert "FLAGGED p0:eagle3" in capsys.readouterr().out
    partial = _edited(cur, tmp_path / "partial.drift", lambda m: m.update(status="partial"))
    rep = run_check(read_trace(cur), ["al>=1"], baseline=read_trace(partial), max_drop="50%")
    assert not rep["passed"] and rep["integrity"][0]["role"] == "baseline" and rep["integrity"][0]["check"] == "complete"


def _set(path: str, value):
    def edit(m):
        *head, last = path.split(".")
        d = m
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    return edit


@pytest.mark.parametrize("field,value,msg", [
    ("capture.probes.sha256", "0123456789abcdef", "same probe suite"),
    ("target.weights", "ffffffffffffffffffffffff", "same target"),
    ("target.config_hash", "ffffffffffffffff", "same target"),
    ("capture.temperature", 1.0, "different sampling rules"),
    ("capture.draft_sampling", "probabilistic", "draft sampling"),  # same temperature, other draft rule
    ("capture.recent", 16, "recent-mass window"),
])
def test_baseline_from_another_suite_target_or_sampling_is_refused(traces, tmp_path, capsys, field, value, msg):
    cur, base, _ = traces
    if field == "target.weights":  # synthetic traces record no weights hash: give the current one its own
        cur = _edited(cur, tmp_path / "cur.drift", _set(field, "aaaaaaaaaaaaaaaaaaaaaaaa"))
    if field == "capture.draft_sampling":  # synthetic traces record none: the current one drafts greedily
        cur = _edited(cur, tmp_path / "cur.drift", _set(field, "greedy"))
    other = _edited(base, tmp_path / "other.drift", _set(field, value))
    assert main(["check", str(cur), "--baseline", str(other)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.strip().count("\n") == 0
    if field != "capture.probes.sha256":  # compare refuses these too (a suite difference is a note there)
        assert main(["compare", str(cur), str(other)]) == 2
        assert msg in capsys.readouterr().err


def test_a_trace_without_target_identity_is_compared_with_a_note(traces, tmp_path, capsys):
    """One manifest lacks target.weights (older or hand-edited): traces of maybe different targets were compared as
    one target with no word; now a note names the trace that cannot be checked."""
    cur, base, _ = traces
    cur = _edited(cur, tmp_path / "cur.drift", _set("target.weights", "aaaaaaaaaaaaaaaaaaaaaaaa"))
    assert main(["compare", str(cur), str(base)]) == 0
    out = capsys.readouterr().out
    assert "no target.weights in its manifest" in " ".join(out.split())


def test_check_prints_rules_whole_within_80_columns(capsys):
    """A long rule and a drafter name are printed whole (never cut with an ellipsis); the value wraps instead."""
    from pathlib import Path

    import pytest

    from drifttool.cli import main

    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "smollm2-short_chat.drift"
    if not sample.is_dir():
        pytest.skip("sample traces not in this checkout")
    rule = "sink_lift@depth8-depth1>=-100"
    assert main(["check", str(sample), "--rule", rule]) == 0
    out = capsys.readouterr().out
    assert rule in out and "eagle3+norm_output" in out and "…" not in out
    assert max(len(ln) for ln in out.splitlines()) <= 80


def test_a_ratio_inside_the_flat_band_is_gated_at_its_value(tmp_path):
    """A ratio within x/÷ 1.05 of 1 used to be read as exactly 1.0 by check: recency_ratio<=1.02 passed at 1.04,
    rms_growth<=0.97 failed at 0.96, --baseline passed 0.96 -> 1.04 and check --json said 1.0 where compare said
    1.04. Only float32 noise at 1 compares as 1 now, and the reported value is the measured one."""
    import numpy as np

    def trace(name, top):
        rms = np.tile(np.linspace(1.0, top, 4), (8, 1))  # fed-back RMS growth = top exactly
        return read_trace(write_trace(tmp_path / name, {"d": {"accepted": [2] * 8, "rms_in": rms}}, depth=4))

    up, down = trace("up.drift", 1.04), trace("down.drift", 0.96)
    rep = run_check(up, ["rms_growth<=1.02"])
    assert not rep["passed"] and rep["rules"][0]["value"] == pytest.approx(1.04, rel=1e-6)
    assert run_check(down, ["rms_growth<=0.97"])["passed"]
    base = run_check(up, [], baseline=down, baseline_metrics=["rms_growth"], max_drop="2%")
    assert not base["passed"] and base["baseline"][0]["relative_drop"] == pytest.approx(0.08 / 0.96, rel=1e-5)
    noise = trace("noise.drift", 1.0 + 2e-8)  # float noise at 1 still gates as 1
    assert run_check(noise, ["rms_growth<=1"])["passed"]


def test_json_output_is_strict_json(traces, capsys):
    """compare --json / check --json: a value that cannot be computed (NaN) or an infinite MDE is null, never the bare
    NaN / Infinity tokens that jq, JavaScript and Go's parsers reject."""
    cur, _, _ = traces
    for argv in (["compare", str(cur), "--json"], ["check", str(cur), "--rule", "iid_p>=0", "--json"]):
        main(argv)
        out = capsys.readouterr().out
        json.loads(out, parse_constant=lambda c, cmd=argv[0]: pytest.fail(f"{cmd} --json printed {c}"))
