"""Every acceptance definition on hand-made chains with known answers, and their names in compare's output."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from drifttool.analysis.compare import Comparison
from drifttool.analysis.export import comparison_json
from drifttool.analysis.metrics import ACCEPTANCE_DEFINITIONS, acceptance
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace

NAMES = ("mean acceptance length (vLLM)", "per-position rate (vLLM)", "n-alpha (EAGLE)", "draft acceptance rate",
         "i.i.d. estimate")


def test_worked_example_known_answers():
    # K = 3; chains accepted 3, 0, 1, 3 drafts (the example in docs/acceptance.md)
    a = acceptance(np.array([3, 0, 1, 3]), 3)
    assert a["drafts"] == 4
    assert a["mean_acceptance_length"] == pytest.approx(1 + 7 / 4)
    assert a["per_position_rate"] == pytest.approx([3 / 4, 2 / 4, 2 / 4])
    assert a["n_alpha"] == pytest.approx([3 / 4, 2 / 3, 2 / 2])
    assert a["draft_acceptance_rate"] == pytest.approx(7 / 12)
    p = 7 / 9  # accepted / positions reached (4 + 3 + 2)
    assert a["iid_p"] == pytest.approx(p)
    assert a["iid_acceptance_length"] == pytest.approx((1 - p ** 4) / (1 - p))


def test_iid_estimate_differs_from_measured_and_conditional_differs_from_unconditional():
    # all-or-nothing chains: acceptance is correlated across depths, so the i.i.d. closed form is off
    a = acceptance(np.array([0, 0, 3, 3]), 3)
    assert a["mean_acceptance_length"] == pytest.approx(2.5)
    assert a["iid_p"] == pytest.approx(6 / 8)
    assert a["iid_acceptance_length"] == pytest.approx((1 - 0.75 ** 4) / 0.25)  # 2.734
    assert abs(a["iid_acceptance_length"] - a["mean_acceptance_length"]) > 0.2
    assert a["per_position_rate"] == pytest.approx([0.5, 0.5, 0.5])  # vLLM: unconditional
    assert a["n_alpha"] == pytest.approx([0.5, 1.0, 1.0])  # EAGLE: conditional on earlier depths
    assert a["draft_acceptance_rate"] == pytest.approx((a["mean_acceptance_length"] - 1) / 3)


def test_edge_cases():
    full = acceptance(np.array([4, 4]), 4)
    assert full["mean_acceptance_length"] == full["iid_acceptance_length"] == 5.0
    one = acceptance(np.array([1, 1, 1, 1]), 3)  # depth 3 never reached: n-alpha undefined there
    assert one["per_position_rate"] == [1.0, 0.0, 0.0]
    assert one["n_alpha"][:2] == [1.0, 0.0] and math.isnan(one["n_alpha"][2])
    assert one["iid_acceptance_length"] == pytest.approx(1.875)  # p = 1/2, measured is 2.0
    assert acceptance(np.array([], dtype=int), 3) == {"drafts": 0}


def test_definitions_registry_names_and_sources():
    assert [d["name"] for d in ACCEPTANCE_DEFINITIONS.values()] == list(NAMES)
    for d in ACCEPTANCE_DEFINITIONS.values():
        assert d["definition"] and d["source"]


def test_compare_shows_every_definition_by_name(tmp_path):
    acc = [3, 0, 1, 3, 0, 0, 3, 3]
    t = read_trace(write_trace(tmp_path / "a.drift", {"d": {"accepted": acc}}, depth=3))
    cmp = Comparison.of([t])
    s = cmp.summary().iloc[0]
    ref = acceptance(np.array(acc), 3)
    for key in ("mean_acceptance_length", "draft_acceptance_rate", "iid_acceptance_length", "iid_p"):
        assert s[key] == pytest.approx(ref[key])
    assert s["per_position_rate"] == pytest.approx(ref["per_position_rate"])
    assert s["n_alpha"] == pytest.approx(ref["n_alpha"])
    pdp = cmp.per_depth()  # per-depth table agrees with the one-number definitions
    assert pdp["acceptance_rate"].tolist() == pytest.approx(ref["per_position_rate"])
    assert pdp["n_alpha"].tolist() == pytest.approx(ref["n_alpha"])

    js = json.loads(json.dumps(comparison_json(cmp), default=str))
    assert [d["name"] for d in js["acceptance_definitions"].values()] == list(NAMES)
    assert set(ACCEPTANCE_DEFINITIONS) <= set(js["summary"][0])

    from rich.console import Console

    from drifttool.analysis.report import print_comparison

    con = Console(record=True, width=220)
    print_comparison(con, cmp)
    text = con.export_text()
    for name in NAMES:
        assert name in text
    assert "meas. -" in text and "Long-context decay" in text  # measured - i.i.d., header on two lines
