"""compare --json states the n entropy rests on: the full rounds (--full-every), their prompts and groups, not the
n of the rounds every other mean rests on."""

from __future__ import annotations

import json

import numpy as np

import drifttool
from drifttool.analysis.compare import Comparison
from drifttool.analysis.export import comparison_json
from drifttool.cli import main
from drifttool.trace.reader import read_trace
from tests.support.capture import build_models, prompt, write_probes


def test_entropy_n_counts_full_rounds_and_their_prompts(tmp_path):
    m = build_models(tmp_path)
    probes = write_probes(tmp_path / "p.jsonl", [{"id": f"p{i}", "group": f"g{i // 2}", "token_ids": prompt(i, 12 + i),
                                                  "max_new_tokens": 6 + 6 * (i % 2)} for i in range(6)])
    out = tmp_path / "t.drift"
    assert main(["capture", "--target", str(m["target"]), "--drafter", f"e3={m['eagle3']}", "--probes", str(probes),
                 "--depth", "2", "--full-every", "2", "--keep-rows", "0", "--quiet", "--out", str(out)]) == 0
    t = drifttool.load(out)
    d = t.depths.merge(t.prompts[["prompt_id", "group"]], on="prompt_id")
    js = comparison_json(Comparison.of([read_trace(out)]))
    for row in js["per_depth"]:
        sub = d[d.depth == row["depth"]]
        full = sub[sub.entropy.notna()]
        assert row["n_rounds"] == len(sub) and row["n_entropy"] == len(full) < len(sub)
        assert row["n_entropy_prompts"] == full.prompt_id.nunique()
        assert row["n_entropy_groups"] == full.group.nunique()
        assert np.isclose(row["entropy"], full.entropy.astype(float).mean(), atol=1e-6)  # pooled over full rounds
    assert "n_entropy" in js["definitions"]
    json.dumps(js)
