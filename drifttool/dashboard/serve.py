"""The dashboard's server process (`python -m drifttool.dashboard.serve SCRIPT [streamlit options] -- TRACES`).

Streamlit runs the app script inside its server process, so whatever that process has imported and cached
the first browser visit does not pay for. This starts Streamlit's server as `streamlit run` would and, on a
side thread, imports the app's modules and reads the given traces into the app's shared caches while the
browser is still loading Streamlit's front end. A visit that arrives first simply waits on the same cache
entry (Streamlit computes a cached resource once). A trace that fails to load is left to the page, which
shows its one-line error."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

QUIET = ("streamlit.runtime.caching.cache_data_api", "streamlit.runtime.scriptrunner_utils.script_run_context")


def warm() -> None:
    """Import the app's helpers (drifttool.dashboard.lib: pandas, pyarrow, plotly, drifttool.analysis) and fill
    its caches for the traces in sys.argv[1:] (set as Streamlit sets it for the script). Never raises: the page
    reports."""
    # "No runtime found" / "missing ScriptRunContext": expected outside a script run, not worth a log line
    # (a filter, not a level: Streamlit resets its loggers' levels when it reads its config)
    only_warm = _NotFromThisThread()
    quiet = []
    try:
        for name in QUIET:  # the same logger objects Streamlit's modules get when they import
            quiet.append(logging.getLogger(name))
            quiet[-1].addFilter(only_warm)
        from drifttool.dashboard import lib

        lib.warm()
    except Exception:  # noqa: BLE001 - the app's own first run shows any problem, in one line
        pass
    finally:
        for q in quiet:
            q.removeFilter(only_warm)


class _NotFromThisThread(logging.Filter):
    """Drops warnings logged by the thread that created it (the warm-up), lets every other thread's through."""

    def __init__(self) -> None:
        super().__init__()
        self.ident = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.ident or record.levelno >= logging.ERROR


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    script = Path(argv[0])
    traces = argv[argv.index("--") + 1:] if "--" in argv else []
    sys.argv = [str(script), *traces]  # what Streamlit gives the script; the warm-up reads the same list
    # Imported here, before the warm-up thread starts: pandas' and plotly's (lazy) imports are not thread-safe,
    # and importing them from two threads at once crashed the server at random ("partially initialized module
    # 'pandas'", plotly's go.icicle) under load. The warm-up then only reads traces beside the browser's load.
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    from streamlit.web.cli import main as streamlit_main

    url = os.environ.pop("DRIFTTOOL_DASHBOARD_URL", "")
    if url:
        print(url, file=sys.stderr, flush=True)
    threading.Thread(target=warm, name="drifttool-warm", daemon=True).start()

    streamlit_main(args=["run", *argv], prog_name="streamlit")


if __name__ == "__main__":
    main()
