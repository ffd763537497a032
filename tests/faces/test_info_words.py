"""Issue 53 item 7: `drifttool info` prints settings in words, never a raw Python dict or list
(`sink={'first_n': 0, 'positions': [0], ...}`, `flags={'fc_norm': False, ...}`, `tree={'kind': ...}`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drifttool.cli import main
from drifttool.trace.describe import flags_on_text, overrides_text, sink_text, tree_text

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.parametrize("trace, words", [
    ("smollm2-long_code.drift", ["sink: position 0;", "flags on: none", "flags on: fc_norm, norm_output",
                                 "overridden: norm_output: False -> True", "aux=2, 15, 27"]),
    ("trees/smollm2-quick-tree.drift", ["tree=dynamic:top_k=4,depth=5,total=8"]),
])
def test_info_prints_words_not_dicts(trace, words, capsys, monkeypatch):
    if not (SAMPLES / trace).is_dir():
        pytest.skip(f"{trace} not in this checkout")
    monkeypatch.setenv("COLUMNS", "200")  # one line per record, so each phrase is whole
    assert main(["info", str(SAMPLES / trace)]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "[" not in out, out
    for w in words:
        assert w in out, (w, out)


def test_the_phrases():
    assert sink_text({"first_n": 4, "positions": [], "token_ids": []}) == "the first 4 positions"
    assert sink_text({"first_n": 0, "positions": [0, 7], "token_ids": [2], "auto": True}) == \
        "auto: positions 0, 7 + token id 2"
    assert sink_text({"first_n": 0, "target": True}) == "the target's own sink"
    assert sink_text({"first_n": "x"}) == "{'first_n': 'x'}"  # a damaged manifest: shown as it is, no traceback
    assert tree_text({"kind": "static", "paths": [[0], [1], [0, 0]]}) == "[(0,), (1,), (0, 0)]"
    assert flags_on_text({"fc_norm": True, "norm_output": False}) == "fc_norm"
    assert overrides_text({"norm_output": {"checkpoint": False, "override": True}}) == "norm_output: False -> True"
