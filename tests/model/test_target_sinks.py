"""`--sink target`: the positions the target itself attends as sinks, from its own attention rows (recomputed for a
few query rows per layer, equal to eager attention), recorded in the manifest with the evidence."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.model.target import load_target
from drifttool.model.target_sinks import attention_rows, find_sinks
from drifttool.trace.sinks import SinkSpec

Z = Path(__file__).resolve().parents[2] / "drifttool" / "zoo" / "models" / "sink"
pytestmark = pytest.mark.skipif(not (Z / "target").is_dir(), reason="bundled tiny models not in this checkout")


@pytest.fixture(scope="module")
def target():
    return load_target(str(Z / "target"))


def _ids(n: int, bos: bool = True) -> list[int]:
    r = random.Random(0)
    return ([0] if bos else []) + [r.randrange(3, 2000) for _ in range(n)]


def test_recomputed_rows_equal_eager_attention(target):
    ids, qs = _ids(79), [40, 60, 79]
    got = attention_rows(target.model, target.layers, ids, qs)
    target.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = target.model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    finally:
        target.model.set_attn_implementation("sdpa")
    want = torch.stack([a[0][:, qs] for a in out.attentions])
    assert got.shape == want.shape and float((got - want).abs().max()) < 1e-5


def test_the_sink_target_s_sink_is_position_0_with_its_evidence(target):
    ev = find_sinks(target, [_ids(300)])
    assert ev["positions"] == [0] and ev["token_ids"] == [0]
    assert ev["upper_mass"]["0"] > 0.3 and ev["mass_per_band"]["0"]["upper"] > 20 * ev["uniform_share"]
    assert len(ev["mass_per_layer"]["0"]) == target.num_layers


def test_no_sink_is_one_clear_error(target):
    with pytest.raises(DriftError) as e:
        find_sinks(target, [list(range(3, 300))])  # no BoS: this target forms no sink
    assert "attends no early position as a sink" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DriftError):
        find_sinks(target, [[1, 2, 3]])  # too short to read


def test_parse_and_unresolved_use():
    s = SinkSpec.parse("target")
    assert s.target and s.to_dict()["target"] is True and "target" not in SinkSpec().to_dict()
    assert SinkSpec.from_dict(s.to_dict()) == s
    with pytest.raises(DriftError):
        s.mask(torch.tensor([0, 1, 2]))


def test_capture_with_sink_target_records_positions_and_evidence(tmp_path):
    probes = tmp_path / "p.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": _ids(120)}) + "\n" for i in range(2)))
    out = tmp_path / "t.drift"
    assert main(["capture", "--target", str(Z / "target"), "--drafter", f"e3={Z / 'eagle3'}", "--probes", str(probes),
                 "--depth", "3", "--max-new-tokens", "8", "--sink", "target", "--quiet", "--out", str(out)]) == 0
    cap = json.loads((out / "manifest.json").read_text())["capture"]
    assert cap["sink"]["positions"] == [0] and cap["sink"]["first_n"] == 0 and cap["sink_rule"] == "target"
    assert cap["sink_target"]["upper_mass"]["0"] > 0.3
    import drifttool as dt

    d = dt.load(out).depths
    assert (d["n_sink"] == 1).all()  # the one position the target uses


def _capture(tmp_path, name: str, probes_ids: list[list[int]], *extra: str) -> tuple[int, Path]:
    probes = tmp_path / f"{name}.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": ids}) + "\n" for i, ids in enumerate(probes_ids)))
    out = tmp_path / f"{name}.drift"
    rc = main(["capture", "--target", str(Z / "target"), "--drafter", f"e3={Z / 'eagle3'}", "--probes", str(probes),
               "--depth", "3", "--max-new-tokens", "4", "--quiet", "--out", str(out), *extra])
    return rc, out


def test_the_default_sink_is_the_target_s_own_where_found(tmp_path):
    """`--sink auto` (the default): the target's sink on prompts it can be read from; the first 4 positions where
    the rule finds none, and the manifest says which and why."""
    rc, out = _capture(tmp_path, "long", [_ids(120)])
    cap = json.loads((out / "manifest.json").read_text())["capture"]
    assert rc == 0 and cap["sink"]["positions"] == [0] and cap["sink_rule"] == "auto: target"
    assert "auto" not in cap["sink"] and cap["sink_target"]["upper_mass"]["0"] > 0.3
    rc, out = _capture(tmp_path, "short", [_ids(12)])  # too short to read the target's attention from
    cap = json.loads((out / "manifest.json").read_text())["capture"]
    assert rc == 0 and cap["sink"] == {"first_n": 4, "positions": [], "token_ids": []}
    assert cap["sink_rule"].startswith("auto: first:4 (the target's own sink was not found: --sink target: no prompt")
    assert SinkSpec.parse("auto").auto and SinkSpec.from_dict(SinkSpec.parse("auto").to_dict()).auto


def test_explicit_sink_target_without_a_sink_and_a_recent_window_past_every_prompt_are_refused(tmp_path, capsys):
    for name, ids, extra in (("nosink", [_ids(12)], ("--sink", "target")), ("recent", [_ids(40)], ("--recent", "64"))):
        rc, out = _capture(tmp_path, name, ids, *extra)
        err = capsys.readouterr().err.strip()
        assert rc == 2 and not out.exists(), (name, err)
        assert len(err.splitlines()) == 1 and ("--sink target" in err if name == "nosink" else "--recent 64" in err)
    rc, _ = _capture(tmp_path, "recent_ok", [_ids(40)], "--recent", "16")
    assert rc == 0
