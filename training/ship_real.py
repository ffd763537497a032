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


RUN_KEYS = ("steps", "train_tokens_seen", "cache_tokens", "cache_conversations", "train_seconds",
            "draft_vocab_coverage")


def earlier_runs(shipped: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs behind a shipped report, oldest first: its own earlier runs and then itself.

    A run warm-started from the shipped drafters keeps this list, so the lineage's totals (distinct tokens,
    steps, time) stay on record after each new run replaces the weights. Older reports held one earlier run
    under `warm_start`."""
    runs = list(shipped.get("earlier_runs") or ([shipped["warm_start"]] if "warm_start" in shipped else []))
    own = {k: shipped[k] for k in RUN_KEYS}
    own["eval"] = {k: shipped[k] for k in ("heldout_top1_per_step", "heldout_positions")}
    own["note"] = "warm-started from the drafters shipped before it" if runs else "from random weights"
    return [*runs, own]


def lineage(src: Path, dst: Path, variant: str) -> list[dict[str, Any]]:
    """Earlier runs to record for `src`'s run: none if it started from random weights; the shipped drafters'
    lineage if it was warm-started from them (any other --init is refused: its history is not known here)."""
    new = json.loads((src / variant / "report.json").read_text())
    init = new.get("train_args", {}).get("init") or ""
    if not init:
        return []
    if Path(init).resolve() != dst.resolve():
        raise SystemExit(f"{src / variant / 'report.json'}: train_args.init is {init!r}; expected the shipped "
                         f"drafters ({dst}) or none, so that the lineage of earlier runs is known")
    return earlier_runs(json.loads((dst / variant / "report.json").read_text()))


def ship(src: Path, dst: Path = SHIP_DIR) -> dict[str, Any]:
    dst.mkdir(parents=True, exist_ok=True)
    runs = {v: lineage(src, dst, v) for v in VARIANTS}  # read before the shipped reports are replaced
    for v in VARIANTS:
        shutil.rmtree(dst / v, ignore_errors=True)
        shutil.copytree(src / v, dst / v)
    with tempfile.TemporaryDirectory() as tmp:
        ref = reference_metrics(reference_capture(dst, Path(tmp) / "ref.drift"))
    for v in VARIANTS:
        rep = json.loads((dst / v / "report.json").read_text())
        rep.pop("warm_start", None)
        if runs[v]:
            rep["earlier_runs"] = runs[v]
        rep["reference"] = {"probes": "probes/real/ci.jsonl", "depth": DEPTH, "max_new_tokens": 24,
                            "dtype": "float32", "greedy": True, **ref[v]}
        (dst / v / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    return ref


if __name__ == "__main__":
    print(json.dumps(ship(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/real/drafters")), indent=1))
