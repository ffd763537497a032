"""Progress off a terminal: plain lines (done/total, rate, ETA), so a long run piped to a file is never silent."""

from __future__ import annotations

import io

from drifttool.run import progress


def test_plain_lines_when_not_a_terminal(monkeypatch):
    buf = io.StringIO()  # not a TTY
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    with progress.progress_bar(3, 2, stream=buf) as bar:
        assert isinstance(bar, progress._Lines)
        bar.every = 0.0
        for i in range(3):
            bar.advance(f"p{i}", 5)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "capture: 0/3 prompts (x2 drafters)"
    assert lines[1].startswith("capture: 1/3 prompts (x2 drafters), 5 rounds") and "ETA" in lines[1]
    assert lines[-1].startswith("capture: 3/3 prompts") and lines[-1].endswith("done")


def test_lines_are_rate_limited():
    buf = io.StringIO()
    bar = progress._Lines(100, 1, buf, every=3600)
    for i in range(99):
        bar.advance(f"p{i}", 1)
    assert len(buf.getvalue().splitlines()) == 1  # only the opening line within the interval
    bar.advance("p99", 1)
    assert buf.getvalue().splitlines()[-1].startswith("capture: 100/100")


def test_a_long_command_says_it_is_still_running_and_stops_saying_it_when_done():
    """conform / report have no per-prompt bar: a line at least every PLAIN_EVERY_S (issue #62 item 4: conform
    printed nothing for 460 s), with the stage the command is in, and none once the block ends."""
    import io
    import time

    buf = io.StringIO()
    with progress.still_running("conform", every=0.05, stream=buf) as beat:
        beat.stage = "the engine's drafts"
        time.sleep(0.4)
    lines = buf.getvalue().splitlines()
    assert len(lines) >= 3 and all(ln.startswith("conform: still running, ") for ln in lines)
    assert lines[-1].endswith("(the engine's drafts)")
    time.sleep(0.2)
    assert buf.getvalue().splitlines() == lines  # nothing after the block


def test_report_prints_its_progress_lines(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    import pytest

    from drifttool.cli import main

    trace = Path(__file__).resolve().parents[2] / "sample_traces" / "smollm2-short_chat.drift"
    if not trace.is_dir():
        pytest.skip("sample traces not in this checkout")
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.05)
    assert main(["report", str(trace), "-o", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert "report: still running, " in err and "(rendering the HTML)" in err
