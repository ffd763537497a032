"""An MTP head (a tiny DeepSeek-V3 target with one MoE MTP layer, tests/support/mtp_fixtures.py) in drifttool's own
speculative loop: greedy output equals the target's greedy output (lossless), the capture's per-head rows and lse
masses equal eager attention within 1e-5, and `drifttool capture` writes a trace that `compare` and the notebook
API read, with the what-if override as a second series."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import drifttool
from drifttool.cli import main
from drifttool.run.hooks import Capture
from drifttool.trace.sinks import SinkSpec
from tests.support import mtp_fixtures as fx
from tests.support.tiny_training import greedy_reference

DEPTH, N_NEW = 3, 20
PROMPTS = ([5, 9, 14, 3, 22, 40, 7, 61], [2, 33, 33, 18, 90, 4])


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    folder = fx.write_target(tmp_path_factory.mktemp("ds"), fx.DEEPSEEK)
    target = drifttool.load_target(folder)
    drafter = drifttool.load_drafter(folder, target=target)
    return folder, target, drafter


@pytest.mark.parametrize("depth", [1, DEPTH])
def test_greedy_with_the_mtp_head_equals_target_greedy(deepseek, depth):
    _, target, drafter = deepseek
    assert target.aux_layer_ids == [-1]  # the MTP head reads the target's last hidden state after its norm
    for prompt in PROMPTS:
        want = greedy_reference(target, prompt, N_NEW)
        res = drifttool.speculate(target, drafter, prompt, depth=depth, max_new_tokens=N_NEW)
        assert res.output_ids == want


def test_the_head_drafts_from_the_targets_final_hidden_state(deepseek):
    """Depth 1 of round 0 is the MTP layer over the prompt's slots with the target's post-norm hidden states
    (what vLLM's target model returns): recomputed here from HF's own last hidden_states entry."""
    _, target, drafter = deepseek
    prompt = PROMPTS[0]
    with Capture(drafter) as cap:
        res = drifttool.speculate(target, drafter, prompt, depth=1, max_new_tokens=2, observers=[cap])
    with torch.no_grad():
        out = target.model(torch.tensor([prompt]), output_hidden_states=True)
    hf_last = out.hidden_states[-1][0]  # after the final norm
    first_token = int(out.logits[0, -1].argmax())
    # slot t: token t+1 with the hidden state at t; the depth-1 query is the last prompt position's slot
    mine = drafter(torch.tensor([[*prompt[1:], first_token]]), hf_last[None], torch.arange(len(prompt))[None],
                   drafter.new_cache(), True)
    rms_in = float(cap.rounds[0].hidden[0, 0])  # the capture's rms of the depth-1 layer input
    assert abs(rms_in - float(hf_last[-1].detach().pow(2).mean().sqrt())) < 1e-5
    assert int(mine.logits[0, -1].argmax()) == res.rounds[0].draft_ids[0]


def _eager_rows(drafter, target, prompt):
    """Per round, per depth: the eager path's attention probabilities [nh, L] of that depth's query row."""
    rows: list = []
    drafter.set_attn_impl("eager")
    h = drafter.layers[0].self_attn.hook_probs.register_forward_hook(lambda m, i, o: rows.append(o[0, :, -1].clone()))
    try:
        res = drifttool.speculate(target, drafter, prompt, depth=DEPTH, max_new_tokens=N_NEW)
    finally:
        h.remove()
        drafter.set_attn_impl("sdpa")
    return res, [rows[i:i + DEPTH] for i in range(0, len(rows), DEPTH)]


def test_capture_rows_and_lse_masses_equal_eager_attention(deepseek):
    _, target, drafter = deepseek
    prompt = PROMPTS[0]
    eager, eager_rows = _eager_rows(drafter, target, prompt)
    with Capture(drafter, sink=SinkSpec.parse("2"), keep_qk=True, full_every=0) as cap:
        res = drifttool.speculate(target, drafter, prompt, depth=DEPTH, max_new_tokens=N_NEW, observers=[cap])
    assert res.output_ids == eager.output_ids and len(res.rounds) == len(eager_rows)
    checked = 0
    for r, rc, rows in zip(res.rounds, cap.rounds, eager_rows):
        assert not rc.full  # the lse path
        n = r.context_len
        for j in range(DEPTH):
            p = rows[j]  # [nh, n + j]: the depth-j query over every slot it sees
            assert p.shape[-1] == n + j
            for head in range(p.shape[0]):
                mine = torch.from_numpy(cap.attention(r.round, j + 1, head=head))
                torch.testing.assert_close(mine, p[head], atol=1e-5, rtol=0)
            np.testing.assert_allclose(rc.field("sink_mass")[j], p[:, :2].sum(-1).numpy(), atol=1e-5)  # sink: slots 0, 1
            # own slot (depth 1's slot n-1 holds a committed token: no own draft slot) and the earlier drafts' slots
            own = p[:, n - 1 + j].numpy() if j else np.zeros(p.shape[0])
            np.testing.assert_allclose(rc.field("own_mass")[j], own, atol=1e-5)
            np.testing.assert_allclose(rc.field("draft_mass")[j], p[:, n:n - 1 + j].sum(-1).numpy(), atol=1e-5)
            checked += 1
    assert checked == DEPTH * len(res.rounds) >= 6


def test_capture_cli_writes_a_trace_compare_and_the_api_read(deepseek, tmp_path, capsys):
    folder, *_ = deepseek
    probes = tmp_path / "p.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i}", "token_ids": p}) + "\n" for i, p in enumerate(PROMPTS)))
    out = tmp_path / "mtp.drift"
    rc = main(["capture", "--target", str(folder), "--drafter", f"mtp={folder}",
               "--drafter", f"mtp-postnorm={folder}?norm_output=true", "--probes", str(probes),
               "--depth", str(DEPTH), "--max-new-tokens", "12", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    m = json.loads((out / "manifest.json").read_text())
    ds = {d["name"]: d for d in m["drafters"]}
    assert ds["mtp"]["variant"] == ds["mtp-postnorm"]["variant"] == "mtp"
    assert ds["mtp"]["layout"] == "deepseek_mtp" and ds["mtp-postnorm"]["overrides"]["norm_output"]["override"]
    assert m["target"]["aux_layer_ids"] == [-1]
    capsys.readouterr()
    assert main(["compare", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mtp-postnorm" in text
    tr = drifttool.load(out)
    depths = tr.depths if hasattr(tr, "depths") else None
    assert depths is not None
    df = depths() if callable(depths) else depths
    assert set(df["drafter"]) == {"mtp", "mtp-postnorm"}
    assert sorted(df["depth"].unique()) == list(range(1, DEPTH + 1))


def test_an_mtp_head_and_an_eagle_head_in_one_capture_is_refused_by_kind(deepseek):
    """One capture runs the target once for all drafters: an MTP head (last hidden state) beside an EAGLE head (three
    aux layers) is refused naming which are MTP heads, not as a disagreement on aux layer ids."""
    from drifttool.errors import DriftError
    from drifttool.model.tiny import tiny_drafter, tiny_target
    from drifttool.run.drafters import check_same_aux

    _, _, mtp = deepseek
    eagle = tiny_drafter(tiny_target())
    with pytest.raises(DriftError, match=r"\['ds'\] are MTP heads .* capture them separately"):
        check_same_aux({"ds": mtp, "e3": eagle})
    check_same_aux({"ds": mtp})  # one kind: fine


def test_an_mtp_head_of_another_target_is_refused(deepseek, tmp_path, capsys):
    """An MTP head read from target A's folder, captured with --target B (same config, other weights): exit 0 and
    no word before. A copy of A's own folder is the same target and is accepted."""
    import shutil

    folder, *_ = deepseek
    other = fx.write_target(tmp_path / "other", fx.DEEPSEEK, seed=1)
    probes = tmp_path / "p.jsonl"
    probes.write_text(json.dumps({"id": "p0", "token_ids": PROMPTS[0]}) + "\n")
    args = ["--drafter", f"mtp={folder}", "--probes", str(probes), "--depth", "2", "--max-new-tokens", "4", "--quiet"]
    assert main(["capture", "--target", str(other), *args, "--out", str(tmp_path / "x.drift")]) == 2
    assert "MTP layer belongs to its own target" in capsys.readouterr().err
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert main(["capture", "--target", str(copy), *args, "--out", str(tmp_path / "y.drift")]) == 0
