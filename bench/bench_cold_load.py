"""Cold read of a sample trace's depth table: a fresh interpreter runs `import drifttool as dt;
dt.load(TRACE).depths` (goal < 1 s; torch is never imported on this path). Prints the median of REPS runs and,
for contrast, the same with torch imported first (what reading cost when the trace stage imported it).

    .venv/bin/python bench/bench_cold_load.py [TRACE] [--reps 5]"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = """
import sys, time
t0 = time.perf_counter()
{pre}
import drifttool as dt
n = len(dt.load(sys.argv[1]).depths)
print(time.perf_counter() - t0, n, 'torch' in sys.modules)
"""


def cold(trace: Path, pre: str = "") -> tuple[float, int, bool]:
    out = subprocess.run([sys.executable, "-c", CODE.format(pre=pre), str(trace)], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    return float(out[0]), int(out[1]), out[2] == "True"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(ROOT / "sample_traces" / "smollm2-long_code.drift"))
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    runs = [cold(Path(a.trace)) for _ in range(a.reps)]
    with_torch = [cold(Path(a.trace), "import torch") for _ in range(a.reps)]
    med, med_t = statistics.median(r[0] for r in runs), statistics.median(r[0] for r in with_torch)
    print(f"cold load + depth table ({runs[0][1]} rows, {Path(a.trace).name}): median {med:.2f} s over {a.reps} "
          f"fresh interpreters (goal < 1 s: {'met' if med < 1 else 'missed'}); torch imported: {runs[0][2]}; "
          f"with torch imported first: {med_t:.2f} s ({med_t / med:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
