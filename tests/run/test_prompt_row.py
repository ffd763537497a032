"""The prompts table's per-prompt acceptance length: NaN for a prompt with no drafted round (it stored 1.0, which
reads as every draft rejected), and the readers (trace checks, compare, dashboard view) take the NaN."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from drifttool.run.loop import RoundRecord
from drifttool.run.records import prompt_row


def _round(accepted: int) -> RoundRecord:
    return RoundRecord(round=0, context_len=10, draft_ids=[1, 2], target_ids=[1, 2], accepted=accepted,
                       match=[True, False], bonus=0, input_ids=[1])


def test_prompt_without_rounds_has_no_acceptance_length():
    probe = SimpleNamespace(id="p", tags=[], group=None)
    row = prompt_row("d", probe, 10, 0, [], 0.1).iloc[0]
    assert row["n_rounds"] == 0 and math.isnan(row["mean_acceptance_length"])
    row = prompt_row("d", probe, 10, 4, [_round(1), _round(2)], 0.1).iloc[0]
    assert row["mean_acceptance_length"] == pytest.approx(2.5)


def test_readers_take_a_prompt_without_rounds(tmp_path):
    from drifttool.analysis.compare import Comparison
    from drifttool.analysis.views import Filters, build_view
    from drifttool.cli import main
    from drifttool.trace.reader import read_trace
    from drifttool.trace.synthetic import chain_tables, manifest, write

    def shards():
        yield "p0", chain_tables("d", "p0", [1, 2, 3, 0, 1], 4, values={"prompts": {"group": "g0", "prompt_len": 100}})
        yield "p1", chain_tables("d", "p1", [], 4, values={"prompts": {"group": "g1", "prompt_len": 100}})

    path = write(tmp_path / "zero.drift", manifest({"d": {}}, 4), shards())
    tr = read_trace(path)
    p = tr.prompts.set_index("prompt_id")
    assert p.loc["p0", "mean_acceptance_length"] == pytest.approx(2.4)
    assert math.isnan(p.loc["p1", "mean_acceptance_length"])
    assert tr.notes == []  # NaN by design there: not a "non-finite values" warning
    cmp = Comparison.of([tr])
    assert cmp.summary().iloc[0]["mean_acceptance_length"] == pytest.approx(2.4)  # from the rounds
    view = build_view([tr], Filters())
    assert view.prompts["mean_acceptance_length"].isna().sum() == 1
    assert main(["compare", str(path)]) == 0


def test_live_results_have_no_acceptance_length_without_rounds():
    """The live results (`speculate`, `speculate_tree`) say NaN, as the trace does, for a run with no drafted round."""
    import math

    from drifttool.run.loop import SpecResult
    from drifttool.run.tree_loop import TreeResult

    assert math.isnan(SpecResult(prompt_ids=[1], output_ids=[], rounds=[]).mean_acceptance_length)
    assert math.isnan(TreeResult(prompt_ids=[1], output_ids=[], rounds=[]).mean_acceptance_length)
