"""The terminal report (`drifttool compare` / `demo`) at 80 columns: nothing cut, CIs whole, the drafters of
one depth on adjacent rows, a plain-language summary whose numbers are the summary's; break-even wording
that agrees with the measured acceptance length."""

from __future__ import annotations

import math
import re
import shutil

import pytest
from rich.console import Console

from drifttool.analysis import decay as dc
from drifttool.analysis.compare import Comparison
from drifttool.analysis.report import plain_summary, print_comparison
from drifttool.analysis.report_stats import findings
from drifttool.trace.reader import read_trace


def _render(cmp: Comparison, width: int = 80) -> str:
    con = Console(record=True, width=width, color_system=None)
    print_comparison(con, cmp)
    return con.export_text()


@pytest.fixture(scope="module")
def three(dash_traces):
    return Comparison.of([read_trace(dash_traces["a"]), read_trace(dash_traces["b"])])


def test_report_fits_80_columns_without_cutting_names_or_cis(three):
    text = _render(three)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in text
    s = three.summary()
    for _, r in s.iterrows():
        if r.groups < 6:  # too few groups for a bootstrap CI (analysis.metrics.MIN_CLUSTERS)
            assert r.al_lo != r.al_lo and r.self_lift_trend_lo != r.self_lift_trend_lo
            continue
        assert f"[{r.al_lo:.2f}, {r.al_hi:.2f}]" in text  # the CI whole, on the line under its value
        assert f"[{r.self_lift_trend_lo:.2f}, {r.self_lift_trend_hi:.2f}]" in text
        assert re.search(rf"^{re.escape(r.series)}\s", text, re.M)  # the label whole, at the start of a row
    # per-depth rows: all drafters of depth 1, then of depth 2, ...: (depth, series) in that order
    block = text[text.index("Per depth: attention against"):text.index("Per depth: attention masses")]
    rows = re.findall(r"^(\d+)\s+(e3post|e31|e3)\s", block, re.M)
    assert rows == [(str(d), s) for d in range(1, 5) for s in ("e3", "e31", "e3post")]


def test_long_trace_labels_wrap_after_the_colon(dash_traces, tmp_path):
    shutil.copytree(dash_traces["a"], tmp_path / "second_trace_long.drift")
    cmp = Comparison.of([read_trace(dash_traces["a"]), read_trace(tmp_path / "second_trace_long.drift")])
    text = _render(cmp)
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    # a label longer than the column breaks after its colon, the drafter part whole on the next line; one that fits
    # stays whole; never a break inside a name
    assert re.search(r"^second_trace_long:\s", text, re.M) and re.search(r"^\s*e31\s", text, re.M)
    assert not re.search(r"^(econd|_trace|ace_long|long:|:\s*$)", text, re.M)


def test_plain_summary_and_findings_state_the_numbers_and_their_power(three):
    s = three.summary().set_index("series")
    lines = plain_summary(three)  # the answer: EAGLE-3 first, then each drafter against it
    assert len(lines) == 3 and lines[0].startswith("Does e3 drift?") and lines[1].startswith("Does e31 change it?")
    assert lines[2].startswith("Does e3post change it?")
    for i, label in enumerate(("e3", "e31")):  # the hidden-state half: RMS growth over the same rounds, its CI and p
        r = s.loc[label]
        assert f"x{r.rms_growth:.2f} [{r.rms_growth_lo:.2f}, {r.rms_growth_hi:.2f}] from depth 1" in lines[i]
        assert "drift" in lines[i]
    assert "2 groups, no test can reach p < 0.05" in lines[2]  # e3post ran 2 groups: says why, no number
    assert "drift score" not in " ".join(lines)
    assert "CIs overlap" not in " ".join(lines)  # overlap of CIs is no test; the findings carry the tests
    ad = three.acceptance_differences().set_index("series")
    found = findings(three)
    for label in ("e31", "e3post"):
        r = ad.loc[label]
        line = next(x for x in found if x.startswith(f"{label} vs e3: acceptance length"))
        assert f"paired difference {r.difference:+.2f} [" in line and f"{int(r.n_groups)} groups" in line
        if r.p < 0.05:
            assert "detected" in line and "no difference" not in line
        elif not r.mde <= r.base_value - 1:
            assert "underpowered" in line
        else:
            assert f"no difference detected (MDE {r.mde:.2f}" in line
    # e3post ran 2 prompts (2 groups): no sign-flip test over 2 groups reaches p < 0.05
    assert ad.loc["e3post", "n_groups"] == 2 and "underpowered" in next(x for x in found if x.startswith("e3post"))
    text = _render(three)
    assert text.rstrip().endswith(found[-1].split()[-1])  # the report ends with the findings
    assert text.lstrip().startswith("In short")  # ... and opens with the answer (counted, then in words)


def test_break_even_never_says_below_when_the_measured_length_is_above():
    rising = {"intercept": 1.0, "slope": 0.1}  # fitted AL at 128 tokens: 1.7, below 2.0 ...
    assert dc.crossing(rising, 2.0, 128, 1024)[1].startswith("below")
    assert "below" not in dc.crossing(rising, 2.0, 128, 1024, measured=2.4)[1]  # ... but measured 2.4
    falling = {"intercept": 3.0, "slope": -0.2}  # crosses 2.0 at 32 tokens, left of the measured range
    at, status = dc.crossing(falling, 2.0, 128, 1024, measured=2.3)
    assert at == pytest.approx(32) and "below" not in status.split(";")[0] and status.startswith("above")
    assert dc.crossing(falling, 2.0, 128, 1024, measured=1.5)[1] == "below break-even over the whole measured range"
    far = {"intercept": 3.0, "slope": -0.05}  # crosses beyond the range, yet measured is already below
    assert dc.crossing(far, 2.4, 128, 1024, measured=2.2)[1].startswith("below break-even on average")
    assert math.isnan(dc.crossing(falling, float("nan"), 1, 2)[0] or float("nan"))


def test_break_even_line_names_the_measured_length(three):
    text = _render(three)
    dt = dc.decay_table(three, breakeven=1.5)
    con = Console(record=True, width=80, color_system=None)
    print_comparison(con, three, breakeven=1.5)
    out = con.export_text()
    for _, r in dt.iterrows():
        side = "above" if r.measured_al >= 1.5 else "below"
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{r.series}: measured AL"))
        assert f"measured AL {r.measured_al:.2f} vs break-even 1.50" in line
        if side == "above":
            assert "below" not in out[out.index(line):].split(";")[0]
    assert "Break-even AL = 1 + K*c" in text
