"""The shipped Prometheus rules and Grafana queries are valid PromQL (parsed by promql-parser, the Rust port of
Prometheus' own parser; `promtool check rules` in the vLLM test environment does the same where promtool exists),
hold for any speculation depth (no depth beyond 1 is named), and cover what an operator needs: a heartbeat alert, the
recency-matched ratio, sink retention, replay errors and disagreements, write errors, acceptance per context bucket."""

from __future__ import annotations

import re

import pytest

from drifttool.monitor import opsfiles

promql = pytest.importorskip("promql_parser")


def _grafana(expr: str) -> str:
    """A Grafana query as Prometheus receives it (its variables substituted)."""
    return expr.replace("$__rate_interval", "5m").replace("$model", ".*").replace("$drafter", ".*")


def rules() -> list[dict]:
    return opsfiles.alert_rules()


def test_every_expression_parses_as_promql():
    exprs = [r["expr"] for r in rules()] + [_grafana(e) for e in opsfiles.grafana_exprs()]
    assert len(exprs) >= 20
    for e in exprs:
        promql.parse(e)  # raises ValueError naming the fault
    with pytest.raises(ValueError):  # the parser does refuse a broken expression
        promql.parse("sum by (model_name (rate(drifttool:drafts_total[5m]))")


def test_no_rule_names_a_depth_beyond_one():
    for r in rules():
        assert not re.search(r'depth\s*=~?\s*"(?!1")', r["expr"]), r.get("alert") or r.get("record")


def test_the_operator_is_told_what_matters():
    alerts = {r["alert"]: r for r in rules() if "alert" in r}
    records = {r["record"]: r for r in rules() if "record" in r}
    assert {"DrifttoolMonitorStalled", "DrifttoolReplayErrors", "DrifttoolReplayDisagreements",
            "DrifttoolWriteErrors", "DrafterAttentionDrift", "DrafterSinkLost"} <= set(alerts)
    assert "heartbeat_timestamp_seconds" in alerts["DrifttoolMonitorStalled"]["expr"]
    assert "vllm:" in alerts["DrifttoolMonitorStalled"]["expr"]  # stalled while vLLM serves, not idle
    assert 'keys="matched_nonsink"' in records["drifttool:recency_ratio:rate1h"]["expr"]
    assert "context" in records["drifttool:acceptance_rate:rate1h"]["expr"]
    for r in rules():  # every label the rules group by is one the monitor exports (or vLLM's model_name)
        for by in re.findall(r"by \(([^)]*)\)", r["expr"]) + re.findall(r"on \(([^)]*)\)", r["expr"]):
            assert {x.strip() for x in by.split(",")} - {""} <= {"model_name", "drafter", "depth", "context", "process",
                                                          "reason"}, (r, by)
