"""Throughput of `capture --engine vllm` against plain vLLM speculative decoding, same prompts, one run.

Both ways start vLLM on the same target and EAGLE-3 drafter with the same engine arguments (eager, as the
capture defaults to; `--vllm-arg` adds to both) and generate the same prompts greedily with the same number of
speculative tokens. Plain: one `llm.generate` over all prompts (vLLM batches them). Capture: `run_capture_vllm`
(vLLM under the recorder, batched the same way, then each prompt replayed through drifttool's drafter and written
as a trace shard). Both are timed from engine start to shutdown, so the model loads count on both sides; plain's
generate time alone is printed too. Checks that both emitted the same tokens and that vLLM's acceptance counts
agree. Prints prompts/hour each way and the ratio (goal: capture >= 0.9x plain, start to stop), and writes them to
bench/results/vllm_throughput.json (`--out`), from which scripts/docs_gen.py generates docs/vllm.md's table.

Needs vLLM (scripts/test_vllm.sh builds .vllm-env) and the real target (`drifttool zoo fetch smollm2`):

    .vllm-env/bin/python bench/bench_vllm_throughput.py --prompts 32 --new 48 --depth 4
    # on a GPU machine: --dtype bfloat16 --vllm-arg tensor_parallel_size=$(nvidia-smi -L | wc -l)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRAFTER = REPO / "drifttool" / "zoo" / "models" / "smollm2" / "eagle3"
GOAL = 0.9  # capture / plain throughput, start to stop


def prompts(target: Path, n: int, lo: int, hi: int) -> list[list[int]]:
    """n windows of lo..hi tokens from the standard library's source (different files and offsets)."""
    import sysconfig

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py") if p.stat().st_size > 20_000)
    out: list[list[int]] = []
    for i in range(n):
        ids = tok.encode(files[i % len(files)].read_text(errors="replace")).ids
        length = lo + (hi - lo) * i // max(1, n - 1)
        start = (i // len(files)) * hi
        out.append(ids[start : start + length])
    return out


def plain(vllm, target: Path, ids: list[list[int]], args) -> dict:
    from drifttool.run.engines.vllm.launch import parse_vllm_args

    t0 = time.perf_counter()
    kw = {"model": str(target), "dtype": args.dtype, "seed": 0, "enforce_eager": True, "skip_tokenizer_init": True,
          "enable_prefix_caching": False, "disable_log_stats": False,
          "speculative_config": {"method": "eagle3", "model": str(args.drafter),
                                 "num_speculative_tokens": args.depth}}
    kw.update(parse_vllm_args(args.vllm_arg))
    llm = vllm.LLM(**kw)
    t1 = time.perf_counter()
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=args.new, ignore_eos=True, detokenize=False)
    res = llm.generate([{"prompt_token_ids": p} for p in ids], sp, use_tqdm=False)
    t2 = time.perf_counter()
    from drifttool.run.engines.vllm.crosscheck import spec_metrics

    m = spec_metrics(llm)
    llm.llm_engine.engine_core.shutdown()
    return {"total": time.perf_counter() - t0, "generate": t2 - t1, "tokens": [list(r.outputs[0].token_ids) for r in res],
            "accepted": m["num_accepted_tokens"], "drafts": m["num_drafts"]}


def capture(target: Path, ids: list[list[int]], args, work: Path) -> dict:
    import drifttool
    from drifttool.run.drafters import DrafterSpec
    from drifttool.run.engines.vllm import engine, parse_vllm_args, run_capture_vllm

    # the engine's own vLLM start and stop, timed here, so that "after start" excludes them as plain's generate does
    spent = {"start": 0.0, "stop": 0.0}
    start_llm, shutdown = engine.start_llm, engine.shutdown

    def timed(key, fn):
        def call(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[key] += time.perf_counter() - t
        return call

    engine.start_llm, engine.shutdown = timed("start", start_llm), timed("stop", shutdown)
    probes = work / "probes.jsonl"
    probes.write_text("".join(json.dumps({"id": f"p{i:03d}", "token_ids": p}) + "\n" for i, p in enumerate(ids)))
    t0 = time.perf_counter()
    out = run_capture_vllm(str(target), [DrafterSpec.parse(f"eagle3={args.drafter}")], str(probes),
                           str(work / "cap.drift"), depth=args.depth, max_new_tokens=args.new, dtype=args.dtype,
                           progress=False, vllm_kwargs=parse_vllm_args(args.vllm_arg))
    total = time.perf_counter() - t0
    engine.start_llm, engine.shutdown = start_llm, shutdown
    tr = drifttool.load(out)
    p = tr.prompts.sort_values("prompt_id")
    return {"total": total, "after_start": total - spent["start"] - spent["stop"], "tokens": [list(x) for x in p.output_ids], "accepted": int(p.vllm_num_accepted_tokens.sum()),
            "drafts": int(p.vllm_num_drafts.sum()), "max_batch": int(p.vllm_max_batch.max()),
            "agreement": float(p.replay_draft_agreement.min())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--min-len", type=int, default=320)
    ap.add_argument("--max-len", type=int, default=576)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--drafter", type=Path, default=DRAFTER)
    ap.add_argument("--vllm-arg", action="append", default=[], help="KEY=VALUE for vllm.LLM, both runs")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "vllm_throughput.json",
                    help="where the result goes (docs/vllm.md's table is generated from it)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available() and not any(a.startswith("kv_cache_memory_bytes=") for a in args.vllm_arg):
        # vLLM's CPU backend otherwise reserves 92% of host memory for its KV cache and refuses to start when other
        # processes hold part of it; 1 GiB holds these prompts' caches (both runs get the same)
        args.vllm_arg.append("kv_cache_memory_bytes=1073741824")

    from drifttool.run.engines.vllm import import_vllm
    from drifttool.zoo import smollm2

    vllm = import_vllm()
    target = Path(smollm2.fetch())
    ids = prompts(target, args.prompts, args.min_len, args.max_len)
    with tempfile.TemporaryDirectory() as tmp:
        p = plain(vllm, target, ids, args)
        c = capture(target, ids, args, Path(tmp))
    same = p["tokens"] == c["tokens"]
    print(f"vLLM {vllm.__version__}, {args.prompts} prompts of {args.min_len}-{args.max_len} tokens, {args.new} new, "
          f"K={args.depth}, {args.dtype}, extra args {args.vllm_arg or 'none'}; cores {os.cpu_count()}")
    print(f"same output tokens: {same}; accepted drafts plain {p['accepted']} / capture {c['accepted']} "
          f"(rounds {p['drafts']} / {c['drafts']}); capture's vLLM batch up to {c['max_batch']} requests; "
          f"replay agreement >= {c['agreement']:.3f}")
    rate = {k: 3600 * args.prompts / v for k, v in (("plain", p["total"]), ("capture", c["total"]))}
    print("| run | seconds | prompts/hour |\n|---|---|---|")
    print(f"| plain vLLM (start + generate + stop) | {p['total']:.1f} | {rate['plain']:.0f} |")
    print(f"| plain vLLM, generate only | {p['generate']:.1f} | {3600 * args.prompts / p['generate']:.0f} |")
    print(f"| capture --engine vllm (start + record + replay + write + stop) | {c['total']:.1f} | {rate['capture']:.0f} |")
    print(f"| capture --engine vllm, after vLLM's start and before its stop | {c['after_start']:.1f} | "
          f"{3600 * args.prompts / c['after_start']:.0f} |")
    print(f"capture / plain throughput: {rate['capture'] / rate['plain']:.2f}x start to stop (goal >= {GOAL}x); "
          f"{p['generate'] / c['after_start']:.2f}x without vLLM's start and stop")
    if not same or p["accepted"] != c["accepted"]:
        sys.exit("capture and plain vLLM disagree on output tokens or acceptance")
    from datetime import datetime, timezone

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": f"{datetime.now(timezone.utc):%Y-%m-%d}", "vllm": vllm.__version__, "cores": os.cpu_count(),
        "prompts": args.prompts, "min_len": args.min_len, "max_len": args.max_len, "new": args.new,
        "depth": args.depth, "dtype": args.dtype, "vllm_args": args.vllm_arg, "device": "cuda" if
        torch.cuda.is_available() else "cpu", "rounds": p["drafts"], "accepted": p["accepted"],
        "plain_total_s": round(p["total"], 2), "plain_generate_s": round(p["generate"], 2),
        "capture_total_s": round(c["total"], 2), "capture_after_start_s": round(c["after_start"], 2),
        "ratio_start_to_stop": round(rate["capture"] / rate["plain"], 3),
        "ratio_without_start_stop": round(p["generate"] / c["after_start"], 3), "goal": GOAL}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
