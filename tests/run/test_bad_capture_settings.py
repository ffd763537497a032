"""Capture settings refused before anything is written, each as one error line: devices that hold no values, a
tree child rank beyond every draft vocabulary (it left a trace folder behind)."""

from __future__ import annotations

import json

import pytest

from drifttool.cli import main
from drifttool.zoo import MODELS_DIR

T, D = MODELS_DIR / "plain" / "target", MODELS_DIR / "plain" / "eagle3"


@pytest.fixture()
def probes(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"id": "a", "token_ids": list(range(1, 13))}) + "\n")
    return p


@pytest.mark.parametrize("extra,why", [(["--device", "meta"], "holds no values"),
                                       (["--device", "foo"], "not a device name"),
                                       (["--tree", "[(0,), (100000,)]"], "draft vocabulary")])
def test_refused_before_anything_is_written(tmp_path, probes, capsys, extra, why):
    out = tmp_path / "x.drift"
    rc = main(["capture", "--target", str(T), "--drafter", str(D), "--probes", str(probes), "--out", str(out),
               "--max-new-tokens", "4", "--quiet", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and why in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("types", ["sliding_attention", [1], {"0": "sliding_attention"}])
def test_layer_types_must_be_a_list_of_strings(types):
    """A string layer_types was read as no list: the window dropped, and a wrong assumption recorded."""
    from drifttool.errors import DriftError
    from drifttool.model.ckpt_config import _window

    with pytest.raises(DriftError, match="layer_types"):
        _window({"layer_types": types, "sliding_window": 8}, "config.json", {})
    assert _window({"layer_types": ["sliding_attention"], "sliding_window": 8}, "config.json", {}) == 8
