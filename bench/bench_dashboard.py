"""Dashboard data path: load + aggregation time per trace set, exactly what the app runs (drifttool.analysis.views),
plus the figure builders of every page.

    python bench/bench_dashboard.py [TRACE.drift ...] [--rows 1000000] [--heads 2]

Without traces it uses sample_traces/*.drift. It also writes (drifttool.trace.synthetic, through the trace
writer) a synthetic trace whose depths table has --rows rows (two drafters, K=8) and times it the same way;
--rows 0 skips it. The bar (the project's speed bar): first render of the sample traces under 3 s; the `overview`
column is that page's share."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from drifttool import plots  # noqa: E402
from drifttool.analysis.views import build_view, load_trace  # noqa: E402
from drifttool.trace import synthetic  # noqa: E402
from drifttool.trace.synthetic import Shard  # noqa: E402

K = 8
AUX_LAYERS = [2, 16, 29]


def _drafter_shard(name: str, pid: str, rounds: int, heads: int, growth: float, rng) -> Shard:
    """One prompt's tables for one synthetic drafter: masses drift with depth, RMS grows by `growth` per step."""
    ctx = 512 + np.arange(rounds) * 3
    acc = np.minimum(rng.geometric(0.35, rounds) - 1, K)
    dep = np.arange(1, K + 1)[None, :]
    shape = (rounds, K)
    sink = np.clip(0.6 - 0.04 * dep + rng.normal(0, 0.05, shape), 0, 1)
    selfm = np.where(dep >= 2, np.clip(0.05 * dep + rng.normal(0, 0.03, shape), 0, 1 - sink), 0.0)
    rms = growth ** (dep - 1) * (1 + rng.normal(0, 0.02, shape))
    match = dep <= acc[:, None] + (rng.random(shape) < 0.2)
    return synthetic.chain_tables(
        name, pid, acc, K, context=ctx, heads=heads, values={
            "heads": {"sink_mass": sink, "draft_mass": selfm / 2, "own_mass": selfm / 2, "entropy": 2.0 + 0.1 * dep},
            "depths": {"match": match, "rms_in": rms, "l2_in": rms * 16, "rms_pre": rms, "l2_pre": rms * 16,
                       "l2_post": 16.0},
            "aux": {"layer_id": AUX_LAYERS, "rms_before": rng.lognormal(0, 0.3, (rounds, len(AUX_LAYERS)))},
            "prompts": {"tags": "synthetic"}})


def write_synthetic(path: Path, rows: int, heads: int, prompts: int = 50, seed: int = 0, compact: bool = True) -> Path:
    """A trace with `rows` depth rows over two drafters (EAGLE-3-like growth vs flat), written shard by shard
    (then merged, as a capture ends, unless `compact` is False)."""
    rng = np.random.default_rng(seed)
    per_prompt = max(1, rows // (2 * prompts * K))
    drafters = {"syn_e3": 1.3, "syn_e31": 1.0}
    shards = ((f"s{i}", synthetic.join(_drafter_shard(n, f"s{i}", per_prompt, heads, g, rng) for n, g in drafters.items()))
              for i in range(prompts))
    return synthetic.write(path, synthetic.manifest(drafters, K, heads=heads), shards, compact=compact, overwrite=True)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def measure(label: str, paths: list[Path]) -> dict:
    """Time the dashboard path: load, view, each aggregated table, every page's figures."""
    traces, t_load = _timed(lambda: [load_trace(p) for p in paths])
    v, t_view = _timed(lambda: build_view(traces))
    t = {"load": t_load, "view": t_view}
    _, t["summary"] = _timed(lambda: v.summary)
    _, t["overview_figs"] = _timed(lambda: plots.acceptance_length_bars(v.summary).to_json())
    _, t["per_depth"] = _timed(lambda: v.per_depth)
    _, t["by_context"] = _timed(lambda: v.by_context)
    _, t["predictors"] = _timed(lambda: v.predictors())
    _, t["heads"] = _timed(lambda: (v.head_means, v.aux_summary, v.massive_by_depth))
    figs = lambda: [f.to_json() for f in (  # noqa: E731
        plots.depth_curves(v.per_depth), plots.feature_rms(v.per_depth), plots.acceptance_per_depth(v.per_depth),
        plots.head_heatmaps(v.head_means, "sink_mass"), plots.context_curves(v.by_context),
        plots.context_summary(v.by_context), plots.aux_rms(v.aux_summary),
        plots.massive_flags(v.massive_by_depth, v.aux_summary), plots.predictor_curves(v.predictors()),
        plots.predictor_correlations(v.predictors()))]
    _, t["figures"] = _timed(figs)
    return {
        "traces": label, "series": len(v.series), "depth_rows": sum(len(x.depths) for x in traces),
        "head_rows": sum(int(x.head_sums["n"].sum()) for x in traces),  # from the per-prompt head summary
        "overview_s": t["load"] + t["view"] + t["summary"] + t["overview_figs"],
        **{f"{k}_s": v_ for k, v_ in t.items()}, "total_s": sum(t.values()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="trace folders (default: sample_traces/*.drift)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="depth rows of the synthetic trace (0: skip)")
    ap.add_argument("--heads", type=int, default=2, help="heads per depth row in the synthetic trace")
    ap.add_argument("--prompts", type=int, default=50, help="prompts (shards) in the synthetic trace")
    ap.add_argument("--workdir", help="where to write the synthetic trace (default: a temp dir, removed)")
    a = ap.parse_args(argv)
    paths = [Path(p) for p in a.traces] or sorted((REPO / "sample_traces").glob("*.drift"))
    results = []
    if paths:
        results.append(measure(" ".join(p.name for p in paths), paths))
    else:
        print("no traces given and sample_traces/ holds none; timing the synthetic trace only")
    if a.rows > 0:
        with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
            syn, t_write = _timed(lambda: write_synthetic(Path(tmp) / "synthetic.drift", a.rows, a.heads,
                                                                    a.prompts))
            print(f"synthetic trace written in {t_write:.1f} s ({a.rows} depth rows requested, {a.heads} heads)")
            results.append(measure(f"synthetic {a.rows // 1000}k rows", [syn]))
    if not results:
        return 1
    df = pd.DataFrame(results)
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))
    s = " | ".join(f"{r['traces']}: overview {r['overview_s']:.2f} s, all pages {r['total_s']:.2f} s"
                   for r in results)
    print(f"summary: dashboard data path (load + aggregate + figures): {s} (bar: first render < 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
