"""Norm health and the other weight faults no header shows (model/weight_health.py, in `conform`'s static part):
each planted in a checkpoint built to have it (a freshly initialised drafter's norms never trained; a norm moved
by 2 ulp; NaN in a weight; zero rows in lm_head; d2t out of range and not one-to-one; t2d disagreeing), and the
bundled drafters pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from drifttool import save_drafter
from drifttool.model.conformance import static_findings
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.model.weight_health import weight_findings

ROOT = Path(__file__).resolve().parents[2]


def _codes(folder) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in weight_findings(folder):
        out.setdefault(f.code, []).append(f.message)
    return out


@pytest.fixture()
def trained(tmp_path):
    """A tiny drafter saved as a checkpoint, its norms moved as training would move them."""
    t = tiny_target(vocab=64, hidden=32, layers=4, heads=4, kv_heads=2)
    folder = tmp_path / "d"
    save_drafter(tiny_drafter(t, seed=1, draft_vocab=32), folder)
    f = folder / "model.safetensors"
    w = load_file(str(f))
    g = torch.Generator().manual_seed(0)
    for k in w:
        if k.endswith("norm.weight"):
            w[k] = (1 + 0.1 * torch.randn(w[k].shape, generator=g)).to(w[k].dtype)
    save_file(w, str(f))
    return folder, f


def _edit(f, fn):
    w = load_file(str(f))
    fn(w)
    save_file(w, str(f))


@pytest.mark.parametrize("v", ["eagle3", "eagle3.1"])
def test_the_bundled_drafters_pass(v):
    assert weight_findings(ROOT / "drifttool/zoo/models/smollm2" / v) == []


def test_a_fresh_drafter_never_trained_its_norms(tmp_path):
    t = tiny_target(vocab=64, hidden=32, layers=4, heads=4, kv_heads=2)
    save_drafter(tiny_drafter(t, seed=1, fc_norm=True, norm_output=True), tmp_path / "fresh")
    got = _codes(tmp_path / "fresh")
    assert len(got["norm_never_trained"]) >= 4  # hidden, input, post-attention and output norms, fc_norm chunks
    assert any("fc_norm.0.weight" in m for m in got["norm_never_trained"])
    _, findings = static_findings(tmp_path / "fresh")  # and `conform` shows them
    assert any(f.code == "norm_never_trained" and f.severity == "warning" for f in findings)


def test_each_planted_fault_is_found(trained):
    folder, f = trained
    assert _codes(folder) == {}
    key = next(k for k in load_file(str(f)) if k.endswith("hidden_norm.weight"))

    def two_ulp(w):
        w[key] = torch.ones_like(w[key])
        w[key][0] = 1 + 2 * torch.finfo(w[key].dtype).eps
    _edit(f, two_ulp)
    assert list(_codes(folder)) == ["norm_barely_moved"]

    def nan(w):
        w[key] = 1 + 0.1 * torch.randn(w[key].shape)
        w["fc.weight"][0, 0] = float("nan")
    _edit(f, nan)
    got = _codes(folder)
    assert list(got) == ["nonfinite_weights"] and "fc.weight: 1 NaN" in got["nonfinite_weights"][0]

    def zero_rows(w):
        w["fc.weight"] = torch.randn(w["fc.weight"].shape)
        w["lm_head.weight"][3] = 0
        w["lm_head.weight"][7] = 0
    _edit(f, zero_rows)
    assert _codes(folder) == {"zero_rows": ["lm_head.weight: 2 of 32 rows are all zero"]}

    def bad_d2t(w):
        w["lm_head.weight"] = torch.randn(w["lm_head.weight"].shape)
        w["d2t"] = w["d2t"].clone()
        w["d2t"][0] = 1  # draft id 0 -> target 1, which draft id 1 (d2t 0) already has
    _edit(f, bad_d2t)
    got = _codes(folder)
    assert list(got) == ["vocab_mapping"] and "not one-to-one" in got["vocab_mapping"][0]

    def out_of_range(w):
        w["d2t"] = w["d2t"].clone()
        w["d2t"][0] = 0
        w["d2t"][-1] = 10_000
    _edit(f, out_of_range)
    assert "outside the target vocabulary" in _codes(folder)["vocab_mapping"][0]

    def t2d_disagrees(w):
        w["d2t"] = w["d2t"].clone()
        w["d2t"][-1] = 0
        w["t2d"] = torch.zeros_like(w["t2d"])
    _edit(f, t2d_disagrees)
    assert "disagree" in _codes(folder)["vocab_mapping"][0]
