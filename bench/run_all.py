"""Run every benchmark once and print their tables and summary lines.

    .venv/bin/python bench/run_all.py            # full settings (minutes on 2 CPU cores)
    .venv/bin/python bench/run_all.py --smoke    # everything at toy sizes (seconds): checks that it runs

Order: the timing-sensitive overhead benchmarks first (the small bench drafter at 2k/16k/64k, a hidden-1024
drafter at 2k/16k, then the real-scale Llama-3.1-8B EAGLE-3 head shape at 2k/16k/64k in fp32 and bf16, each
capture path against capture off; the smoke run does the small drafter only), then end-to-end capture (with the
trace's bytes per round), trace I/O, the memory benchmark (it starts one process per point), and the
study-scale trace (the full run writes and merges a 1,000-prompt trace: about half an hour on 2 cores), and the
dashboard's cold start in Chromium last (full run only; needs playwright and Chromium).
Each script also runs on its own; see --help.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_browser  # noqa: E402
import bench_e2e  # noqa: E402
import bench_memory  # noqa: E402
import bench_overhead  # noqa: E402
import bench_study  # noqa: E402
import bench_trace_io  # noqa: E402

# (name, module, full-run arguments); --smoke runs only the entries without arguments, with --smoke
LARGE = ["--label", "overhead-large", "--hidden", "1024", "--heads", "16", "--kv-heads", "4", "--vocab", "32000",
         "--contexts", "2k,16k", "--reps", "7", "--rounds", "6"]
REAL = ["--shape", "real", "--contexts", "2k,16k,64k", "--reps", "5", "--rounds", "4", "--warmup", "2"]
SCRIPTS = (("overhead", bench_overhead, []), ("overhead-large", bench_overhead, LARGE),
           ("overhead-real-fp32", bench_overhead, [*REAL, "--label", "overhead-real-fp32"]),
           ("overhead-real-bf16", bench_overhead, [*REAL, "--dtype", "bfloat16", "--label", "overhead-real-bf16"]),
           ("e2e", bench_e2e, []), ("trace_io", bench_trace_io, []), ("memory", bench_memory, []),
           ("study", bench_study, []), ("browser", bench_browser, ["--reps", "3"]))


class Tee(io.TextIOBase):
    """Print through, keeping a copy (to repeat the summary lines at the end)."""

    def __init__(self, out):
        self.out, self.buf = out, io.StringIO()

    def write(self, s):
        self.buf.write(s)
        return self.out.write(s)

    def flush(self):
        self.out.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="toy sizes, seconds")
    ap.add_argument("--only", help="comma list of: " + ", ".join(n for n, _, _ in SCRIPTS))
    a = ap.parse_args(argv)
    chosen = [(n, m, args) for n, m, args in SCRIPTS
              if (not a.only or n in a.only.split(",")) and not (a.smoke and args)]
    import torch

    tee = Tee(sys.stdout)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(tee):
        print(f"# drifttool benchmarks{' (smoke)' if a.smoke else ''}: torch {torch.__version__}, "
              f"Python {platform.python_version()}, {platform.machine()}, {__import__('os').cpu_count()} CPUs")
        for name, mod, args in chosen:
            print(f"\n## {name}", flush=True)
            s = time.perf_counter()
            mod.main(["--smoke"] if a.smoke else args)
            print(f"({name}: {time.perf_counter() - s:.0f} s)", flush=True)
    summaries = [line for line in tee.buf.getvalue().splitlines() if line.startswith("SUMMARY ")]
    print("\n## summary")
    for line in summaries:
        print(line)
    print(f"SUMMARY all: {len(summaries)} benchmarks in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
