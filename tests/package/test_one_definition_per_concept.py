"""One definition per concept: sink positions come from SinkSpec alone (the drill-down marks the slots
the capture counted, `tok:` sinks at position 0 included); the dtype is parsed once and recorded canonically
(`bf16` and `bfloat16` are one setting, so --resume accepts either)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drifttool import plots
from drifttool.dtypes import dtype_name
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace.reader import read_manifest, read_trace
from drifttool.trace.sinks import SinkSpec
from tests.support.capture import build_models, prompt, write_probes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("r16")
    m = build_models(root)
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 8), "max_new_tokens": 4}
                                            for i in range(2)])
    return {"root": root, **m, "probes": probes}


def cap(env, out, **kw):
    return run_capture(str(env["target"]), [DrafterSpec.parse(f"d={env['eagle3']}")], str(env["probes"]), str(out),
                       depth=2, max_new_tokens=4, progress=False, **kw)


def test_sink_positions_one_definition():
    spec = SinkSpec.parse("first:1;pos:4,50;tok:7")
    ids = [7, 1, 2, 7, 3, 7]
    assert spec.positions_in(ids) == [0, 3, 4, 5] == spec.mask(torch.tensor(ids)).nonzero()[:, 0].tolist()
    # the capture's host path (numpy ids), with and without token ids, equals the definition
    for rule in ("first:1;pos:4,50;tok:7", "first:3;pos:1,9", "pos:2", "tok:7,3", "first:0"):
        sp = SinkSpec.parse(rule)
        for n in (0, 1, 4, 6):
            assert sp.index(np.array(ids[:n])).tolist() == sp.positions_in(ids[:n]), (rule, n)
            assert np.flatnonzero(sp.mask(np.array(ids[:n]))).tolist() == sp.positions_in(ids[:n]), (rule, n)
    assert SinkSpec.from_dict(spec.to_dict()) == spec and SinkSpec.from_dict(None) == SinkSpec()
    # the drill-down's fallback (no recorded slots) uses the same SinkSpec; position 0's token is unknown there
    assert plots.sink_slots(spec.to_dict(), 6, ids[1:]) == [0, 3, 4, 5]
    assert plots.sink_slots({"first_n": 0, "positions": [], "token_ids": [7]}, 6, ids[1:]) == [3, 5]


def test_tok_sink_at_position_zero_is_marked_in_the_drill_down(env, tmp_path):
    """The bug: a `tok:` sink matching the prompt's first token was counted in the sink mass at capture but not
    marked by the drill-down (which cannot see position 0's token). The capture now records the slots."""
    first = prompt(0, 8)[0]
    out = cap(env, tmp_path / "t.drift", sink=SinkSpec.parse(f"tok:{first}"), keep_rows=2, limit=1)
    t = read_trace(out)
    idx = t.rows_index()
    assert len(idx)
    for r in idx.itertuples():
        row, slots = t.attention_row(r.drafter, r.prompt_id, int(r.round))
        ids = prompt(0, 8) + [int(s) for s in slots[7 : r.context_len - 1]]  # context token at each position
        want = [p for p in range(r.context_len) if ids[p] == first]
        assert 0 in want
        assert list(r.sink_slots) == want
        sinks = plots.sink_slots(t.manifest["capture"]["sink"], r.context_len, slots, r.sink_slots)
        assert sinks == want


def test_dtype_recorded_canonically_and_resume_accepts_either_spelling(env, tmp_path):
    assert dtype_name("bf16") == dtype_name("bfloat16") == dtype_name(torch.bfloat16) == "bfloat16"
    out = cap(env, tmp_path / "t.drift", dtype="bf16", limit=1)
    assert read_manifest(out)["capture"]["dtype"] == "bfloat16"
    part = cap(env, tmp_path / "p.drift", dtype="bfloat16", limit=1)
    assert read_manifest(part)["settings_hash"] == read_manifest(out)["settings_hash"]
    cap(env, part, dtype="bf16", limit=1, resume=True)  # refused before: capture.dtype differed
    assert read_manifest(part)["status"] == "complete"


def test_acceptance_length_is_defined_once():
    """Mean acceptance length (1 + accepted drafts per round, NaN without a round) is metric_table.acceptance_length:
    no other module of the package computes it (it used to be written in seven places; a fix had to be made twice)."""
    import ast
    from pathlib import Path

    import numpy as np

    from drifttool.trace.metric_table import acceptance_length

    def one_plus_accepted(node: ast.AST) -> bool:  # 1 + <anything naming accept...>, or <accept...>.add(1)
        src = ast.unparse(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            ones = [x for x in (node.left, node.right) if isinstance(x, ast.Constant) and x.value in (1, 1.0)]
            return bool(ones) and "accept" in src
        return isinstance(node, ast.Call) and src.endswith(".add(1.0)") and "accept" in src

    pkg = Path(__file__).resolve().parents[2] / "drifttool"
    hits = [f"{p.relative_to(pkg)}:{n.lineno}" for p in pkg.rglob("*.py") if p.name != "metric_table.py"
            for n in ast.walk(ast.parse(p.read_text())) if one_plus_accepted(n)]
    assert hits == []
    assert acceptance_length(6, 4) == 2.5 and np.isnan(acceptance_length(0, 0))
    assert acceptance_length(np.array([2, 0]), np.array([2, 0]))[0] == 2.0
