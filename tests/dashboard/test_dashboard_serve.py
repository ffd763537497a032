"""The dashboard server imports pandas, plotly and Streamlit before its warm-up thread starts (importing them from
two threads at once crashed the server at random with "partially initialized module 'pandas'"), and prints its URL
only after those imports succeeded."""

from __future__ import annotations

import sys
import threading

from drifttool.dashboard import serve as dashboard_serve


def test_heavy_imports_happen_before_the_warm_up_thread(monkeypatch, tmp_path, capsys):
    seen = {}

    class Spy:
        def __init__(self, target=None, args=(), name=None, daemon=None):
            seen["at_start"] = {m: m in sys.modules for m in ("pandas", "plotly.graph_objects", "streamlit.web.cli")}
            seen["name"] = name

        def start(self):
            seen["url_printed_before_thread"] = "dashboard: http://x" in capsys.readouterr().err

    import streamlit.web.cli as scli

    monkeypatch.setattr(threading, "Thread", Spy)
    monkeypatch.setattr(scli, "main", lambda *a, **k: seen.setdefault("ran", True))
    monkeypatch.setenv("DRIFTTOOL_DASHBOARD_URL", "dashboard: http://x")
    dashboard_serve.main([str(tmp_path / "app.py"), "--", "t.drift"])
    assert seen["name"] == "drifttool-warm" and all(seen["at_start"].values()), seen
    assert seen["url_printed_before_thread"] and seen["ran"]


def test_server_module_imports_them_in_main_not_lazily_in_the_thread():
    src = open(dashboard_serve.__file__).read()
    body = src[src.index("def main("):]
    assert body.index("import pandas") < body.index("threading.Thread(")
    assert body.index("import plotly.graph_objects") < body.index("threading.Thread(")
