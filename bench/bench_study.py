"""Study-scale trace: size on disk and the dashboard's first page (load time, peak memory).

    python bench/bench_study.py [--prompts 1000 --rounds 200 --heads 32 --depth 8 --context 16384]
    python bench/bench_study.py --smoke

Builds (not committed; a temporary folder unless --workdir) a synthetic trace of two drafters with the shape of a
real study: per prompt, `--rounds` drafting rounds at ~`--context` tokens, K=`--depth`, `--heads` heads, every
optional column a capture writes (timings, head maxima), built by drifttool.trace.synthetic, written shard by
shard through drifttool's TraceWriter and merged by its compactor exactly as a capture finishes. Values are random
with realistic ranges, so they compress no better than real measurements. Then, in a fresh process per repeat, the dashboard's first-page data
path (views.load_trace -> build_view -> summary -> overview figure, plus the sidebar's filter options) is timed and
its peak RSS read (ru_maxrss). Targets: <= 1.5 GB on disk, <= 5 s and <= 2 GB for the first page.
--keep-rows N adds N sampled attention rows per prompt and drafter ([K, context] float32 each), reported apart."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from drifttool.trace import synthetic  # noqa: E402
from drifttool.trace.compact import compact_trace, folder_bytes  # noqa: E402
from drifttool.trace.synthetic import Shard  # noqa: E402

DRAFTERS = {"syn_e3": 1.3, "syn_e31": 1.0}
AUX_LAYERS = [2, 16, 29]
WINDOW = 2048  # the drafters' trained window (max_position_embeddings)


def prompt_shard(
    name: str, pid: str, rounds: int, k: int, heads: int, context: int, growth: float, rng, keep_rows: int = 0,
    full_every: int = 16,
) -> Shard:
    """One prompt x drafter: every table a capture writes, every optional column included. As `drifttool capture
    --full-every N` writes them: entropy and the head maxima only on full rounds (0, N, 2N, ...; NaN / -1
    elsewhere); full_every 1 = every round."""
    ctx = context + np.arange(rounds) * 2
    acc = np.minimum(rng.geometric(0.35, rounds) - 1, k)
    dep = np.arange(1, k + 1)[None, :]
    grid, cube = (rounds, k), (rounds, k, heads)
    pos = np.broadcast_to(ctx[:, None] - 2 + dep, grid)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    # per-head masses: a Dirichlet split of each head's attention over sink / draft / own / prompt
    w = rng.dirichlet([2.0, 0.3, 0.3, 4.0], size=cube).astype(np.float32)
    sink, draft, own = w[..., 0], w[..., 1] * (dep[..., None] >= 2), w[..., 2]
    full = (np.arange(rounds) % full_every == 0) if full_every > 0 else np.arange(rounds) == 0
    full_h = np.broadcast_to(full[:, None, None], cube)
    ent = np.where(full_h, rng.gamma(4.0, 0.8, cube), np.nan)
    rms = growth ** (dep - 1) * (1 + rng.normal(0, 0.02, grid))
    ids = rng.integers(0, 49152, size=(3, *grid))
    depth_values = {
        "input_id": ids[0], "draft_id": ids[1], "target_id": ids[2],
        "match": dep <= acc[:, None] + (rng.random(grid) < 0.2),
        "rms_in": rms, "l2_in": rms * 24, "rms_pre": rms * 1.1, "l2_pre": rms * 26,
        "rms_post": 1 + rng.normal(0, 0.01, grid), "l2_post": 24 + rng.normal(0, 0.1, grid),
        "massive": rng.random(grid) < 0.01, "attn_window_start": np.zeros(grid, np.int64),
    }
    top = np.where(rng.random(cube) < 0.6, 0, rng.integers(0, np.broadcast_to(pos[..., None] + 1, cube)))
    maxp = np.where(full_h, np.maximum(sink, rng.random(cube) * 0.5), np.nan)
    head_values = {"sink_mass": sink, "draft_mass": f32(draft), "own_mass": own, "entropy": f32(ent),
                   "max_prob": f32(maxp), "top_pos": np.where(full_h, top, -1).astype(np.int32)}
    round_values = {"bonus": rng.integers(0, 49152, rounds), "draft_s": rng.gamma(4, 0.005, rounds),
                    "verify_s": rng.gamma(4, 0.02, rounds), "full_stats": full}
    aux = {"layer_id": AUX_LAYERS, "rms_before": rng.lognormal(0, 0.3, (rounds, len(AUX_LAYERS))),
           "rms_after": 1 + rng.normal(0, 0.01, (rounds, len(AUX_LAYERS)))}
    rows, tokens = {}, {}
    for r in rng.choice(rounds, size=min(keep_rows, rounds), replace=False) if keep_rows else []:
        slots = int(ctx[r]) + k - 1
        rows[int(r)] = rng.dirichlet(np.ones(slots), size=k).astype(np.float32)
        tokens[int(r)] = rng.integers(0, 49152, slots).tolist()
    return synthetic.chain_tables(
        name, pid, acc, k, context=ctx, heads=heads, window=WINDOW,
        values={"heads": head_values, "depths": depth_values, "rounds": round_values, "aux": aux,
                "prompts": {"tags": "synthetic,study", "wall_s": float(rounds * 0.05)}},
        rows={r: (row, tokens[r]) for r, row in rows.items()})


def write_study(
    path: Path, prompts: int, rounds: int, k: int, heads: int, context: int, keep_rows: int = 0, seed: int = 0,
    full_every: int = 16,
) -> dict:
    """Write the synthetic study through TraceWriter (one shard per prompt), then merge it as a capture's end
    does; returns timings."""
    rng = np.random.default_rng(seed)
    man = synthetic.manifest(DRAFTERS, k, window=WINDOW, heads=heads, full_every=full_every,
                             probes="synthetic-study")
    shards = ((f"q{i:04d}", synthetic.join(
        prompt_shard(n, f"q{i:04d}", rounds, k, heads, context, g, rng, keep_rows, full_every)
        for n, g in DRAFTERS.items())) for i in range(prompts))
    t0 = time.perf_counter()
    synthetic.write(path, man, shards, compact=False, overwrite=True)
    t_write = time.perf_counter() - t0
    sharded = folder_bytes(path)
    t0 = time.perf_counter()
    compact_trace(path)  # merges the shards: what a capture does when it ends
    return {
        "write_s": t_write,
        "compact_s": time.perf_counter() - t0,
        "sharded_bytes": sharded[0],
        "sharded_files": sharded[1],
    }


FIRST_PAGE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from drifttool import plots
from drifttool.analysis.views import build_view, load_trace
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
t = load_trace(sys.argv[1])
heads = sorted({int(h) for h in t.table("head_summary", ["head"])["head"].unique()})  # the sidebar's options
tags = sorted({x for s in t.prompts["tags"].dropna() for x in str(s).split(",") if x})
v = build_view([t])
plots.acceptance_length_bars(v.summary).to_json()
v.prompts, v.info, v.notes
wall = time.perf_counter() - t0
print(json.dumps({"first_page_s": wall, "import_s": t_import, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "depth_rows": len(t.table("depths", ["depth"])), "heads": len(heads)}))
"""


def first_page(path: Path) -> dict:
    """The dashboard's first-page data path in a fresh process (cold caches of drifttool, warm OS page cache)."""
    r = subprocess.run(
        [sys.executable, "-c", FIRST_PAGE, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    if r.returncode:
        raise SystemExit(f"first-page run failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--keep-rows", type=int, default=0, help="sampled attention rows per prompt and drafter")
    ap.add_argument("--full-every", type=int, default=16,
                    help="entropy / head maxima on every N-th round only, as `drifttool capture --full-every` "
                         "(default 16, capture's default; 1 = every round)")
    ap.add_argument("--repeats", type=int, default=3, help="first-page runs (each a fresh process)")
    ap.add_argument("--workdir", help="where to build the trace (default: a temp dir, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the trace (with --workdir)")
    ap.add_argument(
        "--smoke", action="store_true", help="toy size: 6 prompts x 20 rounds x 4 heads, 1 repeat"
    )
    a = ap.parse_args(argv)
    if a.smoke:
        a.prompts, a.rounds, a.heads, a.context, a.repeats = 6, 20, 4, 1024, 1
    tmp = tempfile.mkdtemp(dir=a.workdir)
    path = Path(tmp) / "study.drift"
    try:
        w = write_study(path, a.prompts, a.rounds, a.depth, a.heads, a.context, a.keep_rows, full_every=a.full_every)
        size, files = folder_bytes(path)
        rows = sum(p.stat().st_size for p in (path / "rows").glob("*")) if (path / "rows").is_dir() else 0
        runs = [first_page(path) for _ in range(a.repeats)]
        rounds = a.prompts * a.rounds * len(DRAFTERS)
        print(
            f"study trace: {a.prompts} prompts x {a.rounds} rounds x {len(DRAFTERS)} drafters, K={a.depth}, "
            f"{a.heads} heads, context ~{a.context}, full rows every {a.full_every}: {rounds * a.depth * a.heads:,} head rows"
        )
        print(
            f"  written in {w['write_s']:.1f} s as {w['sharded_files']} shard files ({w['sharded_bytes'] / 1e6:.1f} MB), "
            f"merged in {w['compact_s']:.1f} s"
        )
        print(
            f"  on disk: {size / 1e6:.1f} MB in {files} files ({size / rounds:.0f} B/round; sampled rows "
            f"{rows / 1e6:.1f} MB of it); per table: "
            + ", ".join(
                f"{d.name} {sum(f.stat().st_size for f in d.iterdir()) / 1e6:.1f}"
                for d in sorted(path.iterdir())
                if d.is_dir()
            )
        )
        fp = [r["first_page_s"] for r in runs]
        rss = [r["peak_rss_mb"] for r in runs]
        print(
            f"  dashboard first page (load + view + summary + figure), {a.repeats} fresh processes: "
            f"{min(fp):.2f}-{max(fp):.2f} s (median {np.median(fp):.2f}); peak RSS {min(rss):.0f}-{max(rss):.0f} MB "
            f"(python + imports ~{runs[0]['import_s']:.1f} s not counted)"
        )
        ok = size <= 1.5e9 * a.prompts / 1000 and max(fp) <= 5 and max(rss) <= 2048
        print(
            f"SUMMARY study: trace {size / 1e9:.3f} GB (target <= 1.5 GB at 1,000 prompts), first page "
            f"{np.median(fp):.2f} s (<= 5 s), peak {max(rss):.0f} MB (<= 2048 MB){'' if ok else ' -- TARGET MISSED'}"
        )
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
