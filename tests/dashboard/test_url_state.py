"""The dashboard's view round-trips through its URL: a link's traces, probes, depth range and heads are the
session's filters on arrival (values the traces do not offer ignored), and the state written back is the link."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from drifttool.dashboard import url_state  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard" / "app.py"


def test_a_link_sets_the_view_and_the_view_writes_the_link(dash_traces, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(APP), str(dash_traces["a"]), str(dash_traces["b"])])
    at = AppTest.from_file(str(APP), default_timeout=1800)
    names = [Path(dash_traces["a"]).stem, Path(dash_traces["b"]).stem]  # a link names traces by folder name
    at.query_params.update({"traces": names[1], "depth": "2-3", "heads": "1,99", "probes": "nope"})
    at.run()
    assert not at.exception
    s = at.session_state
    assert s["flt_depth"] == (2, 3) and list(s["flt_heads"]) == [1]  # head 99 does not exist: dropped
    assert not s["flt_prompts"]  # an unknown probe is ignored, not an empty selection
    assert [lab.split(" (")[0] for lab in s["flt_traces"]] == [names[1]]
    assert {k: at.query_params[k] for k in at.query_params} == {"traces": names[1], "depth": "2-3", "heads": "1"}
    at.session_state["flt_depth"] = (1, 2)  # the user moves the slider: the URL follows
    at.run()
    assert at.query_params["depth"] == "1-2"


def test_read_is_once_per_session_and_checks_ranges():
    state, opts = {}, {"prompts": ["p0"], "tags": [], "heads": [0, 1], "depth": 4}
    url_state.read({"depth": "3-9"}, state, ["t"], ["t (x)"], opts)
    assert "flt_depth" not in state  # beyond K
    url_state.read({"depth": "2-3"}, state, ["t"], ["t (x)"], opts)
    assert "flt_depth" not in state  # applied once: later reruns keep the user's own choices


@pytest.mark.parametrize("params", [{"heads": "²"}, {"depth": "²-3"}, {"heads": "9" * 5000}, {"depth": "1-" + "9" * 5000},
                                    {"depth": "-"}, {"heads": ",,1x,-1"}])
def test_odd_numbers_in_a_link_fall_back_to_defaults(params):
    """'²' passes str.isdigit() and fails int(); 5,000 digits exceed int()'s limit: both crashed the page."""
    state, opts = {}, {"prompts": ["p0"], "tags": [], "heads": [0, 1], "depth": 4}
    url_state.read(params, state, ["t"], ["t (x)"], opts)
    assert "flt_heads" not in state and "flt_depth" not in state
    assert url_state.small_int("12") == 12 and url_state.small_int("٣") is None
