"""`drifttool dashboard`: the streamlit command line it runs, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import drifttool.cli as cli
from drifttool.errors import DriftError

REPO = Path(__file__).resolve().parents[2]


def test_command_is_local_headless_and_passes_only_the_traces(tmp_path):
    cmd = cli.dashboard_command([str(tmp_path / "a.drift"), "b.drift"], 8600)
    # `streamlit run` through drifttool.dashboard.serve (which also reads the traces before a browser asks)
    assert cmd[1:3] == ["-m", "drifttool.dashboard.serve"] and cmd[3] == str(REPO / "drifttool" / "dashboard" / "app.py")
    opts = dict(zip(cmd[4:cmd.index("--"):2], cmd[5:cmd.index("--"):2]))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == "8600"
    assert opts["--server.headless"] == "true" and opts["--browser.gatherUsageStats"] == "false"
    assert opts["--server.fileWatcherType"] == "none"
    assert cmd[cmd.index("--") + 1:] == [str(tmp_path / "a.drift"), str(Path("b.drift").absolute())]


def test_missing_app_and_bad_port_are_one_line_errors(monkeypatch, tmp_path, capsys):
    assert cli.main(["dashboard", "--port", "70000"]) == 2
    assert "--port 70000" in capsys.readouterr().err
    import drifttool.dashboard.command as dcmd

    monkeypatch.setattr(dcmd, "__file__", str(tmp_path / "drifttool" / "dashboard" / "command.py"))
    try:
        cli.dashboard_command([], 8501)
    except DriftError as e:
        assert "dashboard app not found" in str(e) and str(tmp_path / "drifttool" / "dashboard" / "app.py") in str(e)
    else:
        raise AssertionError("expected DriftError")


def test_host_option_sets_the_listen_address_and_rejects_junk(capsys):
    cmd = cli.dashboard_command(["a.drift"], 8600, host="0.0.0.0")
    opts = dict(zip(cmd[4:cmd.index("--"):2], cmd[5:cmd.index("--"):2]))
    assert opts["--server.address"] == "0.0.0.0"
    assert cli.main(["dashboard", "x.drift", "--host", "a b"]) == 2
    assert "--host" in capsys.readouterr().err


def test_bundled_suites_by_name_and_sample_traces_on_demand(monkeypatch, tmp_path):
    from drifttool import demo

    assert demo.bundled_suite("long_code") == REPO / "probes" / "long_code.jsonl"
    assert demo.bundled_suite("real/doc_qa") == REPO / "probes" / "real" / "doc_qa.jsonl"
    assert demo.bundled_suite("no_such_suite") is None
    # an install without sample_traces/ (a wheel): the cached demo trace, built only when asked to
    monkeypatch.setattr(demo, "REPO", tmp_path / "site-packages")
    monkeypatch.setenv("DRIFTTOOL_CACHE", str(tmp_path / "cache"))
    assert demo.sample_traces(build=False) == []
    built = []
    monkeypatch.setattr(demo, "run_demo", lambda out, progress=True: built.append(out) or Path(out))
    got = demo.sample_traces(log=lambda m: None)
    assert built == [str(tmp_path / "cache" / "samples" / "demo.drift")] and got == [Path(built[0])]
    d = tmp_path / "cache" / "samples" / "demo.drift"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text('{"status": "complete"}')
    assert demo.sample_traces(build=False) == [d]  # captured once, then reused


def test_origin_guard_follows_host_and_allow_host():
    """--host X adds X to Streamlit's allowed Host names (else a remote box refuses its own user); a wildcard
    bind adds nothing but what --allow-host names; wildcards in names are refused."""
    import pytest

    from drifttool.cli import origin_guard
    from drifttool.errors import DriftError

    def allowed(args):
        return [args[i + 1] for i, a in enumerate(args) if a == "--server.allowedHosts"]

    assert allowed(origin_guard("127.0.0.1")) == ["localhost", "127.0.0.1"]
    assert allowed(origin_guard("10.0.0.5")) == ["localhost", "127.0.0.1", "10.0.0.5"]
    assert allowed(origin_guard("0.0.0.0")) == ["localhost", "127.0.0.1"]
    assert allowed(origin_guard("0.0.0.0", ["gpu-box.lan"])) == ["localhost", "127.0.0.1", "gpu-box.lan"]
    assert "--server.enableXsrfProtection" in origin_guard("10.0.0.5")
    with pytest.raises(DriftError):
        origin_guard("0.0.0.0", ["*"])


def test_unreadable_traces_are_named_in_the_terminal(tmp_path, capsys, monkeypatch):
    """`dashboard nope.drift` started and said nothing in the terminal (only the page said it skipped the trace)."""
    import os
    import subprocess

    assert cli.main(["dashboard", str(tmp_path / "nope.drift")]) == 2
    err = capsys.readouterr().err
    assert "skipped" in err and "nope.drift" in err and "nothing to show" in err
    good = REPO / "sample_traces" / "smollm2-short_chat.drift"
    if good.is_dir():
        launched = []
        monkeypatch.setattr(os, "execv", lambda path, cmd: launched.append(cmd))  # no server is started
        monkeypatch.setattr(subprocess, "call", lambda cmd: launched.append(cmd) or 0)
        cli.main(["dashboard", str(tmp_path / "nope.drift"), str(good)])
        assert "skipped" in capsys.readouterr().err
        assert launched and str(good) in launched[0] and str(tmp_path / "nope.drift") not in launched[0]
