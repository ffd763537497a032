"""Capture overhead: drafting with `Capture` on vs off, same drafter, same inputs, interleaved repetitions.

Times exactly the drafting path of a round (refresh of the accepted slots with target features, K-1 chained
draft steps, and with capture on the per-step hooks plus `Capture.end_round`). Target features are random
tensors of the right shape; no target runs. Bars (DESIGN.md): <= 1.10x at 2k context, <= 1.05x at 16k.

Two clocks per timed block: the CPU time of the drafting thread (primary: on a machine shared with other
jobs, wall time mostly measures the scheduler) and wall time (reported beside it). One torch thread.

    python bench/bench_overhead.py                 # full: 512, 2k, 8k, 16k
    python bench/bench_overhead.py --smoke         # seconds
    python bench/bench_overhead.py --profile 16k   # cProfile of capture-on rounds at one context
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import (
    BenchShape,
    draft_round,
    fmt_ctx,
    make_context,
    make_drafter,
    median,
    parse_contexts,
    prefill,
    print_table,
)

from drifttool.run.hooks import Capture

BARS = {2048: 1.10, 16384: 1.05}


def time_rounds(drafter, cache, ctx, shape, rounds: int, cap: Capture | None) -> tuple[float, float]:
    """(CPU, wall) seconds per round, mean over `rounds` back-to-back rounds."""
    obs = [cap] if cap is not None else []
    c0, w0 = time.thread_time(), time.perf_counter()
    for r in range(rounds):
        draft_round(drafter, cache, ctx, shape, r, obs)
    return (time.thread_time() - c0) / rounds, (time.perf_counter() - w0) / rounds


def measure(n: int, shape: BenchShape, reps: int, rounds: int, warmup: int = 3) -> dict:
    drafter = make_drafter(shape, max_pos=max(n + 64, 2048))
    ctx = make_context(shape, n)
    cache = prefill(drafter, ctx, shape)
    cap = Capture(drafter)
    end_cpu: list[float] = []
    end_round = cap.end_round

    def timed_end_round(*args):  # the per-round batched computation alone (CPU time)
        c0 = time.thread_time()
        end_round(*args)
        end_cpu.append(time.thread_time() - c0)

    cap.end_round = timed_end_round
    t = {"on": [], "off": []}
    with cap:  # warm-up, untimed
        time_rounds(drafter, cache, ctx, shape, warmup, cap)
    time_rounds(drafter, cache, ctx, shape, warmup, None)
    for rep in range(reps):
        order = ("on", "off") if rep % 2 == 0 else ("off", "on")  # alternate to cancel drift
        for mode in order:
            if mode == "on":
                cap.new_prompt()
                with cap:
                    t["on"].append(time_rounds(drafter, cache, ctx, shape, rounds, cap))
            else:
                t["off"].append(time_rounds(drafter, cache, ctx, shape, rounds, None))
    on, off = (median([c for c, _ in t[m]]) for m in ("on", "off"))
    won, woff = (median([w for _, w in t[m]]) for m in ("on", "off"))
    paired = median([a[0] / b[0] for a, b in zip(t["on"], t["off"])])
    return {"n": n, "on_ms": 1e3 * on, "off_ms": 1e3 * off, "ratio": on / off, "paired": paired,
            "wall_ratio": won / woff, "wall_off_ms": 1e3 * woff, "end_ms": 1e3 * median(end_cpu),
            "floor_ms": 1e3 * recompute_floor(cache, shape, n)}


def recompute_floor(cache, shape: BenchShape, n: int, reps: int = 15) -> float:
    """CPU seconds of the least any recomputing capture must do per round: the K x heads x L scores
    (one batched matmul over the final key cache) and one exp over them."""
    keys = cache.keys()[0]
    rep = shape.heads // shape.kv_heads
    q = torch.randn(shape.kv_heads, shape.depth * rep, shape.head_dim)
    ts = []
    for _ in range(reps):
        c0 = time.thread_time()
        torch.matmul(q, keys.transpose(1, 2)).exp_()
        ts.append(time.thread_time() - c0)
    return median(ts)


def profile(n: int, shape: BenchShape, rounds: int) -> None:
    import cProfile
    import pstats

    drafter = make_drafter(shape, max_pos=max(n + 64, 2048))
    ctx = make_context(shape, n)
    cache = prefill(drafter, ctx, shape)
    with Capture(drafter) as cap:
        time_rounds(drafter, cache, ctx, shape, 3, cap)
        pr = cProfile.Profile()
        pr.enable()
        time_rounds(drafter, cache, ctx, shape, rounds, cap)
        pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="512,2k,8k,16k", help="comma list, e.g. 512,2k,8k,16k")
    ap.add_argument("--reps", type=int, default=15, help="interleaved on/off repetitions per context")
    ap.add_argument("--rounds", type=int, default=20, help="rounds timed back to back per repetition")
    ap.add_argument("--depth", type=int, default=8, help="K draft tokens per round")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny settings, seconds")
    ap.add_argument("--label", default="overhead", help="name on the SUMMARY line")
    ap.add_argument("--profile", metavar="CTX", help="cProfile capture-on rounds at one context and exit")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    shape = BenchShape(a.hidden, a.heads, a.kv_heads, a.vocab, a.depth)
    if a.smoke:
        a.contexts, a.reps, a.rounds = "256,1k", 3, 3
    if a.profile:
        profile(parse_contexts(a.profile)[0], shape, a.rounds)
        return []
    print(f"# capture overhead: {shape.describe()}; {a.reps} interleaved reps x {a.rounds} rounds, "
          f"medians; {a.threads} torch thread(s)")
    res = [measure(n, shape, a.reps, a.rounds) for n in parse_contexts(a.contexts)]
    rows = []
    for r in res:
        bar = BARS.get(r["n"])
        verdict = "" if bar is None else (f"<= {bar:.2f} ok" if r["ratio"] <= bar else f"> {bar:.2f} MISSED")
        rows.append([fmt_ctx(r["n"]), f"{r['off_ms']:.2f}", f"{r['on_ms']:.2f}", f"{r['ratio']:.3f}x",
                     f"{r['paired']:.3f}x", f"{r['end_ms']:.2f}", f"{100 * r['end_ms'] / r['off_ms']:.1f}%",
                     f"{r['floor_ms']:.2f}", f"{100 * r['floor_ms'] / r['off_ms']:.1f}%", f"{r['wall_ratio']:.3f}x",
                     verdict])
    print_table(["context", "off ms", "on ms", "on/off", "paired", "end_round ms", "end/off", "floor ms",
                 "floor/off", "on/off wall", "bar"], rows)
    print("(ms = median CPU ms per drafting round; paired = median of per-rep on/off; end_round = the batched "
          "per-round computation alone; floor = one matmul + exp over K x heads x L, the least any "
          "recomputing capture costs)")
    bars = [f"{fmt_ctx(r['n'])} <= {BARS[r['n']]:.2f} {'met' if r['ratio'] <= BARS[r['n']] else 'MISSED'}"
            for r in res if r["n"] in BARS]
    print(f"SUMMARY {a.label}: " + ", ".join(f"{fmt_ctx(r['n'])} {r['ratio']:.3f}x" for r in res)
          + f" (capture on/off, median CPU time per drafting round, hidden {shape.hidden})"
          + (f"; bars: {', '.join(bars)}" if bars else ""))
    return res


if __name__ == "__main__":
    main()
