"""A per-head metric is named in the few places docs/architecture.md lists (its computation, the schema's
metric names, its label, the check gate's direction, the head sums' prompt-mass formula); every other stage
reads trace/schema.HEAD_METRICS. Adding one must not mean editing a dozen files again."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "drifttool"
ALLOWED = {"run/attention_stats.py", "trace/schema.py", "plots/base.py", "analysis/check.py", "analysis/views.py"}


def test_per_head_metric_names_live_in_the_listed_files():
    naming = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "own_mass" in p.read_text()}
    assert naming == ALLOWED


def test_the_architecture_doc_lists_the_same_files():
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    row = next(ln for ln in doc.splitlines() if ln.startswith("| a per-head metric"))
    after = row.split("|")[3]
    assert all(f"`{f}`" in after for f in ALLOWED)
