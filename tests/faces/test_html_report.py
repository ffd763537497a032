"""`drifttool report TRACE -o report.html`: one self-contained file that opens offline in Chromium (every
request off the page's own file refused) and draws every chart the report lists; the verdict sentences are the
terminal's "In short"."""

from __future__ import annotations

from pathlib import Path

from drifttool.analysis.compare import Comparison
from drifttool.analysis.report import plain_summary
from drifttool.analysis.views import build_view
from drifttool.cli import main
from drifttool.plots.html_report import charts
from drifttool.trace.reader import read_trace
from tests.dashboard.test_dashboard_browser import ARGS, CHROMIUM, _require_browser

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "smollm2-long_code.drift"


def test_report_opens_offline_and_draws_every_chart(tmp_path, capsys):
    _require_browser()
    from playwright.sync_api import sync_playwright

    out = tmp_path / "report.html"
    assert main(["report", str(SAMPLE), "-o", str(out)]) == 0
    assert "report written" in capsys.readouterr().out
    text = out.read_text()
    trace = read_trace(SAMPLE)
    want = [name for name, _ in charts(build_view([trace]))]
    assert len(want) >= 6
    for s in plain_summary(Comparison.of([trace])):
        assert s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;") in text
    blocked = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})

            def route(r):
                if r.request.url.startswith("file://"):
                    return r.continue_()
                blocked.append(r.request.url)
                return r.abort()

            page.route("**/*", route)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri())
            page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(want)}",
                                   timeout=60_000)
            drawn = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
            titles = page.evaluate("[...document.querySelectorAll('h2')].map(h => h.textContent)")
        finally:
            browser.close()
    assert drawn == len(want) and not errors, errors
    assert blocked == []  # nothing fetched from the network: plotly.js is inlined
    assert [t for t in titles if t in want] == want


def test_report_refuses_an_unwritable_path(tmp_path, capsys):
    """A missing folder is refused before the report is rendered (tests/faces/test_early_refusals.py)."""
    assert main(["report", str(SAMPLE), "-o", str(tmp_path / "no" / "such" / "dir" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "dir does not exist" in err and "Traceback" not in err


def test_report_never_replaces_a_trace_file_or_an_existing_file(tmp_path, capsys):
    """`report -o T.drift/manifest.json` replaced the trace's manifest (the trace unreadable) and any existing file
    was replaced without asking."""
    import shutil

    trace = tmp_path / "t.drift"
    shutil.copytree(SAMPLE.parent / "smollm2-short_chat.drift", trace)
    before = (trace / "manifest.json").read_bytes()
    assert main(["report", str(trace), "-o", str(trace / "manifest.json")]) == 2
    assert "inside the trace folder" in capsys.readouterr().err and (trace / "manifest.json").read_bytes() == before
    keep = tmp_path / "mine.html"
    keep.write_text("mine")
    assert main(["report", str(trace), "-o", str(keep)]) == 2
    assert "add --overwrite" in capsys.readouterr().err and keep.read_text() == "mine"
    assert main(["report", str(trace), "-o", str(keep), "--overwrite"]) == 0
    assert str(keep.resolve()) in capsys.readouterr().out  # where it went, in full


def test_report_guards_by_what_the_target_is_not_its_name(tmp_path, capsys):
    """`-o link --overwrite` through a symlink into a trace, or into a trace folder not named `.drift`, replaced
    the manifest or a Parquet file with HTML (issue #51): the target is resolved and any file inside a folder that
    holds a trace's manifest.json is refused."""
    import shutil

    plain = tmp_path / "kept"  # a trace folder without the .drift suffix (reads as any trace)
    shutil.copytree(SAMPLE.parent / "smollm2-short_chat.drift", plain)
    shard = next((plain / "depths").glob("*.parquet"))
    files = {f: f.read_bytes() for f in (plain / "manifest.json", shard)}
    link = tmp_path / "report.html"
    link.symlink_to(plain / "manifest.json")
    dir_link = tmp_path / "out"
    dir_link.symlink_to(plain / "depths")
    for target in (link, plain / "manifest.json", shard, dir_link / shard.name, plain / "new.html"):
        assert main(["report", str(SAMPLE), "-o", str(target), "--overwrite"]) == 2, target
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in err and "inside the trace folder" in lines[0], err
        assert str(plain) in lines[0], lines[0]
    assert all(f.read_bytes() == b for f, b in files.items())
    assert link.is_symlink() and not (plain / "new.html").exists()


def test_report_images_writes_every_chart_as_png_and_svg(tmp_path, capsys):
    """`report --images DIR`: the report's charts as files through kaleido (the export extra), one per chart."""
    import pytest

    pytest.importorskip("kaleido")
    _require_browser()
    trace = SAMPLE.parent / "smollm2-short_chat.drift"
    want = len(charts(build_view([read_trace(trace)])))
    for fmt, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<svg")):
        folder = tmp_path / fmt
        assert main(["report", str(trace), "-o", str(tmp_path / "r.html"), "--images", str(folder),
                     "--image-format", fmt, "--overwrite"]) == 0
        files = sorted(folder.iterdir())
        assert len(files) == want and all(f.read_bytes().startswith(magic) for f in files), files
        assert f"{want} charts written" in capsys.readouterr().out
    assert main(["report", str(trace), "-o", str(tmp_path / "r2.html"), "--images", str(tmp_path / "x"),
                 "--image-format", "jpeg"]) == 2
    err = capsys.readouterr().err
    assert "--image-format 'jpeg'" in err and "Traceback" not in err


def test_report_opens_with_compares_answer_and_reads_in_words(tmp_path):
    """The report's "In short" is compare's (the counted sentence and table), then the answer with its CIs and p,
    then the findings with their tests; its tables name columns in words, values rounded (it showed `al_lo` and
    0.01377)."""
    import html as h
    import re

    from drifttool.analysis.answer import short, short_data
    from drifttool.analysis.report_stats import findings
    from drifttool.plots.html_report import html_report

    trace = read_trace(SAMPLE)
    text = html_report([trace])
    cmp = Comparison.of([trace])
    heads = re.findall(r"<h2>([^<]+)</h2>", text)
    assert heads[:3] == ["In short", "The answer", "Findings: every detected trend and difference, with its test"]
    lines = short(cmp)
    assert h.escape(lines[0].split(";")[0]) in text
    # In short as a table (not wrapped console text): every series' cells, heads in words
    sentence, heads, rows = short_data(cmp)
    assert f"<p>{h.escape(sentence)}</p>" in text and "<pre>" not in text
    for lab, cells in rows:
        assert "<tr><td>" + "</td><td>".join(h.escape(c) for c in [lab, *cells]) + "</td></tr>" in text
    assert all(f"<th>{h.escape(x)}</th>" in text for x in heads)
    for x in findings(cmp):
        assert h.escape(x) in text and (re.search(r"\bp ?[<0-9]", x) or "MDE" in x)  # a test, or its power
    tables = re.findall(r"<table>.*?</table>", text, re.S)
    cols = [c for t in tables for c in re.findall(r"<th>([^<]+)</th>", t)]
    assert "acceptance length" in cols and "sink lift at depth 1 (x uniform)" in cols
    assert not [c for c in cols if re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", c)]  # no raw column name
    cells = [c for t in tables for c in re.findall(r"<td>([^<]+)</td>", t)]
    assert not [c for c in cells if re.fullmatch(r"-?\d+\.\d{5,}", c)]  # rounded


def test_report_images_has_the_output_guards(tmp_path, capsys):
    """`report --images DIR` is guarded as `-o` is, before anything renders: never into a trace folder or through a
    link into one, never over charts of an earlier run without --overwrite."""
    import shutil

    trace = tmp_path / "t.drift"
    shutil.copytree(SAMPLE.parent / "smollm2-short_chat.drift", trace)
    before = sorted(p.name for p in trace.rglob("*"))
    link = tmp_path / "link"
    link.symlink_to(trace, target_is_directory=True)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "01_depth.png").write_bytes(b"x")
    for folder, msg in ((trace / "imgs", "inside the trace folder"), (link, "inside the trace folder"),
                        (tmp_path / "old", "holds 1 files of an earlier run")):
        assert main(["report", str(trace), "-o", str(tmp_path / "r.html"), "--images", str(folder), "--overwrite"
                     if folder == trace / "imgs" else "--title", "t"]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err
    assert sorted(p.name for p in trace.rglob("*")) == before and not (tmp_path / "r.html").exists()
    assert (tmp_path / "old" / "01_depth.png").read_bytes() == b"x"
