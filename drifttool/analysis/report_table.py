"""Cell formatting shared by the terminal reports (report, report_stats): values with their CI on the next line,
compact tables that fold instead of cutting, series labels that wrap after the trace name, series order."""

from __future__ import annotations

from rich import box
from rich.markup import escape as _e
from rich.table import Table

from .fmt import fmt_ci

SERIES_WIDTH = 20  # series labels longer than this wrap inside their cell (after the colon)
SERIES_PART_MAX = 32  # a trace or drafter name up to this long stays on one line (longer ones fold)


def fmt(v, lo=None, hi=None, d=3) -> str:
    """'v', or 'v' and '[lo, hi]' on the next line: analysis.fmt.fmt_ci's terminal style, 3 decimals unless told."""
    return fmt_ci(v, lo, hi, d, style="terminal")


def table(title: str, *cols: str, widths: dict[str, int] | None = None) -> Table:
    """A compact table: no outer padding or vertical rules, cells fold instead of being cut. `widths`: the
    minimum width of some columns (the series column's is its longest label, up to SERIES_WIDTH)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1),
              show_edge=False)
    widths = widths or {}
    for c in cols:
        if c == "series":
            t.add_column(c, min_width=widths.get(c), max_width=max(SERIES_WIDTH, widths.get(c) or 0),
                         overflow="fold")
        else:
            t.add_column(c, overflow="fold", min_width=widths.get(c),
                         justify="left" if c in ("depth", "context", "side", "contexts") else "right")
    return t


def label(series: str) -> str:
    """A series label for a table cell: 'trace:drafter' breaks after the colon when it is too long."""
    s = _e(str(series))
    return s.replace(":", ":\n", 1) if len(s) > SERIES_WIDTH and ":" in s else s


def _cut(s: str) -> list[str]:
    """The lines label() breaks a long 'trace:drafter' into (the colon stays on the first)."""
    a, sep, b = s.partition(":")
    return [a + sep, b] if sep else [s]


def series_width(labels) -> dict[str, int]:
    """Width of the series column: its longest label, or, for labels broken after the colon, its longest trace or
    drafter name (up to SERIES_PART_MAX), so that no name breaks inside itself."""
    parts = [p for x in labels for p in (_cut(str(x)) if len(str(x)) > SERIES_WIDTH else [str(x)])]
    return {"series": min(SERIES_PART_MAX, max((len(p) for p in parts), default=6))}


def order(cmp) -> dict[str, int]:
    return {s.label: i for i, s in enumerate(cmp.series)}
