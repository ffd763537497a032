"""Capture overhead: drafting with `Capture` on vs off, same drafter, same inputs, interleaved repetitions.

Times exactly the drafting path of a round (refresh of the accepted slots with target features, K-1 chained
draft steps, and with capture on the per-step hooks plus `Capture.end_round`). Target features are random
tensors of the right shape; no target runs. Bars (DESIGN.md): <= 1.10x at 2k context, <= 1.05x at 16k.

    python bench/bench_overhead.py                 # full: 512, 2k, 8k, 16k
    python bench/bench_overhead.py --smoke         # seconds
    python bench/bench_overhead.py --profile 16k   # cProfile of capture-on rounds at one context
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import (BenchShape, draft_round, fmt_ctx, make_context, make_drafter, median, parse_contexts,
                     prefill, print_table)

from drifttool.hooks import Capture

BARS = {2048: 1.10, 16384: 1.05}


def time_rounds(drafter, cache, ctx, shape, rounds: int, cap: Capture | None) -> float:
    """Seconds per round (mean over `rounds` back-to-back rounds)."""
    obs = [cap] if cap is not None else []
    t0 = time.perf_counter()
    for r in range(rounds):
        draft_round(drafter, cache, ctx, shape, r, obs)
    return (time.perf_counter() - t0) / rounds


def measure(n: int, shape: BenchShape, reps: int, rounds: int, warmup: int = 3) -> dict:
    drafter = make_drafter(shape, max_pos=max(n + 64, 2048))
    ctx = make_context(shape, n)
    cache = prefill(drafter, ctx, shape)
    cap = Capture(drafter)
    t = {"on": [], "off": []}
    for mode in ("on", "off"):  # warm-up, untimed
        with cap if mode == "on" else _null():
            time_rounds(drafter, cache, ctx, shape, warmup, cap if mode == "on" else None)
    for rep in range(reps):
        order = ("on", "off") if rep % 2 == 0 else ("off", "on")  # alternate to cancel drift
        for mode in order:
            if mode == "on":
                cap.new_prompt()
                with cap:
                    t["on"].append(time_rounds(drafter, cache, ctx, shape, rounds, cap))
            else:
                t["off"].append(time_rounds(drafter, cache, ctx, shape, rounds, None))
    on, off = median(t["on"]), median(t["off"])
    paired = median([a / b for a, b in zip(t["on"], t["off"])])
    return {"n": n, "on_ms": 1e3 * on, "off_ms": 1e3 * off, "ratio": on / off, "paired": paired,
            "captured": len(cap.rounds)}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny settings, seconds")
    ap.add_argument("--profile", metavar="CTX", help="cProfile capture-on rounds at one context and exit")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    shape = BenchShape(depth=a.depth)
    if a.smoke:
        a.contexts, a.reps, a.rounds = "256,1k", 3, 3
    if a.profile:
        profile(parse_contexts(a.profile)[0], shape, a.rounds)
        return []
    print(f"# capture overhead: {shape.describe()}; {a.reps} interleaved reps x {a.rounds} rounds, "
          f"medians; {a.threads} thread(s)")
    res = [measure(n, shape, a.reps, a.rounds) for n in parse_contexts(a.contexts)]
    rows = []
    for r in res:
        bar = BARS.get(r["n"])
        verdict = "" if bar is None else (f"<= {bar:.2f} ok" if r["ratio"] <= bar else f"> {bar:.2f} MISSED")
        rows.append([fmt_ctx(r["n"]), f"{r['off_ms']:.3f}", f"{r['on_ms']:.3f}", f"{r['ratio']:.3f}x",
                     f"{r['paired']:.3f}x", verdict])
    print_table(["context", "off ms/round", "on ms/round", "on/off", "paired median", "bar"], rows)
    print("SUMMARY overhead: " + ", ".join(f"{fmt_ctx(r['n'])} {r['ratio']:.3f}x" for r in res)
          + " (capture on/off, median ms per round)")
    return res


if __name__ == "__main__":
    main()
