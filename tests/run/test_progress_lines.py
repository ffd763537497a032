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
