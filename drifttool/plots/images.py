"""Single charts as PNG/SVG files for papers and PRs (the report's charts, through kaleido, an optional extra:
`pip install 'drifttool[export]'`; kaleido drives a local Chrome/Chromium)."""

from __future__ import annotations

import re
from pathlib import Path

from ..analysis.views import build_view
from ..errors import DriftError
from ..trace.reader import TraceData
from .html_report import charts

FORMATS = ("png", "svg")


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")


def export_images(traces: list[TraceData], folder: str | Path, fmt: str = "png", scale: float = 2.0) -> list[Path]:
    """Write every chart of the HTML report as `folder/NN_title.fmt`; returns the files written.
    DriftError (one line) when kaleido or a browser for it is missing, or the folder cannot be written."""
    if fmt not in FORMATS:
        raise DriftError(f"--image-format {fmt!r}: expected one of {', '.join(FORMATS)}")
    try:
        import kaleido  # noqa: F401 - plotly's write_image needs it
    except ImportError:
        raise DriftError("--images needs kaleido: pip install 'drifttool[export]'") from None
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DriftError(f"{out}: cannot create the image folder ({e.strerror})") from None
    figs, paths, heights = [], [], []
    for i, (title, fig) in enumerate(charts(build_view(traces)), start=1):
        figs.append(fig)
        paths.append(out / f"{i:02d}_{_slug(title)}.{fmt}")
        heights.append(max(int(fig.layout.height or 450), 300))
    import plotly.io as pio

    try:  # one browser session for every chart (a session per chart was slower and, on a loaded machine, raced)
        pio.write_images(figs, [str(p) for p in paths], format=fmt, width=1200, height=heights,
                         scale=scale if fmt == "png" else 1)
    except OSError as e:
        raise DriftError(f"{out}: cannot write the images ({e.strerror})") from None
    except Exception as e:  # noqa: BLE001 - kaleido's own errors (no Chrome found, browser crashed): one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DriftError(f"{out}: kaleido could not render the charts ({first}); it needs Chrome or Chromium "
                         "(kaleido.get_chrome() installs one)") from None
    return paths
