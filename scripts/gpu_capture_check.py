"""Capture on CUDA against capture on the CPU, end to end (project tooling; run on a GPU machine).

The bundled tiny sink target and its EAGLE-3 / EAGLE-3.1 drafters over probes/quick.jsonl, captured three ways:
cpu float32 (the reference), cuda float32 and cuda bfloat16 (fused attention with the kernel's log-sum-exp). Prints,
per run: the drafted tokens' agreement with the reference, the largest |difference| of every per-depth mass on the
rounds whose drafts agree, and whether every lift recomputes from the stored key counts (<= 1e-9). Exit 1 when the
cuda float32 run differs from the reference beyond 1e-4 or a lift does not recompute."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import drifttool as dt  # noqa: E402
from drifttool.trace.schema import LIFTS, MEASURED_MASSES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
Z = ROOT / "drifttool" / "zoo" / "models" / "sink"


def run(device: str, dtype: str, out: Path) -> pd.DataFrame:
    tr = dt.capture_run(str(Z / "target"), [f"eagle3={Z / 'eagle3'}", f"eagle3.1={Z / 'eagle3.1'}"],
                        ROOT / "probes" / "quick.jsonl", out / f"{device}-{dtype}.drift", depth=6, device=device,
                        dtype=dtype, max_new_tokens=48, progress=False)
    return tr.depths


def lift_error(d: pd.DataFrame) -> float:
    """Largest |stored-path lift - recomputed from the counts| over every lift and row (NaN where undefined)."""
    worst = 0.0
    for lift, (mass, count) in LIFTS.items():
        want = np.where(d[count] > 0, d[mass].astype(np.float64) * d["n_keys"] / d[count].where(d[count] > 0), np.nan)
        got = d[lift].to_numpy(np.float64)
        both = np.isfinite(want) & np.isfinite(got)
        if (np.isfinite(want) != np.isfinite(got)).any():
            return float("inf")
        worst = max(worst, float(np.abs(got[both] - want[both]).max(initial=0.0)))
    return worst


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_capture_check: skipped: no CUDA device")
        return 0
    print(f"gpu_capture_check: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ref = run("cpu", "float32", Path(tmp))
        key = ["drafter", "prompt_id", "round", "depth"]
        for device, dtype, tol in (("cuda", "float32", 1e-4), ("cuda", "bfloat16", None)):
            got = run(device, dtype, Path(tmp))
            m = ref.merge(got, on=key, suffixes=("_ref", ""))
            same = m["draft_id_ref"] == m["draft_id"]
            rows = m[same]
            diffs = {c: float((rows[f"{c}_ref"] - rows[c]).abs().max()) for c in (*MEASURED_MASSES, "rms_in")}
            lerr = lift_error(got)
            line_ok = lerr <= 1e-9 and (tol is None or max(v for k, v in diffs.items() if k != "rms_in") <= tol)
            ok &= line_ok
            print(f"{device} {dtype}: rows {len(got)} (reference {len(ref)}), drafts equal {same.mean():.3f}; "
                  + ", ".join(f"{k} max|diff| {v:.2e}" for k, v in diffs.items())
                  + f"; lifts recompute from counts to {lerr:.1e}; "
                  + ("PASS" if line_ok else "FAIL") + (f" (bar {tol:.0e})" if tol else " (bf16: reported, no bar)"))
            by = got.groupby(["drafter", "depth"], observed=True)[["sink_lift", "self_lift", "recent_lift", "rms_in"]]
            print(by.mean().round(3).to_string())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
