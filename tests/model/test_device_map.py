"""Big targets: placement by device_map (the target spread, the drafter on its last device) and bfloat16 end to
end. Without a GPU the placement runs on CPU (accelerate maps everything to "cpu"), which checks the code path
and that it changes no number; the multi-GPU and CUDA checks live in scripts/gpu_check.sh."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import drifttool
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.model.target import Target, load_target
from drifttool.model.tiny import tiny_target
from drifttool.run.engines.hf import DrafterSpec, drafter_device, run_capture
from tests.support.capture import TINY, build_models, prompt, write_probes


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("dm")
    p = build_models(root)
    p["probes"] = write_probes(
        root / "probes.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 12)} for i in range(2)]
    )
    return p


def test_device_map_auto_on_cpu_runs_the_same_numbers(paths, monkeypatch):
    from transformers import AutoModelForCausalLM

    seen, real = [], AutoModelForCausalLM.from_pretrained

    def spy(*a, **kw):
        seen.append(kw.get("device_map"))
        return real(*a, **kw)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    plain, mapped = load_target(paths["target"]), load_target(paths["target"], device_map="auto")
    assert seen == [None, "auto"]  # placement is transformers/accelerate's (one device: no hf_device_map)
    assert mapped.devices == ["cpu"] and mapped.last_device == torch.device("cpu")
    ids = torch.tensor(prompt(5, 10))
    a, b = plain.forward(ids), mapped.forward(ids)
    torch.testing.assert_close(a.logits, b.logits, atol=0, rtol=0)
    torch.testing.assert_close(a.features, b.features, atol=0, rtol=0)


def test_drafter_goes_to_the_targets_last_device():
    """A target whose lm_head sits on another device than its embeddings: ids go to the first, the drafter to
    the last. (On CPU-only machines the other device is `meta`, which holds no data; nothing is run.)"""
    t = tiny_target(**TINY)
    t.model.lm_head.to("meta")
    tgt = Target(t.model)
    assert tgt.device == torch.device("cpu") and tgt.last_device == torch.device("meta")
    assert tgt.devices == ["cpu", "meta"]
    assert drafter_device(tgt, "cpu", "auto") == "meta"
    assert drafter_device(tgt, "cpu", None) == "cpu"


def test_capture_with_device_map_records_it_and_matches(paths, tmp_path):
    specs = [DrafterSpec.parse(f"e3={paths['eagle3']}")]
    a = drifttool.load(
        run_capture(
            str(paths["target"]),
            specs,
            str(paths["probes"]),
            str(tmp_path / "a.drift"),
            depth=3,
            max_new_tokens=8,
            progress=False,
        )
    )
    b = drifttool.load(
        run_capture(
            str(paths["target"]),
            specs,
            str(paths["probes"]),
            str(tmp_path / "b.drift"),
            depth=3,
            max_new_tokens=8,
            progress=False,
            device_map="auto",
        )
    )
    assert b.manifest["capture"]["device_map"] == "auto" and "device_map" not in a.manifest["capture"]
    for c in ("draft_id", "accepted", "sink_mass", "draft_mass", "rms_post"):
        np.testing.assert_array_equal(a.depths[c].to_numpy(), b.depths[c].to_numpy(), err_msg=c)


def test_bad_device_map_is_one_line(paths, tmp_path, capsys):
    argv = [
        "capture",
        "--target",
        str(paths["target"]),
        "--drafter",
        str(paths["eagle3"]),
        "--probes",
        str(paths["probes"]),
        "--out",
        str(tmp_path / "x.drift"),
        "--quiet",
    ]
    assert main([*argv, "--device-map", "everywhere"]) == 2
    err = capsys.readouterr().err
    assert "--device-map 'everywhere': expected one of auto" in err and "Traceback" not in err
    assert main([*argv, "--device-map", "auto", "--engine", "vllm"]) == 2
    assert "--device-map: only with --engine hf" in capsys.readouterr().err
    assert not (tmp_path / "x.drift").exists()
    with pytest.raises(DriftError, match="device_map: expected a name"):
        load_target(paths["target"], device_map=3)


def test_bfloat16_end_to_end(paths, tmp_path):
    """--dtype bf16 (either spelling) loads target and drafter in bfloat16, records 'bfloat16', and measures
    the same attention as float32 up to bfloat16 rounding."""
    base = [
        "capture",
        "--target",
        str(paths["target"]),
        "--drafter",
        f"e3={paths['eagle3']}",
        "--probes",
        str(paths["probes"]),
        "--depth",
        "3",
        "--max-new-tokens",
        "8",
        "--quiet",
        "--mode",
        "teacher-forced",
    ]
    assert main([*base, "--out", str(tmp_path / "f32.drift")]) == 0
    assert main([*base, "--out", str(tmp_path / "bf16.drift"), "--dtype", "bf16"]) == 0
    f32, bf = drifttool.load(tmp_path / "f32.drift"), drifttool.load(tmp_path / "bf16.drift")
    assert bf.manifest["capture"]["dtype"] == "bfloat16" and bf.manifest["status"] == "complete"
    assert len(f32.depths) == len(bf.depths) > 0
    # teacher forcing fixes the inputs, so rows line up; bf16 rounds every matmul (8 mantissa bits)
    for c in ("sink_mass", "draft_mass", "prompt_mass"):
        diff = np.abs(f32.depths[c].to_numpy() - bf.depths[c].to_numpy())
        assert diff.max() < 5e-2, (c, diff.max())
        assert 0 < diff.max(), (
            "bfloat16 really ran (a bf16 run equal to fp32 to the bit would mean it did not)"
        )
    d = drifttool.load_drafter(
        paths["eagle3"], target=load_target(paths["target"], dtype="bfloat16"), dtype="bfloat16"
    )
    assert d.lm_head.weight.dtype == torch.bfloat16
    assert (
        json.loads((tmp_path / "bf16.drift" / "manifest.json").read_text())["capture"]["dtype"] == "bfloat16"
    )
