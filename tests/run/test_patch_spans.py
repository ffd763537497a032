"""`drifttool patch`'s prompt spans (run/spans.py, `prompt.delete`, `--span`, `--scan`) with known truth: each span
kind names exactly the tokens it says on a real chat prompt; a span no prompt holds deletes nothing and reproduces
the clean pass bit for bit; a deleted span leaves every round starting at the same generated position, scored
against the same target tokens, with the drafter's context shorter by the span; and on a drafter whose attention is
planted on one token (model/controls.py: every query scores that token's slots +8), deleting the planted span from
prompts that hold it is ranked first by the scan, detected after Holm, and raises acceptance, while a span in no
prompt moves nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from drifttool import save_drafter
from drifttool.errors import DriftError
from drifttool.model.checkpoint import load_drafter
from drifttool.model.controls import plant
from drifttool.model.target import load_target
from drifttool.run.drafters import DrafterSpec
from drifttool.run.engines.patch import run_patch
from drifttool.run.interventions import Intervention
from drifttool.run.spans import PromptView, Span, scan_spans
from drifttool.trace.reader import read_trace
from drifttool.trace.sinks import SinkSpec
from drifttool.zoo import smollm2
from tests.support.capture import build_models, cli, prompt, write_probes

REPO = Path(__file__).resolve().parents[2]
EAGLE3 = REPO / "drifttool" / "zoo" / "models" / "smollm2" / "eagle3"
MT_CHAT = REPO / "probes" / "real" / "mt_chat.jsonl"


@pytest.fixture(scope="module")
def real():
    return load_target(str(smollm2.fetch()))


def _view(t, messages):
    return PromptView(t.encode(t.render_chat(messages)), t.tokenizer, tuple(t.template_ids))


def _text(v, span):
    return "".join(v.pieces[i] for i in Span.parse(span).positions(v))


def test_each_span_kind_names_its_tokens_on_a_chat_prompt(real):
    v = _view(real, [{"role": "system", "content": "Be brief. Use plain words!"},
                     {"role": "user", "content": "Name a colour."}])
    assert _text(v, "turn:system") == "<|im_start|>system\nBe brief. Use plain words!<|im_end|>\n"
    assert _text(v, "turn:user") == "<|im_start|>user\nName a colour.<|im_end|>\n"
    assert _text(v, "turn:assistant") == "<|im_start|>assistant\n"  # the generation header
    assert _text(v, "sentence:system-1") == "Be brief."
    assert _text(v, "sentence:system-2") == " Use plain words!"
    assert _text(v, "sentence:system-3") == "" and _text(v, "turn:tool") == ""
    assert _text(v, "template:<|im_end|>") == "<|im_end|>" * 2
    assert _text(v, "tokens:0-0") == "<|im_start|>"
    assert _text(v, "tail:1-3") == "assistant\n" and _text(v, "tail:4-4") == "<|im_start|>"
    assert _text(v, "text:plain words") == " plain words" and _text(v, "text:zebra") == ""
    assert _text(v, "tokens:900-950") == ""
    specs = [s.spec for s in scan_spans([v], window=4)]
    assert specs[:4] == ["tokens:0-0", "template:<|im_start|>", "template:<|im_end|>", "turn:system"]
    assert {"turn:user", "turn:assistant", "sentence:system-1", "sentence:system-2", "tail:1-4"} <= set(specs)


@pytest.mark.parametrize("bad", ["turn", "line:3", "tokens:5-2", "tail:0-3", "sentence:system", "tokens:a-b"])
def test_bad_spans_are_one_line(bad):
    with pytest.raises(DriftError, match="--span"):
        Span.parse(bad)


def test_a_bad_span_is_refused_before_anything_loads(tmp_path):
    r = cli("patch", "--target", tmp_path / "nowhere", "--drafter", tmp_path / "nowhere", "--probes", "mt_chat",
            "--span", "tail:0-3", "--out", tmp_path / "x.drift")
    assert r.returncode == 2 and "--span 'tail:0-3'" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("spans")
    p = build_models(root)
    probes = write_probes(root / "p.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 40)} for i in range(6)])
    ivs = [Intervention("prompt", "delete", span=s) for s in ("tokens:0-3", "tail:1-4", "tokens:100-120")]
    out = run_patch(str(p["target"]), [DrafterSpec("eagle3", str(p["eagle3"]))], str(probes), str(root / "x.drift"),
                    ivs, depth=4, max_new_tokens=16, progress=False, sink=SinkSpec.parse("first:1"), full_every=1)
    return read_trace(out)


def _series(t, table, name):
    d = t.table(table)
    return d[d.drafter.astype(str) == name].drop(columns="drafter").reset_index(drop=True)


def test_a_span_no_prompt_holds_is_the_clean_pass_bit_for_bit(tiny):
    for table in ("rounds", "depths", "heads", "aux"):
        clean, got = _series(tiny, table, "eagle3"), _series(tiny, table, "eagle3+prompt-delete-tokens-100-120")
        wall = [c for c in got.columns if c.endswith("_s")]
        pd.testing.assert_frame_equal(got.drop(columns=wall), clean.drop(columns=wall), check_exact=True)


@pytest.mark.parametrize("name", ["eagle3+prompt-delete-tokens-0-3", "eagle3+prompt-delete-tail-1-4"])
def test_a_deleted_span_keeps_rounds_paired_on_a_shorter_context(tiny, name):
    r, d = tiny.table("rounds"), tiny.table("depths")
    clean = r[r.drafter.astype(str) == "eagle3"].set_index(["prompt_id", "round"])
    x = r[r.drafter.astype(str) == name].set_index(["prompt_id", "round"])
    assert x.index.equals(clean.index)
    assert ((clean.context_len - x.context_len) == 4).all()  # every round's drafter context lacks the 4 tokens
    key = ["prompt_id", "round", "depth"]
    tc = d[d.drafter.astype(str) == "eagle3"].set_index(key)["target_id"]
    assert (d[d.drafter.astype(str) == name].set_index(key)["target_id"] == tc).all()


PLANT, GROUPS = " zebra", 12


@pytest.fixture(scope="module")
def planted(tmp_path_factory, real):
    """The bundled EAGLE-3 with its attention replaced by recency plus a planted +8 on every ' zebra' slot; mt_chat
    prompts with ' zebra zebra zebra' inserted in the user turn (the planted span)."""
    root = tmp_path_factory.mktemp("planted")
    tok = real.encode(PLANT)
    assert len(tok) == 1
    d = plant(load_drafter(EAGLE3, real), recency=3.0, sink=8.0, sink_token=tok[0])
    save_drafter(d, root / "planted")
    lines = [json.loads(x) for x in MT_CHAT.read_text().splitlines() if x.strip()]
    with open(root / "p.jsonl", "w") as f:
        for x in lines[:GROUPS]:
            m = x["messages"][0]["content"].split(" ")
            m.insert(3, "zebra zebra zebra")
            f.write(json.dumps({**x, "messages": [{"role": "user", "content": " ".join(m)}]}) + "\n")
    out = root / "scan.drift"
    r = cli("patch", "--target", smollm2.fetch(), "--drafter", f"planted={root / 'planted'}", "--probes",
            root / "p.jsonl", "--span", "text:zebra zebra zebra", "--span", "turn:system", "--span", "tail:1-4",
            "--span", "template:<|im_end|>", "--span", "text:qqqq", "--depth", 4, "--max-new-tokens", 24,
            "--sink", "first:1", "--out", out, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["patch"], read_trace(out)


def test_the_planted_span_is_ranked_first_and_detected(planted):
    effects, _ = planted
    by = {e["intervention"]["span"]: e for e in effects}
    z = by["text:zebra zebra zebra"]
    assert z["scan"]["rank"] == 1 and z["scan"]["p_holm"] < 0.05, z["scan"]
    assert z["acceptance_length"]["difference"] > 0 and z["present"]["prompts"] == GROUPS
    assert z["present"]["tokens"] == 3
    q = by["text:qqqq"]
    assert q["present"]["prompts"] == 0 and q["acceptance_length"] == {} and q["scan"]["rank"] == 5


def test_the_scan_answers_in_one_ranked_line(planted):
    from drifttool.analysis.patching import answer

    _, t = planted
    (line,) = [x for x in answer(t) if x.startswith("prompt-span scan on planted")]
    assert "Holm across the 4 spans some prompt holds; 1 span in no prompt" in line
    assert "1. every occurrence of 'zebra zebra zebra': +" in line


def test_the_scan_figure_ranks_the_spans_some_prompt_holds(planted):
    from drifttool import plots
    from drifttool.analysis.patching import effects, scan

    _, t = planted
    fig = plots.span_scan(scan(t))
    (bars,) = fig.data
    assert list(bars.y)[-1] == "text:zebra zebra zebra" and len(bars.y) == 4  # top bar: rank 1; text:qqqq not drawn
    assert plots.patch_effects(effects(t)).data == ()  # a scan's spans are drawn as ranked bars, not per depth


def test_the_report_and_the_notebook_show_the_scan(planted):
    import drifttool as dt
    from drifttool.plots.html_report import html_report

    _, t = planted
    page = html_report([t])
    assert "Prompt spans ranked by the acceptance they move" in page and "prompt-span scan on planted" in page
    nb = dt.load(t.path)
    assert nb.span_scan().iloc[0]["span"] == "text:zebra zebra zebra"
    assert nb.plot.span_scan().data[0].y[-1] == "text:zebra zebra zebra"


def test_a_span_is_data_a_gate_can_pin(tmp_path):
    from drifttool.run.interventions import from_file

    f = tmp_path / "sites.json"
    f.write_text(json.dumps([{"site": "prompt", "op": "delete", "span": "template:<|im_end|>"},
                             {"site": "prompt", "op": "delete", "span": "turn:system", "strength": 0}]))
    a, b = from_file(f)
    assert a.label == "prompt-delete-template-im_end" and b.label == "prompt-delete-turn-systemx0"
    assert a.words(8) == "every <|im_end|> template token deleted from the drafter's context (the target reads it)"
    assert a.to_dict()["span"] == "template:<|im_end|>"
    with pytest.raises(DriftError, match="only prompt.delete takes a span"):
        Intervention("prompt", "delete")
    with pytest.raises(DriftError, match="only prompt.delete takes a span"):
        Intervention("feedback", "norm", span="turn:system")
    with pytest.raises(DriftError, match="a deletion takes 0 or 1"):
        Intervention("prompt", "delete", strength=0.5, span="turn:system")
