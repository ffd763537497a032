"""`drifttool demo` opens with the answer in words (does EAGLE-3 drift, does EAGLE-3.1 change it), each half read
against its null; the retired drift score is nowhere (it read "EAGLE-3.1 drifts 5x more" where both fall)."""

from __future__ import annotations

import re

from drifttool.cli import main


def test_demo_opens_with_the_answer(tmp_path, capsys):
    assert main(["demo", "--specimen", "sink", "--suite", "quick", "--depth", "4", "--max-new-tokens", "12",
                 "--quiet", "--out", str(tmp_path / "demo.drift")]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.strip()]
    assert lines[0].strip() == "In short" and "The answer" in out, lines[:3]
    flat = " ".join(out.split())
    assert re.search(r"Does eagle3 drift\? fed-back RMS (grows|shrinks|stays flat|changes by no factor the groups establish) x[0-9.]+ (\[[0-9., ]+\] |\(no CI: < 6 groups\) )?from depth 1 to 4", flat)
    assert "Does eagle3.1 change it?" in flat and "sink lift" in flat
    assert re.search(r"(drift|no drift|drift not established|uniform attention)[:;]", flat)  # the verdict's words
    assert "for these two checkpoints" in flat or "no test can reach p < 0.05" in flat
    assert "drift score" not in flat
