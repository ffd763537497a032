"""drifttool dashboard: the script `drifttool dashboard` has Streamlit run (through drifttool.dashboard.serve);
from a checkout also `streamlit run app/dashboard.py -- A.drift B.drift`.

Reads only the trace folders named on the command line (default: every sample_traces/*.drift, and the
tree trace(s) in sample_traces/trees/ for the Draft trees page). The sidebar
picks which of them the pages show: all of them when they hold at most 6 series together, else the first.
Every page (app_pages/*.py) is registered here with st.navigation, so each visit runs this script first
(loading, filters), then the page. The folder is app_pages/, not pages/: a folder named pages/ next to the
entry script switches Streamlit to its legacy multipage mode, which runs page files without this entry (no
loading, no filters)."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

from drifttool.dashboard import lib

PAGES_DIR = Path(__file__).resolve().parent / "app_pages"
LIVE_REFRESH_S = 30
CHAIN = ("probes", "tags", "depth")  # per-head filters only where a page reads heads (lib.FILTERS)
PAGES = [  # (file, title, url path, the sidebar filters the page applies: the others are hidden there)
    ("overview.py", "Overview", "overview", CHAIN),
    ("depth.py", "Depth", "depth", CHAIN),
    ("heads.py", "Heads", "heads", (*CHAIN, "heads")),
    ("context.py", "Context length", "context", CHAIN),
    ("drilldown.py", "Prompt drill-down", "drilldown", ("probes", "tags")),
    ("magnitudes.py", "Magnitudes", "magnitudes", CHAIN),
    ("rejection.py", "What tracks rejection", "rejection", CHAIN),
    ("trees.py", "Draft trees", "trees", ()),
    ("training.py", "Across training", "training", CHAIN),
    ("patching.py", "Interventions", "interventions", ()),
]


def pages() -> list:
    """The pages in menu order. The first is the default, served at `/`; Streamlit then no longer serves it at its
    own url_path, so `/overview` (a link, a bookmark, what the other pages' paths suggest) would open "Page not
    found": a hidden second entry for the same file answers there."""
    first, title, path, _ = PAGES[0]
    return ([st.Page(PAGES_DIR / first, title=title, url_path="home", default=True)]
            + [st.Page(PAGES_DIR / f, title=t, url_path=u) for f, t, u, _ in PAGES[1:]]
            + [st.Page(PAGES_DIR / first, title=title, url_path=path, visibility="hidden")])


def main() -> None:
    """One script run: page config, navigation, the traces and the sidebar filters, then the chosen page."""
    st.set_page_config(page_title="drifttool", layout="wide")
    nav = st.navigation(pages())
    used = next((x for _, t, _, x in PAGES if t == nav.title), lib.FILTERS)
    keys = lib.load_traces()
    if keys:
        lib.sidebar_filters(keys, used)
        lib.sync_url(lib.chain_keys(lib.checked_traces()[0]))  # the view in the URL (url_state): a link opens the same view
    if any(lib.is_live(Path(a)) for a in sys.argv[1:]):
        _watch_live()
    try:
        nav.run()
    finally:
        lib.fill_notes()


@st.fragment(run_every=LIVE_REFRESH_S)
def _watch_live() -> None:
    """A live monitor folder: rerun the page when a segment or a shard was added (checked every 30 s)."""
    sig = lib.live_signature()
    seen = st.session_state.setdefault("_live_sig", sig)
    st.sidebar.caption(f"Live: {len(sig)} segment(s); refreshed when the monitor writes (every {LIVE_REFRESH_S} s).")
    if sig != seen:
        st.session_state["_live_sig"] = sig
        st.rerun(scope="app")


if __name__ == "__main__":  # Streamlit runs this file as __main__
    main()
