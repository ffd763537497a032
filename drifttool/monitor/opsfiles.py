"""The ready-made operations files (drifttool/monitor/ops/): a Grafana dashboard (vLLM's per-position acceptance
beside drifttool's per-depth recency-matched ratio, lifts and fed-back RMS, acceptance by context length, the
monitor's heartbeat) and Prometheus recording and alert rules. Tests check every series they
query against what a real server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

OPS = Path(__file__).resolve().parent / "ops"
GRAFANA, ALERTS = OPS / "grafana_dashboard.json", OPS / "alerts.yml"
SERIES = re.compile(r"\b((?:drifttool|vllm):[A-Za-z_][A-Za-z0-9_:]*)")


def grafana_exprs(path: Path = GRAFANA) -> list[str]:
    dash = json.loads(path.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def alert_rules(path: Path = ALERTS) -> list[dict]:
    import yaml

    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def recorded_series() -> set[str]:
    """The series the rules file's recording rules define (drifttool:recency_ratio:rate1h, ...)."""
    return {r["record"] for r in alert_rules() if "record" in r}


def queried_series() -> set[str]:
    """Every exported series the dashboard and the rules query (with _total / _sum / _count / _bucket): the
    recording rules' own series are not exported, they are computed from these."""
    exprs = grafana_exprs() + [r["expr"] for r in alert_rules()]
    return {m for e in exprs for m in SERIES.findall(e)} - recorded_series()
