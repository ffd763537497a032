"""Peak memory: drifttool capture vs an eager `output_attentions`-style capture of the same drafter.

Each point (mode x context) runs in a fresh interpreter: build the drafter and random target features,
reset the kernel's peak-RSS counter (/proc/self/clear_refs; else ru_maxrss), then prefill the context in
512-slot chunks and run a few drafting rounds, and report the peak RSS above the level before the run.
Torch's CPU allocator keeps no statistics, so RSS is the measurement; the bytes each approach must hold
are printed beside it (analytic). Allocator retention is taken out: the child runs with glibc's mmap
threshold fixed at 64 KiB (MALLOC_MMAP_THRESHOLD_, which also turns off its dynamic growth), so every
buffer of 64 KiB or more is its own mapping, returned to the OS when freed, and RSS peaks follow live bytes.

Modes: `none` drafts with SDPA and no capture (the drafter's own memory: KV cache, activations);
`lse` adds `Capture(full_every=0)` (masses from the kernel's log-sum-exp: the few sink and draft keys);
`drifttool` adds `Capture` as `drifttool capture` runs it (full_every=16: round 0 of the run scores K x heads
x L, never L x L); `eager` switches the drafter to eager attention and keeps every probability map it
produces, as a capture storing `output_attentions` would: the causal L x L maps of the prefill chunks plus
every refresh and draft-step row. Bars: drifttool linear in L and >= 10x below eager at 8k; the lse path's
addition independent of L.

    python bench/bench_memory.py            # 1k, 2k, 4k, 8k, 16k
    python bench/bench_memory.py --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import BenchShape, fmt_ctx, parse_contexts, print_table

MiB = 2**20
CHUNK = 512
MODES = ("none", "lse", "drifttool", "eager")
MMAP_THRESHOLD = 65536


def analytic(mode: str, n: int, shape: BenchShape, rounds: int) -> int:
    """Bytes the capture itself must hold at its peak (fp32), beyond the drafter's own state."""
    nh, k, m = shape.heads, shape.depth, shape.refresh
    if mode == "none":
        return 0
    if mode == "lse":  # q rows, lse rows, the few gathered keys: no L term
        return 4 * k * nh * (2 * shape.head_dim + 8)
    if mode == "drifttool":  # scores and their exp for one round: [K, heads, L] twice
        return 2 * k * nh * (n - 1 + k) * 4
    maps = sum(nh * (min(a + CHUNK, n - m) - a) * min(a + CHUNK, n - m) for a in range(0, n - m, CHUNK))
    rows = rounds * nh * (m * n + sum(n + j for j in range(1, k)))  # refresh rows + K-1 step rows per round
    return 4 * (maps + rows)


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(val.split()[0]) * 1024
    return out


def child(mode: str, n: int, shape: BenchShape, rounds: int) -> dict:
    """One point, in this (fresh) process."""
    import gc
    import resource

    import torch
    from _common import draft_round, make_context, make_drafter, prefill

    from drifttool.run.hooks import Capture

    torch.set_num_threads(1)
    drafter = make_drafter(shape, max_pos=max(n + 64, 2048))
    ctx = make_context(shape, n)
    warm = make_context(shape, 64)  # one-time runtime initialisation stays out of the measurement
    draft_round(drafter, prefill(drafter, warm, shape), warm, shape)
    kept: list[torch.Tensor] = []
    cap = None
    if mode in ("drifttool", "lse"):
        from drifttool.run.hooks import FULL_EVERY

        cap = Capture(drafter, full_every=FULL_EVERY if mode == "drifttool" else 0).attach()
    elif mode == "eager":
        drafter.set_attn_impl("eager")
        drafter.layer.self_attn.hook_probs.register_forward_hook(lambda _m, _i, out: kept.append(out))
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        method = "VmHWM"
    except OSError:
        method = "ru_maxrss"
    base = _status()["VmRSS"]
    t0 = time.perf_counter()
    cache = prefill(drafter, ctx, shape, chunk=CHUNK)
    for r in range(rounds):
        draft_round(drafter, cache, ctx, shape, r, [cap] if cap else [])
    wall = time.perf_counter() - t0
    peak = _status()["VmHWM"] if method == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    held = sum(t.numel() * t.element_size() for t in kept)
    return {"mode": mode, "n": n, "peak_delta": peak - base, "method": method, "kept_bytes": held, "wall_s": wall}


def run_point(mode: str, n: int, a) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--contexts", str(n), "--rounds", str(a.rounds),
           "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--hidden", str(a.hidden)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"memory point {mode}@{n} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="1k,2k,4k,8k,16k")
    ap.add_argument("--rounds", type=int, default=4, help="drafting rounds after the prefill")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--max-eager-gib", type=float, default=3.0,
                    help="measure an eager point only if the maps it must keep fit in this many GiB")
    ap.add_argument("--jobs", type=int, default=3, help="points measured side by side (separate processes)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    shape = BenchShape(a.hidden, a.heads, a.kv_heads)
    if a.child:
        print(json.dumps(child(a.child, parse_contexts(a.contexts)[0], shape, a.rounds)))
        return {}
    if a.smoke:
        a.contexts, a.rounds = "512", 1
    ctxs = parse_contexts(a.contexts)
    print(f"# peak memory: {shape.describe()}; prefill in {CHUNK}-slot chunks + {a.rounds} rounds; "
          "one fresh process per point; peak RSS above the pre-run level")
    points = [(m, n) for n in ctxs for m in MODES
              if m != "eager" or analytic(m, n, shape, a.rounds) <= a.max_eager_gib * 2**30]
    if a.smoke:  # in this process, to stay within seconds: checks the code path, not the numbers
        res = {(m, n): child(m, n, shape, a.rounds) for m, n in points}
    else:
        with ThreadPoolExecutor(a.jobs) as pool:  # each process measures its own RSS: side by side is fine
            res = dict(zip(points, pool.map(lambda p: run_point(*p, a), points)))
    rows = []
    for n in ctxs:
        meas = {m: res[m, n]["peak_delta"] / MiB if (m, n) in res else None for m in MODES}
        ratio = f"{meas['eager'] / meas['drifttool']:.1f}x" if meas["eager"] is not None and meas["drifttool"] > 0 \
            else "n/a"
        eager = f"{meas['eager']:.1f}" if meas["eager"] is not None else "skipped"
        rows.append([fmt_ctx(n), f"{meas['none']:.1f}", f"{meas['lse'] - meas['none']:+.2f}",
                     f"{meas['drifttool'] - meas['none']:+.2f}", f"{meas['drifttool']:.1f}", eager, ratio,
                     f"{analytic('lse', n, shape, a.rounds) / MiB:.3f}",
                     f"{analytic('drifttool', n, shape, a.rounds) / MiB:.2f}",
                     f"{analytic('eager', n, shape, a.rounds) / MiB:.0f}"])
    print_table(["context", "none MiB", "lse adds", "drifttool adds", "drifttool MiB", "eager MiB", "eager/drifttool",
                 "lse held (analytic)", "drifttool held (analytic)", "eager held (analytic)"], rows)
    method = next(iter(res.values()))["method"]
    mmap = "in-process, no fixed mmap threshold" if a.smoke else f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}"
    print(f"(MiB = peak RSS above the pre-run level, measured via {method}, {mmap}; 'adds' = the mode minus "
          f"`none` at the same context; 'held' = bytes the capture must keep at its peak; eager skipped where its "
          f"maps exceed --max-eager-gib {a.max_eager_gib})")
    ref = 8192 if ("eager", 8192) in res else max(n for n in ctxs if ("eager", n) in res)
    ratio_ref = res["eager", ref]["peak_delta"] / max(1, res["drifttool", ref]["peak_delta"])  # smoke: can be 0
    adds = {m: [(res[m, n]["peak_delta"] - res["none", n]["peak_delta"]) / MiB for n in ctxs]
            for m in ("lse", "drifttool")}
    fits = {m: linear_fit(ctxs, v) for m, v in adds.items()}
    eager_n = [n for n in ctxs if ("eager", n) in res]
    growth = ""
    if len(eager_n) > 1:
        lo, hi = eager_n[0], eager_n[-1]
        expo = math.log(res["eager", hi]["peak_delta"] / res["eager", lo]["peak_delta"]) / math.log(hi / lo)
        growth = f"; eager grows as L^{expo:.1f} ({fmt_ctx(lo)}-{fmt_ctx(hi)})"
    fit = fits["drifttool"]
    print(f"SUMMARY memory: eager/drifttool at {fmt_ctx(ref)} = {ratio_ref:.1f}x; capture adds (drifttool) "
          f"{fit['a']:.2f} MiB + {fit['b'] * 1024:.3f} KiB/token x L (max residual {fit['res']:.2f} MiB); "
          f"lse path adds {fits['lse']['a']:.2f} MiB + {fits['lse']['b'] * 1024:.3f} KiB/token x L "
          f"(max residual {fits['lse']['res']:.2f} MiB)" + growth)
    return {"ratio": ratio_ref, "ref": ref, "fit": fit, "fits": fits, "points": {f"{m}@{n}": v for (m, n), v in res.items()}}


def linear_fit(xs: list[int], ys: list[float]) -> dict[str, float]:
    """Least squares y = a + b x; res = the largest |residual|."""
    if len(xs) < 2:
        return {"a": ys[0], "b": 0.0, "res": 0.0}
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    return {"a": a, "b": b, "res": max(abs(y - a - b * x) for x, y in zip(xs, ys))}


if __name__ == "__main__":
    main()
