"""Every manifest field the analyses use goes through the reader's typed schema: a bad value is one error line
naming the file and field, never a silently wrong window (`true` read as 1 made every round 'beyond') or a
traceback."""

from __future__ import annotations

import json

import pytest

from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.model.config import trained_window
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace


@pytest.fixture()
def trace(tmp_path):
    return write_trace(tmp_path / "t.drift", {"e3": {"accepted": [0, 1, 2, 3] * 3}}, 4)


def _set(path, where: str, key: str, value) -> None:
    m = json.loads((path / "manifest.json").read_text())
    if where == "drafter":
        m["drafters"][0][key] = value
    elif where == "rope":
        m["drafters"][0]["rope_scaling"] = {"original_max_position_embeddings": value}
    else:
        m["capture"][key] = value
    (path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("where,key", [("drafter", "trained_window"), ("drafter", "max_position_embeddings"),
                                       ("drafter", "sliding_window"), ("rope", "original_max_position_embeddings"),
                                       ("capture", "full_every"), ("capture", "keep_rows"),
                                       ("capture", "max_new_tokens")])
@pytest.mark.parametrize("value", [-5, True, 2.7, "abc"])
def test_bad_manifest_lengths_are_one_error_line(trace, capsys, where, key, value):
    _set(trace, where, key, value)
    with pytest.raises(DriftError, match=rf"manifest.json: field '[^']*{key}'"):
        read_trace(trace)
    assert main(["compare", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and key in err and len(err.strip().splitlines()) == 1


def test_good_values_still_read(trace):
    _set(trace, "drafter", "trained_window", 64)
    assert read_trace(trace).manifest["drafters"][0]["trained_window"] == 64
    assert trained_window({"trained_window": 64})["window"] == 64
    for bad in (True, 2.7, "abc", 0, -5):
        with pytest.raises(DriftError, match="trained_window"):
            trained_window({"trained_window": bad})
