"""Capture overhead: drafting with `Capture` on vs off, same drafter, same inputs, interleaved repetitions.

Times exactly the drafting path of a round (refresh of the accepted slots with target features, K-1 chained
draft steps, and with capture on the per-step hooks plus `Capture.end_round`). Target features are random
tensors of the right shape; no target runs; the KV cache holds random keys/values (real_scale.fill_cache:
attention cost depends on shapes only). Two capture paths, each against the same capture-off rounds:
`new` (masses from the kernel's log-sum-exp; full rows every --full-every rounds) and `ref` (full rows every
round: the recomputing reference). Off / new / ref run in rotating order within each repetition; the spread
is min / median / max over repetitions of (path rounds / off rounds of the same repetition).

Shapes: `bench` (hidden 256, 8x32 heads, 2 kv, vocab 2048; bars: 2k <= 1.10x, 16k <= 1.05x) and `real`
(the Llama-3.1-8B EAGLE-3 head's shape through load_drafter, see real_scale.py; bar <= 1.02x everywhere).

Two clocks per timed block: the CPU time of the drafting thread (primary: on a machine shared with other
jobs, wall time mostly measures the scheduler) and wall time (reported beside it). One torch thread.

    python bench/bench_overhead.py                               # bench shape: 2k, 16k, 64k, fp32
    python bench/bench_overhead.py --shape real --dtype bfloat16 # real-scale shape
    python bench/bench_overhead.py --smoke                       # seconds
    python bench/bench_overhead.py --profile 16k --paths new     # cProfile of capture-on rounds
    python bench/bench_overhead.py --alternate 16k --reps 200    # paired off/taps/on blocks: mean +- SE
    python bench/bench_overhead.py --alternate 2k,16k --against db94bc4 --json bench/results/capture_overhead.json
        # before / after in one run: the revision's package and this checkout's, alternated block by block
"""

from __future__ import annotations

import argparse
import time

import torch
from _common import (
    BenchShape,
    Context,
    draft_round,
    fmt_ctx,
    make_drafter,
    median,
    parse_contexts,
    print_table,
)

from drifttool.run.hooks import FULL_EVERY, Capture

BARS = {"bench": {2048: 1.10, 16384: 1.05}, "real": {}}
REAL_BAR = 1.02
PATHS = ("new", "ref")


def bar_for(shape_name: str, n: int) -> float | None:
    return REAL_BAR if shape_name == "real" and 2048 <= n <= 65536 else BARS[shape_name].get(n)


def time_rounds(
    drafter, cache, ctx, shape, rounds: int, cap: Capture | None, start: int = 0
) -> tuple[float, float]:
    """(CPU, wall) seconds per round, mean over `rounds` back-to-back rounds numbered from `start` (the capture's
    full-row schedule counts rounds: numbering runs on across repetitions so the timed mix is the real one)."""
    obs = [cap] if cap is not None else []
    c0, w0 = time.thread_time(), time.perf_counter()
    for r in range(start, start + rounds):
        draft_round(drafter, cache, ctx, shape, r, obs)
    if cap is not None and hasattr(cap, "flush"):  # the rounds' batched host work is timed too (a capture that
        cap.flush()  # batches it would otherwise leave it for after the clock stops)
    return (time.thread_time() - c0) / rounds, (time.perf_counter() - w0) / rounds


_REAL: dict = {}  # the real-scale drafter of this run, by dtype


def setup(a, n: int):
    """(drafter, shape, context, cache) for one context length."""
    from real_scale import fill_cache

    dtype = getattr(torch, a.dtype)
    if a.shape == "real":
        from real_scale import AUX, VD, H, load

        drafter = _REAL.get(dtype) or _REAL.setdefault(dtype, load(dtype))  # loaded once per main()
        shape = BenchShape(H, 32, 8, VD, a.depth)
        feat_dim = len(AUX) * H
    else:
        shape = BenchShape(a.hidden, a.heads, a.kv_heads, a.vocab, a.depth)
        drafter = make_drafter(shape, max_pos=max(n + 64, 2048)).to(dtype)
        feat_dim = 3 * shape.hidden
    g = torch.Generator().manual_seed(n)
    seq = torch.randint(1, min(shape.vocab, 32000), (n + 1,), generator=g).tolist()
    feats = torch.randn(1, feat_dim, generator=g).expand(n, feat_dim)  # only the refreshed rows are read
    cache = fill_cache(drafter, n - shape.refresh, shape.depth)
    return drafter, shape, Context(n, seq, feats), cache


def measure(a, n: int, paths: tuple[str, ...]) -> dict:
    drafter, shape, ctx, cache = setup(a, n)
    caps = {p: Capture(drafter, full_every=a.full_every if p == "new" else 1) for p in paths}
    end_cpu: dict[str, list[float]] = {p: [] for p in paths}
    for p, cap in caps.items():

        def timed_end_round(*args, _f=cap.end_round, _p=p, _c=cap):  # the per-round computation alone (CPU
            c0 = time.thread_time()  # time; its host work done at once, not batched: an upper bound)
            _f(*args)
            _c.flush()
            end_cpu[_p].append(time.thread_time() - c0)

        cap.end_round = timed_end_round
    modes = ("off", *paths)
    t: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for m in modes:  # warm-up, untimed
        if m == "off":
            time_rounds(drafter, cache, ctx, shape, a.warmup, None)
        else:
            with caps[m]:
                time_rounds(drafter, cache, ctx, shape, a.warmup, caps[m])
    for rep in range(a.reps):
        order = modes[rep % len(modes) :] + modes[: rep % len(modes)]  # rotate to cancel drift
        for m in order:
            if m == "off":
                t[m].append(time_rounds(drafter, cache, ctx, shape, a.rounds, None))
            else:
                caps[m].rounds.clear()  # keep memory flat; the round numbering runs on
                with caps[m]:
                    t[m].append(
                        time_rounds(drafter, cache, ctx, shape, a.rounds, caps[m], a.warmup + rep * a.rounds)
                    )
    off = median([c for c, _ in t["off"]])
    out = {"n": n, "off_ms": 1e3 * off, "shape": shape, "floor_ms": 1e3 * recompute_floor(cache, shape, n)}
    for p in paths:
        pr = [x[0] / y[0] for x, y in zip(t[p], t["off"])]
        out[p] = {
            "on_ms": 1e3 * median([c for c, _ in t[p]]),
            "ratio": median([c for c, _ in t[p]]) / off,
            "spread": (min(pr), median(pr), max(pr)),
            "wall_ratio": median([w for _, w in t[p]]) / median([w for _, w in t["off"]]),
            "end_ms": 1e3 * median(end_cpu[p]),
            "end_mean_ms": 1e3 * sum(end_cpu[p]) / max(1, len(end_cpu[p])),
        }
    return out


def recompute_floor(cache, shape: BenchShape, n: int, reps: int = 15) -> float:
    """CPU seconds of the least any recomputing capture must do per round: the K x heads x L scores
    (one batched matmul over the final key cache) and one exp over them."""
    keys = cache.keys()[0]
    rep = shape.heads // shape.kv_heads
    q = torch.randn(shape.kv_heads, shape.depth * rep, shape.head_dim, dtype=keys.dtype)
    ts = []
    for _ in range(reps):
        c0 = time.thread_time()
        torch.matmul(q, keys.transpose(1, 2)).exp_()
        ts.append(time.thread_time() - c0)
    return median(ts)


def profile(a, n: int) -> None:
    import cProfile
    import pstats

    drafter, shape, ctx, cache = setup(a, n)
    full_every = a.full_every if "new" in a.paths else 1
    with Capture(drafter, full_every=full_every) as cap:
        time_rounds(drafter, cache, ctx, shape, 3, cap)
        pr = cProfile.Profile()
        pr.enable()
        time_rounds(drafter, cache, ctx, shape, a.rounds, cap)
        pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)


def alternate(a, n: int, samples: int) -> None:
    """Per-pair alternation on a noisy machine: off, taps only (the per-step hooks, end_round skipped) and the
    full capture, `samples` blocks of 2 rounds each, order flipped every block; prints mean (the cost: full
    rounds included at their real rate), median and the standard error of each mean ratio."""
    import statistics

    drafter, shape, ctx, cache = setup(a, n)
    on = Capture(drafter, full_every=a.full_every)
    taps = Capture(drafter, full_every=a.full_every)
    taps.end_round = lambda *args: None
    ms: dict[str, list[float]] = {"off": [], "taps": [], "on": []}
    time_rounds(drafter, cache, ctx, shape, a.warmup, None)
    r0 = 0
    for i in range(samples):
        for m in ("off", "taps", "on") if i % 2 == 0 else ("on", "taps", "off"):
            if m == "off":
                ms[m].append(time_rounds(drafter, cache, ctx, shape, 2, None)[0])
                continue
            cap = on if m == "on" else taps
            cap.rounds.clear()
            with cap:
                ms[m].append(time_rounds(drafter, cache, ctx, shape, 2, cap, r0)[0])
            r0 += 2
    off = statistics.mean(ms["off"])
    print(f"# alternation at {fmt_ctx(n)}: {samples} blocks of 2 rounds per mode, {a.shape} shape, {a.dtype}, "
          f"full rows every {a.full_every}")
    for m in ("taps", "on"):
        diff = [x - y for x, y in zip(ms[m], ms["off"])]  # paired: the same moment of the machine
        se = statistics.stdev(diff) / len(diff) ** 0.5 / off
        print(f"{m:<5} mean {statistics.mean(ms[m]) / off:.3f}x +- {se:.3f} (standard error); median "
              f"{statistics.median(ms[m]) / statistics.median(ms['off']):.3f}x; off {1e3 * off:.2f} ms/round")
    print(f"SUMMARY overhead-alternation: {fmt_ctx(n)} on {statistics.mean(ms['on']) / off:.3f}x (mean of "
          f"{samples} paired blocks), taps alone {statistics.mean(ms['taps']) / off:.3f}x")


def against(a, contexts: list[int], rev: str) -> dict:
    """Before / after in one run: two worker processes (bench/_overhead_worker.py), one importing the package as
    it was at `rev` (exported with `git archive`), one this checkout's; every block times off, taps only and the
    full capture in both, in an order flipped each block, so both versions see the same moments of the machine.
    Each version's ratios are against its own capture-off rounds (mean of the paired blocks, standard error)."""
    import io
    import json
    import os
    import statistics
    import subprocess
    import sys
    import tarfile
    import tempfile
    from pathlib import Path

    bench = Path(__file__).resolve().parent
    repo = bench.parent
    sha = subprocess.run(["git", "rev-parse", rev], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    subject = subprocess.run(["git", "log", "-1", "--format=%s", sha], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "drifttool"], cwd=repo, capture_output=True,
                                text=True).stdout.strip())
    opts = ["--shape", a.shape, "--dtype", a.dtype, "--hidden", str(a.hidden), "--heads", str(a.heads),
            "--kv-heads", str(a.kv_heads), "--vocab", str(a.vocab), "--depth", str(a.depth),
            "--full-every", str(a.full_every)]
    out = {"before": {"rev": sha, "subject": subject}, "after": {"rev": head, "uncommitted": dirty},
           "blocks": a.reps, "rounds_per_block": 2, "shape": a.shape, "dtype": a.dtype, "full_every": a.full_every,
           "torch": torch.__version__, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "contexts": {}}
    with tempfile.TemporaryDirectory() as tmp:
        arch = subprocess.run(["git", "archive", sha, "drifttool"], cwd=repo, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(arch)) as tf:
            tf.extractall(tmp, filter="data")
        roots = {"before": tmp, "after": str(repo)}
        for n in contexts:
            procs = {v: subprocess.Popen([sys.executable, str(bench / "_overhead_worker.py"), root, str(n), *opts],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=bench)
                     for v, root in roots.items()}
            try:
                for v, p in procs.items():
                    ready = p.stdout.readline().split()
                    if not ready or ready[0] != "READY" or not ready[1].startswith(roots[v]):
                        raise SystemExit(f"--against: the {v} worker did not start on {roots[v]} ({ready})")
                ms = {(v, m): [] for v in procs for m in ("off", "taps", "on")}
                order = list(ms)
                for i in range(a.reps):
                    for v, m in order if i % 2 == 0 else order[::-1]:
                        procs[v].stdin.write(f"{m} {2 * i}\n")
                        procs[v].stdin.flush()
                        ms[(v, m)].append(float(procs[v].stdout.readline()))
            finally:
                for p in procs.values():
                    p.stdin.close()
                    p.wait(timeout=60)
            res = {}
            for v in procs:
                off = statistics.mean(ms[(v, "off")])
                res[v] = {"off_ms": 1e3 * off}
                for m in ("taps", "on"):
                    diff = [x - y for x, y in zip(ms[(v, m)], ms[(v, "off")])]
                    res[v][m] = {"mean": statistics.mean(ms[(v, m)]) / off,
                                 "se": statistics.stdev(diff) / len(diff) ** 0.5 / off}
            out["contexts"][fmt_ctx(n)] = res
    print(f"# before / after, paired alternation: {a.reps} blocks x 2 rounds per mode and version, {a.shape} shape, "
          f"{a.dtype}, full rows every {a.full_every}; before = {sha[:8]} ({subject[:60]}), after = "
          f"{head[:8]}{' + uncommitted changes' if dirty else ''}")
    rows, parts = [], []
    for ctx, res in out["contexts"].items():
        bar = bar_for(a.shape, parse_contexts(ctx)[0])
        for v in ("before", "after"):
            r = res[v]
            rows.append([ctx, v, f"{r['off_ms']:.2f}", f"{r['taps']['mean']:.3f}x +- {r['taps']['se']:.3f}",
                         f"{r['on']['mean']:.3f}x +- {r['on']['se']:.3f}",
                         "" if bar is None else ("met" if r["on"]["mean"] <= bar else "MISSED") + f" <= {bar:.2f}"])
        parts.append(f"{ctx} {res['before']['on']['mean']:.3f}x -> {res['after']['on']['mean']:.3f}x (taps "
                     f"{res['before']['taps']['mean']:.3f}x -> {res['after']['taps']['mean']:.3f}x)")
    print_table(["context", "version", "off ms", "taps alone / off", "capture / off", "bar"], rows)
    print("SUMMARY overhead-before-after: " + ", ".join(parts))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"written: {a.json}")
    return out


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("bench", "real"), default="bench")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--contexts", default="2k,16k,64k", help="comma list, e.g. 2k,16k,64k")
    ap.add_argument("--paths", default="new,ref", help="capture paths timed against off: new, ref")
    ap.add_argument("--full-every", type=int, default=FULL_EVERY, help="the new path's full-row interval")
    ap.add_argument("--reps", type=int, default=9, help="interleaved off/new/ref repetitions per context")
    ap.add_argument("--rounds", type=int, default=16, help="rounds timed back to back per repetition")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--depth", type=int, default=8, help="K draft tokens per round")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="tiny settings, seconds")
    ap.add_argument("--label", default="overhead", help="name on the SUMMARY line")
    ap.add_argument("--profile", metavar="CTX", help="cProfile capture-on rounds at one context and exit")
    ap.add_argument("--alternate", metavar="CTX", help="paired per-block alternation off / taps / on at one "
                    "context (mean cost with its standard error; --reps blocks) and exit")
    ap.add_argument("--against", metavar="REV", help="with --alternate (a comma list of contexts): time the package "
                    "as it was at git revision REV beside this checkout's, block by block, in one run")
    ap.add_argument("--json", metavar="PATH", help="with --against: write the results here (docs_gen reads "
                    "bench/results/capture_overhead.json into docs/benchmarks.md)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    paths = tuple(p for p in a.paths.split(",") if p)
    if set(paths) - set(PATHS):
        ap.error(f"--paths: expected a comma list of {', '.join(PATHS)}")
    if a.smoke:
        a.contexts, a.reps, a.rounds, a.warmup = "256,1k", 3, 3, 1
    if a.against:
        if not a.alternate:
            ap.error("--against needs --alternate CTX[,CTX...]")
        against(a, parse_contexts(a.alternate), a.against)
        return []
    if a.alternate:
        alternate(a, parse_contexts(a.alternate)[0], a.reps)
        return []
    if a.profile:
        a.paths = paths
        profile(a, parse_contexts(a.profile)[0])
        return []
    try:
        res = [measure(a, n, paths) for n in parse_contexts(a.contexts)]
    finally:
        _REAL.clear()  # run_all runs fp32 then bf16 in one process: one real-scale drafter at a time
    shape = res[0]["shape"]
    print(
        f"# capture overhead: {shape.describe().replace('fp32', a.dtype)}; {a.shape} shape; {a.reps} "
        f"interleaved reps x {a.rounds} rounds; new path: full rows every {a.full_every} rounds; "
        f"{a.threads} torch thread(s)"
    )
    rows = []
    for r in res:
        for p in paths:
            x = r[p]
            bar = bar_for(a.shape, r["n"])
            verdict = (
                "" if bar is None else (f"<= {bar:.2f} ok" if x["ratio"] <= bar else f"> {bar:.2f} MISSED")
            )
            lo, md, hi = x["spread"]
            rows.append(
                [
                    fmt_ctx(r["n"]),
                    p,
                    f"{r['off_ms']:.2f}",
                    f"{x['on_ms']:.2f}",
                    f"{x['ratio']:.3f}x",
                    f"{lo:.3f} / {md:.3f} / {hi:.3f}",
                    f"{x['end_ms']:.2f}",
                    f"{100 * x['end_ms'] / r['off_ms']:.1f}%",
                    f"{100 * x['end_mean_ms'] / r['off_ms']:.2f}%",
                    f"{r['floor_ms']:.2f}",
                    f"{x['wall_ratio']:.3f}x",
                    verdict,
                ]
            )
    print_table(
        [
            "context",
            "path",
            "off ms",
            "on ms",
            "on/off",
            "per-rep min / med / max",
            "end_round ms",
            "end/off",
            "mean end/off",
            "floor ms",
            "on/off wall",
            "bar",
        ],
        rows,
    )
    print(
        "(ms = median CPU ms per drafting round; per-rep = on/off of each repetition; end_round = the per-round "
        "capture computation alone (median over rounds); mean end/off = its mean over all timed rounds, full ones "
        "included, per capture-off round: the capture's own CPU share, far less noisy than on/off on a shared "
        "machine (the per-step taps are not in it); floor = one matmul + exp over K x heads x L, the least "
        "a capture that recomputes rows costs)"
    )
    parts = []
    for r in res:
        for p in paths:
            bar = bar_for(a.shape, r["n"])
            lo, _, hi = r[p]["spread"]
            parts.append(
                f"{fmt_ctx(r['n'])} {p} {r[p]['ratio']:.3f}x [{lo:.3f}-{hi:.3f}]"
                + ("" if bar is None else f" ({'met' if r[p]['ratio'] <= bar else 'MISSED'} <= {bar:.2f})")
            )
    print(
        f"SUMMARY {a.label}: "
        + ", ".join(parts)
        + f" (capture on/off, median CPU time per drafting round, {a.shape} shape hidden {shape.hidden}, {a.dtype})"
    )
    return res


if __name__ == "__main__":
    main()
