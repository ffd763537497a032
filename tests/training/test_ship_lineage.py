"""Shipping a warm-started run keeps the record of every run before it, so the shipped report's totals
(distinct tokens, steps, time) count the whole lineage; a run from unknown weights is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training import ship_real


def _report(folder: Path, variant: str, steps: int, tokens: int, init: str = "", **extra) -> None:
    (folder / variant).mkdir(parents=True, exist_ok=True)
    rep = {"variant": variant, "steps": steps, "train_tokens_seen": 3 * tokens, "cache_tokens": tokens,
           "cache_conversations": tokens // 1000, "train_seconds": 60 * steps, "draft_vocab_coverage": 0.9,
           "heldout_top1_per_step": [steps / 1000, 0.0, 0.0], "heldout_positions": 100,
           "train_args": {"init": init}, **extra}
    (folder / variant / "report.json").write_text(json.dumps(rep))


def test_lineage_appends_the_shipped_run(tmp_path):
    shipped, new = tmp_path / "shipped", tmp_path / "new"
    legacy = {"steps": 10, "train_tokens_seen": 30, "cache_tokens": 10_000, "cache_conversations": 10,
              "train_seconds": 600, "draft_vocab_coverage": 0.8, "eval": {"heldout_top1_per_step": [0.1]}}
    _report(shipped, "eagle3", 20, 20_000, init=str(shipped), warm_start=legacy)  # an older report's one field
    _report(new, "eagle3", 30, 30_000, init=str(shipped))
    runs = ship_real.lineage(new, shipped, "eagle3")
    assert [r["steps"] for r in runs] == [10, 20]
    assert [r["cache_tokens"] for r in runs] == [10_000, 20_000]
    assert runs[-1]["eval"]["heldout_top1_per_step"][0] == 0.02
    # the next run after this one keeps all three
    _report(shipped, "eagle3", 30, 30_000, init=str(shipped), earlier_runs=runs)
    assert [r["steps"] for r in ship_real.lineage(new, shipped, "eagle3")] == [10, 20, 30]


def test_a_run_from_random_weights_has_no_lineage(tmp_path):
    _report(tmp_path / "new", "eagle3", 5, 5_000)
    assert ship_real.lineage(tmp_path / "new", tmp_path / "shipped", "eagle3") == []


def test_a_run_from_other_weights_is_refused(tmp_path):
    _report(tmp_path / "shipped", "eagle3", 20, 20_000)
    _report(tmp_path / "new", "eagle3", 5, 5_000, init=str(tmp_path / "elsewhere"))
    with pytest.raises(SystemExit, match="train_args.init"):
        ship_real.lineage(tmp_path / "new", tmp_path / "shipped", "eagle3")
