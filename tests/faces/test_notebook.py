"""The example notebook runs top to bottom on CPU and its key cells produce tables and figures."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NB = ROOT / "examples" / "inspect_drift.ipynb"


def _has_outputs(cell, mime: str) -> bool:
    return any(mime in o.get("data", {}) for o in cell.get("outputs", []))


@pytest.mark.skipif(not (ROOT / "sample_traces" / "smollm2-long_code.drift").is_dir()
                    or not (ROOT / "drifttool" / "zoo" / "models" / "sink" / "eagle3").is_dir(),
                    reason="needs the bundled sample traces and zoo models")
def test_example_notebook_executes():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NB, as_version=4)
    t0 = time.perf_counter()
    env_before = os.environ.get("PLOTLY_RENDERER")
    nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    assert env_before == os.environ.get("PLOTLY_RENDERER")
    elapsed = time.perf_counter() - t0
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not any(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))
    assert _has_outputs(code[0], "text/html")  # Trace _repr_html_
    assert _has_outputs(code[1], "text/html") and "eagle3.1" in str(code[1].outputs)  # summary table
    figs = [c for c in code if _has_outputs(c, "application/vnd.plotly.v1+json")]
    assert len(figs) >= 5, f"only {len(figs)} cells produced plotly figures"
    live = next(c for c in code if "dt.capture(" in c.source)
    assert "mean acceptance length" in str(live.outputs)  # live capture ran
    assert _has_outputs(live, "text/html")  # its per-depth table
    streams = "".join(o.get("text", "") for c in code for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "Loading weights" not in streams and "it/s]" not in streams, streams[-500:]  # no foreign progress bars
    assert elapsed < 200
