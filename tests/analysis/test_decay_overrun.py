"""Long-context decay fit and break-even on synthetic data; a tiny drafter run past its trained window."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from drifttool.analysis import decay as dc
from drifttool.analysis.compare import Comparison
from drifttool.analysis.export import comparison_json
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace


def test_fit_recovers_slope_and_crossing():
    rng = np.random.default_rng(0)
    ctx = 2 ** rng.uniform(6, 14, 400)
    al = 6.0 - 0.4 * np.log2(ctx) + rng.normal(0, 0.05, ctx.size)
    f = dc.fit_log2(ctx, al, np.arange(ctx.size) // 10)  # 40 groups of 10 rounds
    assert f["slope"] == pytest.approx(-0.4, abs=0.01)
    assert f["intercept"] == pytest.approx(6.0, abs=0.1)
    assert f["slope_se"] < 0.01 and f["slope_lo"] < -0.4 < f["slope_hi"] and f["r2"] > 0.99 and f["n_groups"] == 40
    at, status = dc.crossing(f, 2.0, ctx.min(), ctx.max())  # 6 - 0.4 log2 L = 2  ->  L = 2^10
    assert at == pytest.approx(1024, rel=0.1) and status == "within measured range"
    assert dc.crossing(f, 6.0, ctx.min(), ctx.max())[1] == "below break-even over the whole measured range"
    assert dc.crossing(f, -1.0, ctx.min(), ctx.max())[1] == "extrapolated beyond measured range"
    flat = dc.fit_log2(ctx, np.full(ctx.size, 3.0))
    assert flat["slope"] == pytest.approx(0.0) and dc.crossing(flat, 2.0, 64, 1e4)[0] is None
    assert math.isnan(dc.fit_log2([100, 100, 100], [1, 2, 3])["slope"])  # one distinct context: no trend
    assert dc.breakeven_al(4, 0.25) == 2.0


def _group_slopes(tmp_path, n_groups: int):
    """K = 8; each document (group) has 8 rounds at contexts 2^6..2^13 and its own slope: -0.5, +0.5, ... in
    turn, plus a little jitter. The rounds fit their group's line almost exactly, so an OLS SE over rounds is
    small, while the groups disagree about the slope."""
    ctx, acc, prompt = [], [], []
    for g in range(n_groups):
        b = (0.5 if g % 2 else -0.5) + 0.05 * g
        for j in range(6, 14):
            ctx.append(2 ** j)
            acc.append(int(round(4 + b * (j - 9.5))))
            prompt.append(f"doc{g}")
    spec = {"accepted": acc, "context": ctx, "prompt": prompt}
    return read_trace(write_trace(tmp_path / f"groups{n_groups}.drift", {"d": spec}, depth=8))


def test_decay_slope_interval_is_over_groups(tmp_path):
    """The slope's '± SE' was OLS over rounds, as if rounds were independent: a decay table now carries a group
    bootstrap of the slope (the chain's resampling weights), and nothing below 6 groups."""
    from rich.console import Console

    from drifttool.analysis.metrics import _resample_weights
    from drifttool.analysis.report import print_decay

    cmp = Comparison.of([_group_slopes(tmp_path, 12)])
    row = dc.decay_table(cmp).iloc[0]
    f = dc.round_frame(cmp)
    x, y = np.log2(f["context_len"].to_numpy(float)), f["acceptance_length"].to_numpy(float)
    resid = y - np.polyval(np.polyfit(x, y, 1), x)
    ols_se = np.sqrt((resid ** 2).sum() / (len(x) - 2) / ((x - x.mean()) ** 2).sum())
    # naive: refit on each resample of whole documents (rounds repeated as often as their group is drawn)
    docs = sorted(f["group"].astype(str).unique())
    slopes = []
    for w in _resample_weights(len(docs), 10_000, 0):
        keep = np.repeat(np.arange(len(f)), [int(w[docs.index(g)]) for g in f["group"].astype(str)])
        slopes.append(np.polyfit(x[keep], y[keep], 1)[0])
    assert row["groups"] == 12 and row["al_per_doubling"] == pytest.approx(np.polyfit(x, y, 1)[0])
    assert row["al_per_doubling_se"] == pytest.approx(np.std(slopes, ddof=1))
    assert [row["al_per_doubling_lo"], row["al_per_doubling_hi"]] == pytest.approx(np.percentile(slopes, [2.5, 97.5]))
    assert row["al_per_doubling_se"] > 2 * ols_se
    con = Console(record=True, width=80)
    print_decay(con, cmp)
    text = " ".join(con.export_text().split())
    assert f"[{row['al_per_doubling_lo']:.3f}," in text and "n = 12 groups" in text and "±" not in text
    # 5 documents: the slope, and no interval
    few = Comparison.of([_group_slopes(tmp_path, 5)])
    row = dc.decay_table(few).iloc[0]
    assert row["groups"] == 5 and np.isfinite(row["al_per_doubling"])
    assert np.isnan([row["al_per_doubling_se"], row["al_per_doubling_lo"], row["al_per_doubling_hi"]]).all()
    con = Console(record=True, width=80)
    print_decay(con, few)
    assert "n = 5 groups, too few for an interval" in " ".join(con.export_text().split())


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
    # the self-lift trend, refitted here from the depth table: per round the mean self lift over depths >= 2
    d = cmp.depths[cmp.depths.depth >= 2]
    per_round = d.groupby(["prompt_id", "round"], observed=True).agg(x=("context_len", "first"), y=("self_lift", "mean"))
    assert row["self_lift_per_doubling"] == pytest.approx(np.polyfit(np.log2(per_round.x), per_round.y, 1)[0],
                                                          rel=1e-6)
    assert row["breakeven_al"] == pytest.approx(1.8)  # 1 + K c
    assert row["breakeven_context"] == pytest.approx(2 ** ((1.8 - 12) / -0.5))
    # one prompt, one group: the slope has no interval, so the crossing is read off but not established
    assert row["breakeven_status"] == ("extrapolated beyond measured range; too few groups for an interval on the "
                                       "AL slope: the crossing is not established")
    user = dc.decay_table(cmp, breakeven=6.0).iloc[0]  # 12 - 0.5 j = 6  ->  j = 12
    assert user["breakeven_context"] == pytest.approx(4096)
    assert user["breakeven_status"].startswith("within measured range;")
    assert user["breakeven_source"].startswith("user")
    cc = dc.context_curve(cmp)
    assert cc["acceptance_length"].tolist() == pytest.approx([12 - 0.5 * j for j in range(6, 14)])
    js = comparison_json(cmp, breakeven=6.0)["long_context_decay"]
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
    from drifttool.model.checkpoint import save_drafter
    from drifttool.model.tiny import tiny_drafter, tiny_target
    from drifttool.run.engines.hf import DrafterSpec, run_capture

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
    for col in ("mean_acceptance_length", "self_lift_trend", "feature_growth", "iid_acceptance_length"):
        assert col in split.columns
    js = comparison_json(cmp)["trained_window"]
    assert js["any_beyond"] and {r["side"] for r in js["split"]} == {"inside", "beyond"}

    from rich.console import Console

    from drifttool.analysis.report import print_comparison

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


def test_assumed_window_is_said_and_trained_window_option_splits(tmp_path):
    """Regression: a drafter trained at 512 whose config allows 4096 positions. Without a stated trained window
    compare split at 4096 and reported nothing beyond (exit 0, silently); now it says the window is assumed,
    and --trained-window (or the config's trained_window) splits where the drafter was trained."""
    from rich.console import Console
    from typer.testing import CliRunner

    from drifttool.analysis.report import print_comparison
    from drifttool.cli import app

    t = _decaying(tmp_path, window=16384)  # contexts up to 8192 < 16384: nothing "beyond" the assumed window
    cmp = Comparison.of([t])
    w = dc.windows(cmp)["d"]
    assert w["window"] == 16384 and w["assumed"]
    assert not dc.any_beyond(cmp)
    con = Console(record=True, width=200)
    print_comparison(con, cmp)
    text = con.export_text()
    assert "only max_position_embeddings" in text and "--trained-window" in text
    cmp512 = Comparison.of([t], trained_window=512)
    assert dc.windows(cmp512)["d"] == {**dc.windows(cmp512)["d"], "window": 512, "assumed": False,
                                       "source": "--trained-window"}
    assert dc.window_split(cmp512).set_index("side")["drafts"].to_dict() == {"inside": 6, "beyond": 10}
    res = CliRunner().invoke(app, ["compare", str(t.path), "--trained-window", "512", "--json"])
    assert res.exit_code == 0, res.output
    js = json.loads(res.output)["trained_window"]
    assert js["any_beyond"] and js["windows"]["d"]["window"] == 512
    # a config's own trained_window wins over max_position_embeddings and is not an assumption
    stated = dc.trained_window({"max_position_embeddings": 8192, "trained_window": 2048})
    assert stated["window"] == 2048 and not stated["assumed"]


def test_shipped_drafters_state_their_trained_window():
    """The bundled SmolLM2 drafters were trained on 4096-position conversations; config max positions 8192."""
    from drifttool.model.ckpt_config import normalise_config
    from drifttool.zoo import MODELS_DIR

    for v in ("eagle3", "eagle3.1"):
        p = MODELS_DIR / "smollm2" / v
        cfg = normalise_config(json.loads((p / "config.json").read_text()), p, None)
        assert cfg.trained_window == 4096 and cfg.max_position_embeddings == 8192
        assert dc.trained_window(cfg.to_dict())["window"] == 4096


def test_trained_window_override_reaches_capture_column(tmp_path):
    """--override trained_window=N: recorded in the manifest and used for the beyond_window column."""
    from drifttool.model.checkpoint import save_drafter
    from drifttool.model.tiny import tiny_drafter, tiny_target
    from drifttool.run.engines.hf import DrafterSpec, run_capture

    t = tiny_target(vocab=64, hidden=32, layers=4, heads=4, kv_heads=2, max_pos=256)
    t.model.save_pretrained(tmp_path / "target")
    save_drafter(tiny_drafter(t, max_position_embeddings=256), tmp_path / "d")
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "p", "token_ids": list(range(1, 60))}) + "\n")
    path = run_capture(str(tmp_path / "target"), [DrafterSpec("d", str(tmp_path / "d"),
                                                              overrides={"trained_window": "40"})],
                       str(tmp_path / "p.jsonl"), str(tmp_path / "o.drift"), depth=4, max_new_tokens=8, progress=False)
    tr = read_trace(path)
    assert tr.manifest["drafters"][0]["trained_window"] == 40
    assert tr.rounds["beyond_window"].astype(bool).all()  # every round's deepest query is past position 40


def test_a_crossing_is_established_only_when_the_groups_agree_the_trend_falls(tmp_path):
    """Where the break-even context comes from a slope whose group interval includes 0, the status says the crossing
    is not established (it was stated from the point slope alone); where every group falls, it stands as before."""
    ctx, acc, prompt = [], [], []
    for g in range(8):
        for j in range(6, 14):
            ctx.append(2 ** j)
            acc.append(max(0, int(round(7 - 0.6 * (j - 6) + (g % 3 - 1) * 0.4))))
            prompt.append(f"doc{g}")
    t = write_trace(tmp_path / "falls.drift", {"d": {"accepted": acc, "context": ctx, "prompt": prompt}}, depth=8)
    row = dc.decay_table(Comparison.of([read_trace(t)]), breakeven=2.0).iloc[0]
    assert row["al_per_doubling_hi"] < 0 and row["breakeven_context"] is not None
    assert "not established" not in row["breakeven_status"]
    ctx, acc, prompt = [], [], []
    for g in range(8):  # half the documents fall steeply, half rise: on average a slight fall
        b = -1.0 if g % 2 else 0.6
        for j in range(6, 14):
            ctx.append(2 ** j)
            acc.append(max(0, int(round(4 + b * (j - 9.5)))))
            prompt.append(f"doc{g}")
    t = write_trace(tmp_path / "mixed.drift", {"d": {"accepted": acc, "context": ctx, "prompt": prompt}}, depth=8)
    mixed = dc.decay_table(Comparison.of([read_trace(t)]), breakeven=3.0).iloc[0]
    assert mixed["al_per_doubling"] < 0 and mixed["al_per_doubling_lo"] < 0 < mixed["al_per_doubling_hi"]
    assert mixed["breakeven_context"] is not None
    assert mixed["breakeven_status"].endswith("95% CI includes 0: the crossing is not established")
