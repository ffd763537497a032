"""Capture on Ray: 1 vs 2 local workers on the same prompts, in one run (issue #65; goal on a 2-core machine:
>= 1.7x). The bundled SmolLM2 target and EAGLE-3 drafter, mt_chat prompts; one local Ray cluster of 2 CPUs
started once and shared by both runs (each run's workers load the models once, which the wall time includes).
Prints the wall times, their ratio and the per-prompt cost, and writes bench/results/ray_scaling.json.

    .venv/bin/python bench/bench_ray.py [--limit 8] [--new 32]"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    a = ap.parse_args()
    import ray

    from drifttool.run.drafters import DrafterSpec
    from drifttool.run.engines.hf import run_capture
    from drifttool.trace.sinks import SinkSpec
    from drifttool.zoo import smollm2

    target = str(smollm2.fetch())
    spec = [DrafterSpec("eagle3", str(ROOT / "drifttool/zoo/models/smollm2/eagle3"))]
    probes = str(ROOT / "probes/real/mt_chat.jsonl")
    common = dict(depth=8, max_new_tokens=a.new, limit=a.limit, keep_rows=0, sink=SinkSpec.parse("first:4"),
                  progress=False, overwrite=True, ray="local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    walls = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in (1, 2):
                t0 = time.perf_counter()
                run_capture(target, spec, probes, f"{tmp}/w{n}.drift", ray_workers=n, **common)
                walls[n] = time.perf_counter() - t0
                print(f"{n} worker(s): {walls[n]:.1f} s ({walls[n] / a.limit:.1f} s per prompt)")
    finally:
        ray.shutdown()
    ratio = walls[1] / walls[2]
    print(f"2 workers / 1 worker speed-up: {ratio:.2f}x (goal >= 1.7x on 2 cores: {'met' if ratio >= 1.7 else 'missed'}"
          f"; {a.limit} mt_chat prompts, {a.new} new tokens, depth 8, SmolLM2 + the bundled EAGLE-3, CPU, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    out = ROOT / "bench" / "results" / "ray_scaling.json"
    out.write_text(json.dumps({"wall_s": walls, "speedup": ratio, "limit": a.limit, "new_tokens": a.new,
                               "cpus": os.cpu_count(), "load": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d")},
                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
