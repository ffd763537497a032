"""`drifttool conform`: each static finding on a crafted checkpoint (config edited, tensors added or removed);
clean on conformant checkpoints of every layout drifttool writes; on the hf engine, a planted misread
(`norm_output` dropped on the engine side, as SpecForge checkpoints before its PR #879 fed back) is found per
depth and named by the diagnosis, and the CLI exits 1; a conformant run exits 0."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from drifttool import save_drafter
from drifttool.cli import main
from drifttool.model.conformance import static_findings
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.conform import HEALTH_CODES, conform, intended_flags
from tests.support.capture import TINY, build_models, prompt, write_probes


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("conform")
    paths = build_models(root)
    suite = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(40 + i, 14 + i), "max_new_tokens": 12}
                                            for i in range(2)])
    return root, paths, suite


def edited(src, dst, config=None, drop=(), add=None):
    """A copy of the checkpoint `src` with config.json edited (`config(cfg)`) and tensors dropped or added."""
    shutil.copytree(src, dst)
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        config(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    if drop or add:
        f = next(dst.glob("*.safetensors"))
        sd = {k: v for k, v in load_file(str(f)).items() if not k.startswith(tuple(drop))}
        sd.update(add or {})
        save_file(sd, str(f))
    return dst


def codes(folder) -> list[tuple[str, str]]:
    return sorted((f.severity, f.code) for f in static_findings(folder)[1])


def test_each_static_finding_on_a_crafted_checkpoint(models, tmp_path):
    _, p, _ = models
    e31, e3 = p["eagle31"], p["eagle3"]
    assert ("error", "weights_without_flag") in codes(edited(e31, tmp_path / "a", lambda c: c.pop("fc_norm")))
    nested = edited(e31, tmp_path / "b", lambda c: c["transformer_layer_config"].update(norm_output=c.pop("norm_output")))
    f = {x.code: x for x in static_findings(nested)[1]}
    assert f["flag_not_read"].flag == "norm_output" and f["flag_not_read"].value is True
    assert "runs norm_output=False" in " ".join(f["flag_not_read"].engines.values())
    assert intended_flags(*static_findings(nested)) == {"norm_output": True}
    gone = edited(e3, tmp_path / "c", lambda c: c.pop("norm_before_residual"))
    assert ("warning", "default_differs") in codes(gone)
    assert intended_flags(*static_findings(gone)) == {"norm_before_residual": False}
    assert ("error", "exclusive_flags") in codes(edited(e31, tmp_path / "d", lambda c: c.update(norm_before_fc=True),
                                                        add={"input_norm.weight": torch.ones(3 * TINY["hidden"])}))
    assert ("error", "flag_without_weights") in codes(edited(e31, tmp_path / "e", drop=("fc_norm.",)))
    assert ("error", "weights_without_flag") in codes(edited(e3, tmp_path / "f",
                                                            add={"input_norm.weight": torch.ones(3 * TINY["hidden"])}))
    assert ("warning", "mixed_variant") in codes(edited(e3, tmp_path / "g", lambda c: c.update(norm_output=True)))
    assert ("error", "vocab_mapping") in codes(edited(e3, tmp_path / "h", lambda c: c.update(draft_vocab_size=7)))


@pytest.mark.parametrize("layout", ["speculators", "safeailab", "specforge"])
def test_conformant_checkpoints_of_each_layout_are_clean(tmp_path, layout):
    t = tiny_target(**TINY)
    for name, flags in (("e3", {}), ("e31", {"fc_norm": True, "norm_output": True})):
        if layout == "safeailab" and flags:
            continue  # SafeAILab's layout has no EAGLE-3.1 flags
        out = save_drafter(tiny_drafter(t, seed=3, **flags), tmp_path / f"{layout}-{name}", layout=layout)
        # a freshly initialised drafter's norms never trained: the weights' health (tests/model/test_weight_health.py),
        # not the layout's conformance, which is what this checks
        bad = [f for f in static_findings(out)[1] if f.severity != "info" and f.code not in HEALTH_CODES]
        assert bad == [], (layout, name, bad)


def test_a_planted_misread_is_found_and_named(models):
    root, p, suite = models
    clean = conform(str(p["eagle31"]), str(p["target"]), str(suite), depth=3, max_new_tokens=12)
    assert clean.conformant and clean.divergence["agreement"] == 1.0 and clean.diagnosis is None
    assert [r["agreement"] for r in clean.per_depth] == [1.0, 1.0, 1.0]
    bad = conform(str(p["eagle31"]), str(p["target"]), str(suite), depth=3, max_new_tokens=12,
                  engine_overrides={"norm_output": "false"})
    assert not bad.conformant
    assert bad.per_depth[0]["agreement"] == 1.0  # depth 1 sees no fed-back hidden: the misread starts at depth 2
    assert bad.divergence["agreement"] < 0.98
    assert bad.diagnosis["best"]["as"].startswith("norm_output ignored") and bad.diagnosis["best"]["agreement"] >= 0.98
    assert "norm_output ignored" in bad.diagnosis["verdict"]


def test_cli_exit_codes_and_json(models, capsys):
    root, p, suite = models
    base = [str(p["eagle3"]), "--target", str(p["target"]), "--probes", str(suite), "--depth", "2",
            "--max-new-tokens", "8"]
    assert main(["conform", *base]) == 0
    assert "verdict: conformant" in capsys.readouterr().out
    assert main(["conform", *base, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["conformant"] and js["declared"]["layout"] == "speculators" and len(js["per_depth"]) == 2
    broken = edited(p["eagle31"], root / "broken", lambda c: c.pop("fc_norm"))
    assert main(["conform", str(broken), *base[1:]]) == 1  # static error, and the engine cannot load it
    out = capsys.readouterr().out
    assert "weights_without_flag" in out and "NOT conformant" in out


@pytest.mark.parametrize("extra,msg", [
    (["--depth", "0"], "--depth"),
    (["--limit", "0"], "--limit"),
    (["--max-new-tokens", "-1"], "--max-new-tokens"),
    (["--max-new-tokens", "1"], "at least one drafted round"),  # was a ValueError traceback
    (["--engine-override", "fc_norm=maybe"], "expected true or false"),
])
def test_usage_errors_exit_2_not_a_verdict(models, capsys, extra, msg):
    """A bad argument is a usage error (exit 2, one line), not the verdict 'NOT conformant' (exit 1: a CI gate would
    read it as a misread drafter)."""
    root, p, suite = models
    base = [str(p["eagle3"]), "--target", str(p["target"]), "--probes", str(suite), "--depth", "2",
            "--max-new-tokens", "8"]
    assert main(["conform", *base, *extra]) == 2
    captured = capsys.readouterr()
    assert msg in captured.err and "NOT conformant" not in captured.out


def test_a_string_flag_is_named_as_what_engines_read(models, tmp_path):
    """fc_norm "false" (a string) with no fc_norm weights: the finding said 'fc_norm is true' while the declared
    line printed fc_norm=false; now it names the string and what vLLM makes of it."""
    _, p, _ = models
    e3 = p["eagle3"]
    s = edited(e3, tmp_path / "s", lambda c: c.update(fc_norm="false"))
    f = {x.code: x for x in static_findings(s)[1]}
    assert "flag_not_boolean" in f and "although it says false" in f["flag_not_boolean"].message
    assert "runs fc_norm=True" in " ".join(f["flag_not_boolean"].engines.values())
    assert "fc_norm is 'false', read as true," in f["flag_without_weights"].message


@pytest.mark.parametrize("value", [float("nan"), 7.5, -0.1])
def test_a_trained_agreement_outside_0_1_is_not_compared(tmp_path, value):
    import numpy as np

    from drifttool.run.conform import training_gap

    (tmp_path / "report.json").write_text(json.dumps({"heldout_top1_per_step": [value]}))
    gap = training_gap(tmp_path, {f"g{i}": np.array([1.0, 0.0]) for i in range(8)})
    assert gap["trained_heldout_depth1"] is None and not gap["flagged"] and "not an agreement rate" in gap["note"]


def test_the_text_report_fits_80_columns():
    """Long findings and notes wrap at word boundaries under their indent (only a word longer than the line, such
    as a path, may exceed it); no word is cut."""
    from drifttool.model.conformance import Finding
    from drifttool.run.conform import ConformReport, render

    long = ("fc_norm.* weights are present but fc_norm is absent: an EAGLE-3.1 checkpoint whose flag was dropped, "
            "or stray weights that no engine reads, so the engine serves a different drafter than the trainer wrote")
    rep = ConformReport("/models/d", "hf", {"layout": "specforge", "flags": {"fc_norm": None, "norm_output": True},
                                            "aux_layer_ids": [1, 2, 3], "draft_vocab_size": 32000},
                        [Finding("weights_without_flag", "error", long, {"vllm 0.32 (flat Llama config)": long})],
                        notes=[long])
    text = render(rep)
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert " ".join(text.split()).count(" ".join(long.split())) == 3  # every word kept, in order
