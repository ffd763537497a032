"""`compare`'s "In short" on two shipped sample traces (six drafters): at most 12 lines, within 80 columns, one
row per series whose numbers are the summary's, every arrow its own paired test's, the verdict word the summary's; no series name broken inside
itself anywhere in the report."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from rich.console import Console

from drifttool.analysis.answer import VERDICT_SHORT, short
from drifttool.analysis.compare import Comparison
from drifttool.analysis.report import print_comparison
from drifttool.analysis.verdict import FLAT
from drifttool.trace.reader import read_trace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def two():
    return Comparison.of([read_trace(SAMPLES / "smollm2-long_code.drift"),
                          read_trace(SAMPLES / "smollm2-agent_traces.drift")])


def test_in_short_is_a_dozen_lines_whose_numbers_are_the_summary(two):
    con = Console(record=True, width=80, color_system=None)
    print_comparison(con, two, context=False)
    text = con.export_text()
    lines = text.splitlines()
    start = lines.index("In short")
    block = lines[start + 1:lines.index("The answer")]
    assert 1 + len(block) <= 15 and max(map(len, lines)) <= 80, block
    assert block == short(two)
    s = two.summary().set_index("series")
    ad = two.acceptance_differences().set_index("series")
    for label in s.index:
        row = next(x for x in block if x.startswith(label.removeprefix("smollm2-")))
        r = s.loc[label]
        # every arrow is its own paired test's: detected (p < 0.05, both sides agree) beyond the flat band, else ·
        for col in ("rms_growth", "recency_ratio"):
            v = r[col]
            if v != v:
                assert " - " in row or row.split()[2] == "-"
                continue
            beyond = abs(math.log(v)) >= math.log(FLAT)
            up = r[f"{col}_p"] < 0.05 and r[f"{col}_mean_log"] > 0 and v > 1 and beyond
            down = r[f"{col}_p"] < 0.05 and r[f"{col}_mean_log"] < 0 and v < 1 and beyond
            assert f"x{v:.2f}" + ("↑" if up else "↓" if down else "·") in row, (col, row)
        assert f"{r.sink_lift_d1:.2f}" + ("↑" if r.sink_lift_d1_lo > 1.05 else "·") in row
        want = VERDICT_SHORT[r.drift_verdict] + (f" d{r.drift_depths}" if r.drift_verdict == "drift" else "")
        assert row.rstrip().endswith(want), (want, row)
        if label in ad.index:
            d = ad.loc[label]
            assert f"{d.difference:+.2f}" + ("↑" if d.p < 0.05 and d.difference > 0 else "↓" if d.p < 0.05 else "·") \
                in row
    counted = " ".join(block[:3])
    n = len(s)
    assert f"over {n} series" in counted
    for v in s.drift_verdict.unique():
        assert f"{(s.drift_verdict == v).sum()} {v}" in counted


def test_no_series_name_breaks_inside_itself(two):
    con = Console(record=True, width=80, color_system=None)
    print_comparison(con, two)
    text = con.export_text()
    for trace in ("smollm2-long_code", "smollm2-agent_traces"):
        assert re.search(rf"^{trace}:\s", text, re.M)  # the trace name whole with its colon ...
    assert not re.search(r"^\s*:\s*$|^\s*:\s*eagle", text, re.M)  # ... never a colon left alone
    assert not re.search(r"^(mollm2|ollm2|_traces|traces:|_code:|code:)", text, re.M)
