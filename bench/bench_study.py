"""Study-scale trace: size on disk and the dashboard's first page (load time, peak memory).

    python bench/bench_study.py [--prompts 1000 --rounds 200 --heads 32 --depth 8 --context 16384]
    python bench/bench_study.py --smoke

Builds (not committed; a temporary folder unless --workdir) a synthetic trace of two drafters with the shape of a
real study: per prompt, `--rounds` drafting rounds at ~`--context` tokens, K=`--depth`, `--heads` heads, every
optional column a capture writes (timings, head maxima), written shard by shard through drifttool's TraceWriter
and merged by its compactor exactly as a capture finishes. Values are random with realistic ranges, so they
compress no better than real measurements. Then, in a fresh process per repeat, the dashboard's first-page data
path (views.load_trace -> build_view -> summary -> overview figure, plus the sidebar's filter options) is timed and
its peak RSS read (ru_maxrss). Targets (issue 17): <= 1.5 GB on disk, <= 5 s and <= 2 GB for the first page.
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
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from drifttool.trace.compact import folder_bytes  # noqa: E402
from drifttool.trace.writer import TraceWriter  # noqa: E402

DRAFTERS = {"syn_e3": 1.3, "syn_e31": 1.0}
AUX_LAYERS = [2, 16, 29]


def prompt_tables(
    name: str, pid: str, rounds: int, k: int, heads: int, context: int, growth: float, rng, keep_rows: int = 0,
    full_every: int = 16,
) -> tuple[dict[str, pd.DataFrame], dict[str, np.ndarray]]:
    """One prompt x drafter: every table a capture writes, with the columns and dtypes records.py gives them.
    As `drifttool capture --full-every N` writes them: entropy and the head maxima only on full rounds (0, N,
    2N, ...; NaN / -1 elsewhere); full_every 1 = every round."""
    ctx = context + np.arange(rounds) * 2
    acc = np.minimum(rng.geometric(0.35, rounds) - 1, k)
    rnd = np.arange(rounds)
    dep = np.tile(np.arange(1, k + 1), rounds)
    rep = lambda a, n=k: np.repeat(a, n)  # noqa: E731
    n = rounds * k
    pos = rep(ctx) - 2 + dep
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    # per-head masses: a Dirichlet split of each head's attention over sink / draft / own / prompt
    w = rng.dirichlet([2.0, 0.3, 0.3, 4.0], size=n * heads).astype(np.float32)
    sink, draft, own = w[:, 0], w[:, 1] * (np.repeat(dep, heads) >= 2), w[:, 2]
    ent = rng.gamma(4.0, 0.8, n * heads)
    full = (np.arange(rounds) % full_every == 0) if full_every > 0 else np.arange(rounds) == 0
    full_h = np.repeat(full, k * heads)
    ent = np.where(full_h, ent, np.nan)
    hm = lambda a: f32(a).reshape(n, heads).mean(1)  # noqa: E731
    rms = growth ** (dep - 1) * (1 + rng.normal(0, 0.02, n))
    ids = rng.integers(0, 49152, size=(3, n))
    depths = pd.DataFrame(
        {
            "drafter": name,
            "prompt_id": pid,
            "round": rep(rnd),
            "depth": dep,
            "context_len": rep(ctx),
            "position": pos,
            "input_id": ids[0],
            "draft_id": ids[1],
            "target_id": ids[2],
            "match": dep <= rep(acc) + (rng.random(n) < 0.2),
            "reached": dep <= rep(acc) + 1,
            "accepted": dep <= rep(acc),
            "sink_mass": hm(sink),
            "draft_mass": hm(draft),
            "own_mass": hm(own),
            "entropy": hm(ent),
            "rms_in": rms,
            "l2_in": rms * 24,
            "rms_pre": rms * 1.1,
            "l2_pre": rms * 26,
            "rms_post": 1 + rng.normal(0, 0.01, n),
            "l2_post": 24 + rng.normal(0, 0.1, n),
            "massive": rng.random(n) < 0.01,
            "beyond_window": pos >= 2048,
            "attn_window_start": np.zeros(n, np.int64),
        }
    )
    top = np.where(rng.random(n * heads) < 0.6, 0, rng.integers(0, np.repeat(pos, heads) + 1))
    top = np.where(full_h, top, -1)
    maxp = np.where(full_h, np.maximum(sink, rng.random(n * heads) * 0.5), np.nan)
    heads_df = pd.DataFrame(
        {
            "drafter": name,
            "prompt_id": pid,
            "round": rep(rnd, k * heads),
            "depth": np.repeat(dep, heads),
            "head": np.tile(np.arange(heads), n),
            "sink_mass": sink,
            "draft_mass": f32(draft),
            "own_mass": own,
            "entropy": f32(ent),
            "max_prob": f32(maxp),
            "top_pos": top.astype(np.int32),
        }
    )
    rounds_df = pd.DataFrame(
        {
            "drafter": name,
            "prompt_id": pid,
            "round": rnd,
            "context_len": ctx,
            "depth": k,
            "accepted": acc,
            "bonus": rng.integers(0, 49152, rounds),
            "beyond_window": ctx - 2 + k >= 2048,
            "draft_s": rng.gamma(4, 0.005, rounds),
            "verify_s": rng.gamma(4, 0.02, rounds),
            "full_stats": full,
        }
    )
    aux = pd.DataFrame(
        {
            "drafter": name,
            "prompt_id": pid,
            "round": rep(rnd, len(AUX_LAYERS)),
            "chunk": np.tile(np.arange(len(AUX_LAYERS)), rounds),
            "layer_id": np.tile(AUX_LAYERS, rounds),
            "rms_before": rng.lognormal(0, 0.3, rounds * len(AUX_LAYERS)),
            "rms_after": 1 + rng.normal(0, 0.01, rounds * 3),
            "massive": False,
        }
    )
    prompts = pd.DataFrame(
        [
            {
                "drafter": name,
                "prompt_id": pid,
                "tags": "synthetic,study",
                "prompt_len": int(ctx[0]),
                "n_generated": int((acc + 1).sum()),
                "n_rounds": rounds,
                "accepted_total": int(acc.sum()),
                "mean_acceptance_length": float(1 + acc.mean()),
                "wall_s": float(rounds * 0.05),
            }
        ]
    )
    tabs = {"prompts": prompts, "rounds": rounds_df, "depths": depths, "heads": heads_df, "aux": aux}
    rows: dict[str, np.ndarray] = {}
    if keep_rows:
        idx = []
        for r in rng.choice(rounds, size=min(keep_rows, rounds), replace=False):
            name_r = f"{name}|{pid}|{int(r)}"
            rows[name_r] = rng.dirichlet(np.ones(int(ctx[r]) + k - 1), size=k).astype(np.float32)
            idx.append(
                {
                    "drafter": name,
                    "prompt_id": pid,
                    "round": int(r),
                    "context_len": int(ctx[r]),
                    "tensor": name_r,
                    "slot_tokens": rng.integers(0, 49152, int(ctx[r]) + k - 1).tolist(),
                    "sink_slots": np.arange(4, dtype=np.int64),
                }
            )
        tabs["rows_index"] = pd.DataFrame(idx)
    return tabs, rows


def write_study(
    path: Path, prompts: int, rounds: int, k: int, heads: int, context: int, keep_rows: int = 0, seed: int = 0,
    full_every: int = 16,
) -> dict:
    """Write the synthetic study through TraceWriter (one shard per prompt) and its compactor; returns timings."""
    rng = np.random.default_rng(seed)
    manifest = {
        "drafters": [
            {
                "name": n,
                "layout": "synthetic",
                "variant": n,
                "flags": {},
                "overrides": {},
                "config_hash": n,
                "num_attention_heads": heads,
            }
            for n in DRAFTERS
        ],
        "capture": {
            "depth": k,
            "mode": "generate",
            "sink": {"first_n": 4, "positions": [], "token_ids": []},
            "probes": {"sha256": "synthetic-study"},
            "full_every": full_every,
        },
        "target": {"config_hash": "synthetic"},
    }
    t0 = time.perf_counter()
    w = TraceWriter(path, manifest, overwrite=True)
    for i in range(prompts):
        parts = [
            prompt_tables(n, f"q{i:04d}", rounds, k, heads, context, g, rng, keep_rows, full_every)
            for n, g in DRAFTERS.items()
        ]
        tabs = {t: pd.concat([p[0][t] for p in parts], ignore_index=True) for t in parts[0][0]}
        w.add(f"q{i:04d}", tabs, {kk: v for p in parts for kk, v in p[1].items()} or None)
    t_write = time.perf_counter() - t0
    sharded = folder_bytes(path)
    t0 = time.perf_counter()
    w.finish()  # merges the shards: what a capture does when it ends
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
