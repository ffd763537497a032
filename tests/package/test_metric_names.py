"""A per-head metric is named where docs/architecture.md says: its declaration (trace/metric_table.py) alone. Its
computation follows the table's rules (context key sets, tail slot rules: trace/key_sets.py, run/attention_stats.py),
and every other stage reads the table."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "drifttool"
ALLOWED = {"trace/metric_table.py"}  # the declaration


def test_per_head_metric_names_live_in_the_listed_files():
    naming = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "own_mass" in p.read_text()}
    assert naming == ALLOWED


def test_the_architecture_doc_lists_the_same_files():
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    row = next(ln for ln in doc.splitlines() if ln.startswith("| a per-head metric"))
    after = row.split("|")[3]
    assert all(f"`{f}`" in after for f in ALLOWED)
