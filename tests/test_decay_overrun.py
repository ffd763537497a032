"""Long-context decay fit and break-even on synthetic data; a tiny drafter run past its trained window."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from synth_trace import write_trace

from drifttool import decay as dc
from drifttool.compare import Comparison
from drifttool.trace.reader import read_trace


def test_fit_recovers_slope_and_crossing():
    rng = np.random.default_rng(0)
    ctx = 2 ** rng.uniform(6, 14, 400)
    al = 6.0 - 0.4 * np.log2(ctx) + rng.normal(0, 0.05, ctx.size)
    f = dc.fit_log2(ctx, al)
    assert f["slope"] == pytest.approx(-0.4, abs=0.01)
    assert f["intercept"] == pytest.approx(6.0, abs=0.1)
    assert f["slope_se"] < 0.01 and f["r2"] > 0.99
    at, status = dc.crossing(f, 2.0, ctx.min(), ctx.max())  # 6 - 0.4 log2 L = 2  ->  L = 2^10
    assert at == pytest.approx(1024, rel=0.1) and status == "within measured range"
    assert dc.crossing(f, 6.0, ctx.min(), ctx.max())[1] == "below break-even over the whole measured range"
    assert dc.crossing(f, -1.0, ctx.min(), ctx.max())[1] == "extrapolated beyond measured range"
    flat = dc.fit_log2(ctx, np.full(ctx.size, 3.0))
    assert flat["slope"] == pytest.approx(0.0) and dc.crossing(flat, 2.0, 64, 1e4)[0] is None
    assert math.isnan(dc.fit_log2([100, 100, 100], [1, 2, 3])["slope"])  # one distinct context: no trend
    assert dc.breakeven_al(4, 0.25) == 2.0


def _decaying(tmp_path, window=4096, rope_scaling=None):
    # K = 8; two rounds at each context 2^j, j = 6..13, with mean AL exactly 12 - 0.5 j; c = 0.1
    ctx, acc, sm = [], [], []
    for j in range(6, 14):
        total = 16 - (j - 6)
        ctx += [2 ** j, 2 ** j]
        acc += [math.ceil(total / 2), total // 2]
        sm += [0.1 + 0.02 * j] * 2
    n = len(acc)
    spec = {"accepted": acc, "context": ctx, "self_mass": sm, "prompt": ["p"] * n,
            "draft_s": np.full(n, 8 * 0.004), "verify_s": np.full(n, 0.04)}
    return read_trace(write_trace(tmp_path / "decay.drift", {"d": spec}, depth=8, window=window,
                                  rope_scaling=rope_scaling))


def test_decay_table_on_synthetic_trace(tmp_path):
    cmp = Comparison.of([_decaying(tmp_path)])
    assert dc.cost_ratio(cmp.rounds, 8) == pytest.approx(0.1)
    row = dc.decay_table(cmp).iloc[0]
    assert row["al_per_doubling"] == pytest.approx(-0.5)
    assert row["al_intercept"] == pytest.approx(12.0)
    assert row["drift_per_doubling"] == pytest.approx(0.02)
    assert row["breakeven_al"] == pytest.approx(1.8)  # 1 + K c
    assert row["breakeven_context"] == pytest.approx(2 ** ((1.8 - 12) / -0.5))
    assert row["breakeven_status"] == "extrapolated beyond measured range"
    user = dc.decay_table(cmp, breakeven=6.0).iloc[0]  # 12 - 0.5 j = 6  ->  j = 12
    assert user["breakeven_context"] == pytest.approx(4096) and user["breakeven_status"] == "within measured range"
    assert user["breakeven_source"].startswith("user")
    cc = dc.context_curve(cmp)
    assert cc["acceptance_length"].tolist() == pytest.approx([12 - 0.5 * j for j in range(6, 14)])
    js = cmp.to_json(breakeven=6.0)["long_context_decay"]
    assert js["trend"][0]["breakeven_context"] == pytest.approx(4096)


def test_trained_window_prefers_original_max_positions(tmp_path):
    assert dc.trained_window({"max_position_embeddings": 2048})["window"] == 2048
    w = dc.trained_window({"max_position_embeddings": 131072,
                        "rope_scaling": {"rope_type": "llama3", "original_max_position_embeddings": 8192}})
    assert w["window"] == 8192 and w["source"].startswith("rope_scaling")
    # recorded beyond_window used max_position_embeddings (4096); the split uses the original window 512
    cmp = Comparison.of([_decaying(tmp_path, window=4096, rope_scaling={"original_max_position_embeddings": 512})])
    split = dc.window_split(cmp)
    assert split.set_index("side")["drafts"].to_dict() == {"inside": 6, "beyond": 10}  # contexts 64, 128, 256 inside


@pytest.fixture(scope="module")
def overrun_trace(tmp_path_factory):
    """A tiny target saved to disk and a drafter trained (configured) for 64 positions, run to ~110."""
    from drifttool.capture import DrafterSpec, run_capture
    from drifttool.checkpoint import save_drafter
    from drifttool.tiny import tiny_drafter, tiny_target

    w = tmp_path_factory.mktemp("overrun")
    t = tiny_target(vocab=64, hidden=32, layers=4, heads=4, kv_heads=2, max_pos=256)
    t.model.save_pretrained(w / "target")
    save_drafter(tiny_drafter(t, max_position_embeddings=64), w / "short")
    r = random.Random(0)
    (w / "probes.jsonl").write_text("".join(
        json.dumps({"id": f"p{n}", "token_ids": [r.randrange(1, 64) for _ in range(n)]}) + "\n" for n in (56, 100)))
    path = run_capture(str(w / "target"), [DrafterSpec("short", str(w / "short"))], str(w / "probes.jsonl"),
                       str(w / "overrun.drift"), depth=4, max_new_tokens=12, progress=False)
    return read_trace(path)


def test_overrun_split_has_rows_inside_and_beyond(overrun_trace):
    t = overrun_trace
    assert t.manifest["drafters"][0]["max_position_embeddings"] == 64
    cmp = Comparison.of([t])
    assert dc.any_beyond(cmp)
    # no rope scaling: the split's window is max_position_embeddings, so it agrees with the recorded column
    assert dc.beyond_rounds(cmp).tolist() == cmp.rounds["beyond_window"].astype(bool).tolist()
    split = dc.window_split(cmp)
    assert split["side"].tolist() == ["inside", "beyond"]
    assert (split["window"] == 64).all() and split["drafts"].sum() == len(cmp.rounds)
    for col in ("mean_acceptance_length", "drift_score", "feature_growth", "iid_acceptance_length"):
        assert col in split.columns
    js = cmp.to_json()["trained_window"]
    assert js["any_beyond"] and {r["side"] for r in js["split"]} == {"inside", "beyond"}

    from rich.console import Console

    from drifttool.report import print_comparison

    con = Console(record=True, width=200)
    print_comparison(con, cmp)
    text = con.export_text()
    assert "Trained window" in text and "beyond" in text and "Long-context decay" in text


def test_capture_records_round_timing(overrun_trace):
    r = overrun_trace.rounds
    assert {"draft_s", "verify_s"} <= set(r.columns)
    assert (r["draft_s"] > 0).all() and (r["verify_s"] > 0).all()
    cmp = Comparison.of([overrun_trace])
    c = dc.cost_ratio(cmp.rounds, cmp.depth)
    row = dc.decay_table(cmp).iloc[0]
    assert c > 0 and row["breakeven_al"] == pytest.approx(1 + 4 * c)
    assert row["context_min"] == 56 and row["context_max"] >= 100
