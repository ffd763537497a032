"""The shipped alert rules under Prometheus' own unit-test runner (issue #63): `promtool test rules` on
drifttool/monitor/ops/alerts_test.yml — healthy traffic fires no alert, each fault fires its alert with its labels
and words — and `promtool check rules` on alerts.yml. promtool comes from $PROMTOOL, PATH, or the copy
scripts/promtool.sh unpacks (scripts/test.sh runs it first)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from drifttool.monitor import opsfiles

OPS = Path(opsfiles.__file__).parent / "ops"


def promtool() -> str:
    cached = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "drifttool/promtool/usr/bin/promtool"
    found = os.environ.get("PROMTOOL") or shutil.which("promtool") or (str(cached) if cached.is_file() else None)
    if not found:
        pytest.skip("promtool not found: run scripts/promtool.sh (scripts/test.sh does)")
    return found


def test_every_alert_has_a_healthy_and_a_fault_case():
    tests = yaml.safe_load((OPS / "alerts_test.yml").read_text())["tests"]
    alerts = {r["alert"] for r in opsfiles.alert_rules() if "alert" in r}
    healthy = [t for t in tests if all(not c["exp_alerts"] for c in t["alert_rule_test"])]
    assert len(healthy) == 1 and {c["alertname"] for c in healthy[0]["alert_rule_test"]} == alerts
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert fired == alerts, alerts - fired


def test_promtool_passes_the_rules_and_their_unit_tests():
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", "alerts.yml"], cwd=OPS, capture_output=True, text=True,
                           timeout=1800)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([tool, "test", "rules", "alerts_test.yml"], cwd=OPS, capture_output=True, text=True,
                         timeout=1800)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout[-4000:] + run.stderr[-2000:]
