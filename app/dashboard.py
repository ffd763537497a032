"""drifttool dashboard (entry). `streamlit run app/dashboard.py -- A.drift B.drift`, or `drifttool dashboard`.

Reads only the trace folders named on the command line (default: every sample_traces/*.drift). The sidebar
picks which of them the pages show: all of them when they hold at most 6 series together, else the first.
The page scripts live in app_pages/, not pages/: a folder named pages/ next to the entry script switches
Streamlit to its legacy multipage mode, which runs page files without this entry (no loading, no filters)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import dashlib  # noqa: E402
import streamlit as st  # noqa: E402

PAGES = [
    ("overview.py", "Overview", "overview"),
    ("depth.py", "Depth", "depth"),
    ("heads.py", "Heads", "heads"),
    ("context.py", "Context length", "context"),
    ("drilldown.py", "Prompt drill-down", "drilldown"),
    ("magnitudes.py", "Magnitudes", "magnitudes"),
    ("rejection.py", "What predicts rejection", "rejection"),
    ("trees.py", "Draft trees", "trees"),
    ("training.py", "Across training", "training"),
]

st.set_page_config(page_title="drifttool", layout="wide")
nav = st.navigation([st.Page(HERE / "app_pages" / f, title=t, url_path=u, default=(i == 0))
                     for i, (f, t, u) in enumerate(PAGES)])
keys = dashlib.load_traces()
if keys:
    dashlib.sidebar_filters(keys)
try:
    nav.run()
finally:
    dashlib.fill_notes()
