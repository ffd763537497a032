"""Ship the real-target drafters: copy them into the package and store reference numbers that CI re-checks.

The reference is a drifttool capture of both drafters on `probes/real/ci.jsonl` (greedy, depth 8, fp32,
CPU): mean acceptance length, depth-1 acceptance rate and per-depth sink / self mass and feature RMS. A
test reruns the same capture on a clean machine and compares within stated tolerances, so the shipped
report cannot drift from what the shipped weights do."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from drifttool.zoo import MODELS_DIR

SHIP_DIR = MODELS_DIR / "smollm2"
CI_PROBES = Path(__file__).resolve().parents[1] / "probes" / "real" / "ci.jsonl"
VARIANTS = ("eagle3", "eagle3.1")
DEPTH = 8


def reference_capture(drafters: Path, out: Path, probes: Path = CI_PROBES, progress: bool = False) -> Path:
    from drifttool.run.engines.hf import DrafterSpec, run_capture
    from drifttool.zoo.smollm2 import fetch

    specs = [DrafterSpec(v, str(drafters / v)) for v in VARIANTS]
    return run_capture(str(fetch()), specs, str(probes), str(out), depth=DEPTH, max_new_tokens=24,
                       overwrite=True, progress=progress)


def reference_metrics(trace: Path) -> dict[str, dict[str, Any]]:
    from drifttool.analysis.compare import Comparison
    from drifttool.trace import read_trace

    cmp = Comparison.of([read_trace(trace)])
    summ = cmp.summary().set_index("series")
    pdp = cmp.per_depth().set_index(["series", "depth"])
    out = {}
    for s in summ.index:
        r = summ.loc[s]
        per = lambda m, s=s: [round(float(pdp.loc[(s, d), m]), 5) for d in range(1, DEPTH + 1)]  # noqa: E731
        out[s] = {"mean_acceptance_length": round(float(r.mean_acceptance_length), 4),
                  "acceptance_rate_depth1": round(float(pdp.loc[(s, 1), "acceptance_rate"]), 4),
                  "sink_mass": per("sink_mass"), "self_mass": per("self_mass"), "rms_in": per("rms_in"),
                  "drafts": int(r.drafts)}
    return out


def ship(src: Path, dst: Path = SHIP_DIR) -> dict[str, Any]:
    dst.mkdir(parents=True, exist_ok=True)
    for v in VARIANTS:
        shutil.rmtree(dst / v, ignore_errors=True)
        shutil.copytree(src / v, dst / v)
    with tempfile.TemporaryDirectory() as tmp:
        ref = reference_metrics(reference_capture(dst, Path(tmp) / "ref.drift"))
    for v in VARIANTS:
        rep = json.loads((dst / v / "report.json").read_text())
        rep["reference"] = {"probes": "probes/real/ci.jsonl", "depth": DEPTH, "max_new_tokens": 24,
                            "dtype": "float32", "greedy": True, **ref[v]}
        (dst / v / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    return ref


if __name__ == "__main__":
    print(json.dumps(ship(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/real/drafters")), indent=1))
