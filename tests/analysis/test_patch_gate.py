"""`check` gates what an intervention costs in acceptance (issue #61, item 3): `patch_al_change` is each patched
series' paired change of acceptance length against its clean series, exactly `patch_effects`' number, with its p,
MDE and groups; a trace without interventions and a per-depth form are one-line user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import drifttool as dt
from drifttool.cli import main

PATCH = Path(__file__).resolve().parents[2] / "sample_traces" / "patch" / "smollm2-mt_chat-patch.drift"
PLAIN = Path(__file__).resolve().parents[2] / "sample_traces" / "smollm2-long_code.drift"


@pytest.fixture(scope="module")
def effects():
    if not PATCH.is_dir():
        pytest.skip("the shipped patch trace is not in this checkout")
    return {e["patched"]: e["acceptance_length"] for e in dt.load(PATCH).patch_effects()}


def test_the_gate_reads_each_interventions_paired_acceptance_change(effects, capsys):
    worst = min(a["difference"] for a in effects.values())
    assert main(["check", str(PATCH), "--rule", f"patch_al_change>={worst - 1e-3}", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rules"]
    assert {r["drafter"] for r in rows} == set(effects)  # every patched series, no clean one
    for r in rows:
        a = effects[r["drafter"]]
        assert r["value"] == pytest.approx(a["difference"]) and r["p"] == a["p"] and r["n_groups"] == a["n_groups"]
    assert main(["check", str(PATCH), "--rule", f"patch_al_change>={worst + 1e-3}"]) == 1  # the worst one fails


def test_a_patch_rule_on_a_trace_without_interventions_is_a_user_error(capsys):
    if not PLAIN.is_dir():
        pytest.skip("sample traces not in this checkout")
    assert main(["check", str(PLAIN), "--rule", "patch_al_change>=0"]) == 2
    err = capsys.readouterr().err
    assert "not a `drifttool patch` trace" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_patch_rule_takes_no_depth(effects, capsys):
    assert main(["check", str(PATCH), "--rule", "patch_al_change@depth2>=0"]) == 2
    assert "drop '@depth2'" in capsys.readouterr().err
