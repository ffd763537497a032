"""Notebook API: Trace views equal the Parquet tables, live-capture rows equal eager attention, clear errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import drifttool as dt
from drifttool.errors import DriftError
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.trace.schema import DERIVED


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    t = tiny_target(vocab=64, hidden=64, kv_heads=2)
    d = tiny_drafter(t)
    with dt.capture(t, d, depth=4, max_new_tokens=10) as cap:
        cap.run(list(range(1, 30)), prompt_id="a")
        cap.run([(7 * i) % 60 + 1 for i in range(40)], prompt_id="b")
    path = cap.to_trace(tmp_path_factory.mktemp("api") / "live.drift")
    return t, d, cap, path


def test_trace_views_match_parquet(live):
    *_, path = live
    tr = dt.load(path)
    for name in ("rounds", "depths", "heads", "prompts", "aux"):
        raw = pd.read_parquet(path / name)
        view = getattr(tr, name)
        derived = list(DERIVED.get(name, {}))  # computed on read (masses, lifts, normalised entropy)
        assert not set(derived) & set(raw.columns)
        pd.testing.assert_frame_equal(view.drop(columns=derived).reset_index(drop=True), raw.reset_index(drop=True),
                                      check_dtype=False, check_categorical=False)
        if derived:
            np.testing.assert_array_equal(view["self_mass"], (raw["draft_mass"] + raw["own_mass"]).astype(np.float32))
    assert tr.manifest["status"] == "complete"
    assert "<table>" in tr._repr_html_()
    s = tr.summary()
    assert set(s.depth) == {1, 2, 3, 4}


def test_live_tables_match_trace(live):
    _, _, cap, path = live
    tr = dt.load(path)
    keys = {"drafter": str, "prompt_id": str}  # categoricals on read (dictionary-encoded keys)
    pd.testing.assert_frame_equal(cap.depths.reset_index(drop=True), tr.depths.astype(keys).reset_index(drop=True),
                                  check_dtype=False)


def _eager_rows(t, d, prompt, depth, max_new):
    """Eager attention probabilities of every draft query: last row of each drafter forward."""
    rows = []
    h = d.layers[0].self_attn.hook_probs.register_forward_hook(lambda m, i, o: rows.append(o[0, :, -1].clone()))
    d.set_attn_impl("eager")
    try:
        dt.speculate(t, d, prompt, depth=depth, max_new_tokens=max_new)
    finally:
        d.set_attn_impl("sdpa")
        h.remove()
    return rows


def test_live_attention_equals_eager(live):
    t, d, cap, _ = live
    prompt = [(7 * i) % 60 + 1 for i in range(40)]  # the last prompt run, whose q/k the capture kept
    eager = _eager_rows(t, d, prompt, 4, 10)
    n_rounds = len(cap.results[-1].rounds)
    assert len(eager) == 4 * n_rounds
    for r in range(n_rounds):
        for k in range(1, 5):
            want = eager[4 * r + k - 1]  # [nh, L]
            got = cap.attention(round=r, depth=k)
            ref = want.mean(0)[: len(got)].numpy()
            assert torch.allclose(torch.from_numpy(got), torch.from_numpy(ref), atol=1e-5)
            for h in range(want.shape[0]):
                got_h = cap.attention(round=r, depth=k, head=h)
                assert abs(got_h - want[h, : len(got_h)].numpy()).max() < 1e-5
                assert abs(want[h, len(got_h):]).sum() == 0  # nothing beyond the causal chain limit


def test_errors_name_the_valid_range(live):
    _, _, cap, path = live
    with pytest.raises(DriftError, match=r"valid rounds: 0\.\."):
        cap.attention(round=10_000, depth=1)
    with pytest.raises(DriftError, match=r"valid depths: 1\.\.4"):
        cap.attention(round=0, depth=9)
    tr = dt.load(path)
    with pytest.raises(DriftError, match="valid prompt ids"):
        tr.attention_row(tr.drafters[0], "nope", 0)
    with pytest.raises(DriftError, match="valid"):
        tr.attention_row("no-such-drafter", "a", 0)
    with pytest.raises(DriftError):
        dt.compare_many([])


def test_compare_many_and_plots(live, tmp_path):
    t, d, _, path = live
    d31 = tiny_drafter(t, fc_norm=True, norm_output=True)
    with dt.capture(d31, t, depth=4, max_new_tokens=10, name="e31") as cap:
        cap.run(list(range(1, 30)), prompt_id="a")
    p2 = cap.to_trace(tmp_path / "b.drift")
    summ = dt.compare_many([path, p2])
    assert len(summ) == 2
    tr = dt.load(path)
    for fig in (tr.plot.depth(dt.load(p2)), tr.plot.rms(), tr.plot.acceptance(), tr.plot.heads(), tr.plot.context()):
        assert fig.data, "figure has no traces"


def test_capture_and_speculate_share_argument_order_and_depth_default(live):
    import inspect

    t, d, *_ = live
    assert dt.Decoding().depth == 8  # dt.speculate's depth (its keywords are dt.Decoding's fields)
    assert inspect.signature(dt.capture).parameters["depth"].default == 8
    assert list(inspect.signature(dt.capture).parameters)[:2] == ["target", "drafter"]
    for cap in (dt.capture(t, d), dt.capture(d, t)):  # the old (drafter, target) order still works
        assert cap.drafter is d and cap.target.model is t.model and cap.depth == 8


def test_attention_row_is_labelled(live):
    t, d, cap, _ = live
    res = cap.results[-1]
    seq = res.prompt_ids + res.output_ids
    for r in (0, len(res.rounds) - 1):
        n = res.rounds[r].context_len
        for k in (1, 3):
            row = cap.attention(round=r, depth=k)
            assert len(row) == n + k - 1 and list(row.positions) == list(range(n + k - 1))
            want = ["sink"] * 4 + ["prompt"] * (n - 4) + ["draft"] * (k - 1)
            want[n - 2 + k] = "own"  # the query's own slot (the last context slot at depth 1)
            assert row.regions == want
            assert row.token_ids[:n] == seq[1:n + 1] and row.token_ids[n:] == res.rounds[r].input_ids[1:k]
            f = row.frame()
            assert list(f.columns) == ["position", "region", "token_id", "token", "attention"]
            np.testing.assert_array_equal(f["attention"].to_numpy(), np.asarray(row))
            assert abs(float(row.sum()) - 1) < 1e-4  # still a plain probability vector for numpy


def test_public_namespace_and_flat_compare(live):
    *_, path = live
    names = dir(dt)
    assert not {"sys", "importlib", "types", "annotations", "TYPE_CHECKING"} & set(names)
    assert {"capture", "load", "speculate", "compare_many", "__version__"} <= set(names)
    tr = dt.load(path)
    s = tr.compare()
    assert not any(s[c].map(lambda v: isinstance(v, (list, tuple))).any() for c in s.columns)
    raw = tr.comparison().summary().iloc[0]
    assert [s.iloc[0][f"per_position_rate_d{i}"] for i in range(1, 5)] == pytest.approx(raw["per_position_rate"])
    assert [s.iloc[0][f"n_alpha_d{i}"] for i in range(1, 5)] == pytest.approx(raw["n_alpha"], nan_ok=True)
    assert list(dt.compare_many([path]).columns) == list(s.columns)


def test_target_tokenizer_is_callable_like_hf(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from drifttool.model.target import TextTokenizer, load_target

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    t = tiny_target(vocab=64, hidden=64, kv_heads=2)
    t.model.save_pretrained(tmp_path / "target")
    raw.save(str(tmp_path / "target" / "tokenizer.json"))
    tgt = load_target(tmp_path / "target")
    tok = tgt.tokenizer
    assert isinstance(tok, TextTokenizer)
    assert tok("hello world")["input_ids"] == [1, 2] == tok.encode("hello world") == tgt.encode("hello world")
    assert tok(["hello", "again world"])["input_ids"] == [[1], [3, 2]]
    assert tok.decode([1, 2]) == "hello world" and tok.convert_ids_to_tokens([3]) == ["again"]
    assert len(tok) == tok.vocab_size == 4 and tok.token_to_id("world") == 2  # the rest passes through
