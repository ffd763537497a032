"""`drifttool patch` (run/engines/patch.py, run/interventions.py, analysis/patching.py) on the tiny models, with
known truth: an intervention at strength 0 reproduces the clean pass bit for bit (the pairing machinery itself);
every intervened round starts where its clean round started and is scored against the same target tokens;
`feedback.norm` at strength 1 on EAGLE-3 weights is exactly those weights run with norm_output on (same rounds);
`feedback.rms1` puts every depth's layer input at its round's depth-1 RMS; `feedback.teacher` feeds fc of the
target's features at the query's slot; an attention site runs through the same CLI and answer (its own truth:
test_patch_attention.py); the CLI refuses bad sites before anything loads, and answers in words."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from drifttool.errors import DriftError
from drifttool.model.checkpoint import load_drafter
from drifttool.model.target import load_target
from drifttool.run.drafters import DrafterSpec
from drifttool.run.engines.patch import chain_pass, run_patch, schedule_of
from drifttool.run.hooks import Capture
from drifttool.run.interventions import applied, parse
from drifttool.run.loop import teacher_forcing_data
from drifttool.trace.reader import read_trace
from drifttool.trace.sinks import SinkSpec
from tests.support.capture import build_models, cli, prompt, write_probes

K, NEW, N = 4, 16, 8
SITES = ["feedback.norm@2", "feedback.norm*0", "feedback.rms1", "feedback.teacher@2-3", "aux.fc_norm", "aux.zero-1*0",
         "attention.recency@2", "attention.sink@2*0"]


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    root = tmp_path_factory.mktemp("patch")
    p = build_models(root)
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 40)} for i in range(N)])
    out = run_patch(str(p["target"]), [DrafterSpec("eagle3", str(p["eagle3"]))], str(probes), str(root / "x.drift"),
                    [parse(s) for s in SITES], depth=K, max_new_tokens=NEW, progress=False, sink=SinkSpec.parse("first:1"),
                    full_every=1)
    return p, probes, read_trace(out)


def _series(t, table, name):
    d = t.table(table)
    return d[d.drafter.astype(str) == name].drop(columns="drafter").reset_index(drop=True)


def test_strength_zero_reproduces_the_clean_pass_bit_for_bit(patched):
    _, _, t = patched
    for table in ("rounds", "depths", "heads", "aux"):
        clean = _series(t, table, "eagle3")
        for name in ("eagle3+feedback-norm@2-Kx0", "eagle3+aux-zero-1x0", "eagle3+attention-sink@2-Kx0"):
            got = _series(t, table, name)
            wall = [c for c in got.columns if c.endswith("_s")]  # wall times differ; everything measured must not
            pd.testing.assert_frame_equal(got.drop(columns=wall), clean.drop(columns=wall), check_exact=True)


def test_rounds_are_paired_and_scored_against_the_same_tokens(patched):
    _, _, t = patched
    r = t.table("rounds")
    d = t.table("depths")
    clean = r[r.drafter.astype(str) == "eagle3"].set_index(["prompt_id", "round"])
    for name in r.drafter.astype(str).unique():
        x = r[r.drafter.astype(str) == name].set_index(["prompt_id", "round"])
        assert x.index.equals(clean.index) and (x.context_len == clean.context_len).all(), name
        dd = d[d.drafter.astype(str) == name]
        target = d[d.drafter.astype(str) == "eagle3"].set_index(["prompt_id", "round", "depth"])["target_id"]
        assert (dd.set_index(["prompt_id", "round", "depth"])["target_id"] == target).all(), name
        # accepted = the longest prefix of drafts equal to the continuation's tokens
        for (pid, rnd), g in dd.groupby(["prompt_id", "round"], observed=True):
            ok = (g.sort_values("depth")["draft_id"].to_numpy() == g.sort_values("depth")["target_id"].to_numpy())
            want = int(np.argmin(ok)) if not ok.all() else len(ok)
            assert x.loc[(pid, rnd), "accepted"] == want


def _pass(p, drafter, iv, forced, ids, schedule):
    with applied(drafter, iv, K, forced[1]), Capture(drafter, sink=SinkSpec.parse("first:1"), full_every=1) as cap:
        rounds = chain_pass(drafter, ids, K, NEW, forced, [cap], schedule)
    return rounds, cap.rounds


def test_feedback_norm_is_eagle3_weights_with_norm_output_on(patched):
    p, _, _ = patched
    t = load_target(str(p["target"]))
    e3 = load_drafter(str(p["eagle3"]), t)
    post = load_drafter(str(p["eagle3"]), t, overrides={"norm_output": True})
    t.set_aux_layer_ids(e3.config.input_aux_layer_ids)
    ids = prompt(3, 40)
    forced = teacher_forcing_data(t, ids, K, NEW)
    clean, _ = _pass(p, e3, None, forced, ids, None)
    sched = schedule_of(clean)
    a, ca = _pass(p, e3, parse("feedback.norm@2"), forced, ids, sched)
    b, cb = _pass(p, post, None, forced, ids, sched)
    assert [r.draft_ids for r in a] == [r.draft_ids for r in b] and [r.accepted for r in a] == [r.accepted for r in b]
    for x, y in zip(ca, cb):
        np.testing.assert_allclose(x.heads, y.heads, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x.hidden, y.hidden, rtol=1e-5)


def test_rms1_and_teacher_feed_what_they_say(patched):
    _, _, t = patched
    d = t.table("depths")
    x = d[d.drafter.astype(str) == "eagle3+feedback-rms1@2-K"].set_index(["prompt_id", "round", "depth"])["rms_in"]
    one = x.xs(1, level="depth")
    for k in range(2, K + 1):
        np.testing.assert_allclose(x.xs(k, level="depth").to_numpy(), one.loc[x.xs(k, level="depth").index].to_numpy(),
                                   rtol=1e-5)
    clean = d[d.drafter.astype(str) == "eagle3"].set_index(["prompt_id", "round", "depth"])["rms_in"]
    assert (clean.xs(K, level="depth") / clean.xs(1, level="depth")).mean() > 1.5  # there was growth to remove
    # teacher at depths 2-3: the depth-2 input is fc(features at its slot), so not the clean pass's fed-back RMS;
    # depth 4 is outside its range and fed back again
    tt = d[d.drafter.astype(str) == "eagle3+feedback-teacher@2-3"].set_index(["prompt_id", "round", "depth"])["rms_in"]
    assert not np.allclose(tt.xs(2, level="depth"), clean.xs(2, level="depth"))


def test_teacher_state_is_fc_of_the_targets_features_at_the_slot(patched):
    p, _, _ = patched
    t = load_target(str(p["target"]))
    e3 = load_drafter(str(p["eagle3"]), t)
    t.set_aux_layer_ids(e3.config.input_aux_layer_ids)
    ids = prompt(5, 40)
    forced = teacher_forcing_data(t, ids, K, NEW)
    seen = []
    h = e3.hook_layer_in.register_forward_hook(lambda _m, _i, o: seen.append(o.detach().clone()))
    try:
        with applied(e3, parse("feedback.teacher@2"), K, forced[1]):
            chain_pass(e3, ids, K, NEW, forced, [], None)
    finally:
        h.remove()
    # the first round: one refresh call over the prompt (its last slot is depth 1's query), then one call per depth
    # from 2; depth 2's query sits at slot n = len(ids), whose teacher state is fc of the target's feature n
    n = len(ids)
    with torch.no_grad():
        want = e3.combine(forced[1][n:n + 1][None])
    torch.testing.assert_close(seen[1], want)
    with torch.no_grad():  # and depth K's, at slot n + K - 2 (feedback.teacher@2 runs to K)
        torch.testing.assert_close(seen[K - 1], e3.combine(forced[1][n + K - 2:n + K - 1][None]))


def test_bad_sites_are_one_line_before_anything_loads(tmp_path):
    for text, msg in (("feedback.nrom", "unknown"), ("feedback.norm*2", "strength 2.0"), ("aux.fc_norm@2", "drop '@2'"),
                      ("attention", "malformed"), ("feedback.norm@3-2", "expected 1 <= K <= K2")):
        with pytest.raises(DriftError, match=msg):
            parse(text)
    f = tmp_path / "s.json"
    f.write_text(json.dumps([{"site": "feedback", "op": "norm", "lo": 3}, {"site": "aux", "op": "zero", "chunk": 0}]))
    from drifttool.run.interventions import from_file

    assert [iv.label for iv in from_file(f)] == ["feedback-norm@3-K", "aux-zero-0"]
    r = cli("patch", "--target", tmp_path / "none", "--drafter", tmp_path / "none", "--probes", "quick",
            "--out", tmp_path / "o.drift", "--site", "feedback.bogus")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "feedback.bogus" in r.stderr
    assert not (tmp_path / "o.drift").exists()


def test_the_answer_and_compare_read_the_patch_trace(patched):
    from drifttool.analysis.patching import answer, effects

    _, _, t = patched
    lines = answer(t)
    assert len(lines) == len(SITES)
    zero = next(ln for ln in lines if "(strength 0)" in ln and "norm_output" in ln)
    assert "changes no group's acceptance at all" in zero
    drift = next(ln for ln in lines if "matched to recency (own-draft preference removed)" in ln)
    assert "drift (own-draft preference beyond recency)" in drift and "recency-matched ratio x" in drift
    e = {x["intervention"]["label"]: x for x in effects(t)}
    g = e["feedback-rms1@2-K"]["quantities"]["rms_growth"]
    assert g["factor"] < 0.7 and g["n_groups"] == N  # the growth is what it removes
    assert list(e["feedback-norm@2-K"]["per_depth"]["depth"]) == list(range(1, K + 1))
    r = cli("compare", t.path, "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["summary"]) == 1 + len(SITES)


def test_the_patch_figure_draws_every_intervention(patched):
    """The shared plot builder (notebook `t.plot.patch()`): one line per intervention, one point per depth, with
    its CI; the zero-strength intervention sits on 0 at every depth."""
    import drifttool as dt

    _, _, t = patched
    fig = dt.load(t.path).plot.patch()
    assert sorted(tr.name for tr in fig.data) == sorted(parse(s).label for s in SITES)
    assert all(len(tr.x) == K for tr in fig.data)
    zero = next(tr for tr in fig.data if tr.name == "feedback-norm@2-Kx0")
    assert list(zero.y) == [0.0] * K


def test_the_html_report_states_each_intervention(patched):
    from drifttool.analysis.patching import answer
    from drifttool.plots.html_report import html_report

    _, _, t = patched
    page = html_report([t])
    assert "<h2>Interventions (x.drift; docs/patching.md)</h2>" in page
    assert all(line.split(":")[0].replace("'", "&#x27;") in page for line in answer(t))
    assert page.count("<li>") >= len(SITES) and "What each intervention changes in acceptance, per depth" in page
