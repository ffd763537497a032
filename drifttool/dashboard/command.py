"""The `drifttool dashboard` command line: the app script, the `streamlit run` arguments (run through
drifttool.dashboard.serve) and the Host/Origin guard that keeps the dashboard local unless the user names
other hosts."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import DriftError


def dashboard_script() -> Path:
    """The Streamlit script of this package (drifttool/dashboard/app.py), in a checkout and in a wheel alike."""
    script = Path(__file__).resolve().parent / "app.py"
    if not script.is_file():
        raise DriftError(f"{script}: dashboard app not found; reinstall drifttool")
    return script


def dashboard_command(traces: list[str], port: int, host: str = "127.0.0.1", allow_hosts: list[str] | None = None,
                      ) -> list[str]:
    """The `streamlit run` command line for the dashboard."""
    import importlib.util

    script = dashboard_script()
    if importlib.util.find_spec("streamlit") is None:
        raise DriftError("streamlit is not installed; pip install 'drifttool[app]'")
    from importlib.metadata import version

    have = version("streamlit")
    if tuple(int(x) for x in have.split(".")[:2] if x.isdigit()) < STREAMLIT_MIN:
        raise DriftError(f"streamlit {have} lacks server.allowedHosts (DNS-rebinding protection for the dashboard); "
                         f"pip install 'streamlit>={'.'.join(map(str, STREAMLIT_MIN))}'")
    if not 1 <= port <= 65535:
        raise DriftError(f"--port {port}: expected 1..65535")
    if not host or any(c.isspace() for c in host):
        raise DriftError(f"--host {host!r}: expected an address such as 127.0.0.1 or 0.0.0.0")
    # drifttool.dashboard.serve = `streamlit run` that also reads the traces while the browser loads the page.
    # No file watcher: the app is not edited while it serves, and watching costs start-up time.
    return [sys.executable, "-m", "drifttool.dashboard.serve", str(script), "--server.address", host,
            "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--client.toolbarMode", "minimal", "--server.fileWatcherType", "none",
            *origin_guard(host, allow_hosts), "--", *[str(Path(t).absolute()) for t in traces]]


def origin_guard(host: str, allow_hosts: list[str] | None = None) -> list[str]:
    """Streamlit's Host/Origin checks: local names, plus the address given to --host (unless a wildcard) and
    any --allow-host names, so a remote box is reachable under the names its user chose and no other."""
    names = ["localhost", "127.0.0.1"]
    extra = [host] if host not in ("0.0.0.0", "::", *names) else []
    for n in [*extra, *(allow_hosts or [])]:
        if not n or any(c.isspace() or c in "/*" for c in n):
            raise DriftError(f"--allow-host {n!r}: expected a host name or address (no wildcards)")
        if n not in names:
            names.append(n)
    out = []
    for n in names:
        out += ["--server.allowedHosts", n]
    return out + ORIGIN_GUARD[4:]


# Binding to 127.0.0.1 does not stop DNS rebinding (a page on evil.example.com whose name now resolves to
# 127.0.0.1): Streamlit's own checks refuse a WebSocket whose Host is not a local name, or whose Origin is
# foreign, so no trace name or number streams to such a page.
STREAMLIT_MIN = (1, 67)  # the release these options are tested with (tests/dashboard/test_dashboard_origin.py)
ORIGIN_GUARD = ["--server.allowedHosts", "localhost", "--server.allowedHosts", "127.0.0.1",
                "--server.enableCORS", "true", "--server.enableXsrfProtection", "true"]
