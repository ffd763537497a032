"""A constructed positive control on the real target: what a detection looks like, built, not trained.

The base is an EAGLE-3 drafter whose decoder layer is SmolLM2's layer 15 (training/sink_init.py, untrained: at
depth 1 its attention is exactly that layer's, sink included) on the shipped EAGLE-3's draft vocabulary. The
control is the same drafter with drift planted on top (drifttool/model/controls.py, `plant(drift=..,
keep_attention=True)`: a marker that is 0 on prompt slots and positive on fed-back slots, read by q and k on every
head's lowest-frequency rotary pair), so its queries at depth >= 2 score its own drafted slots higher and attention
moves from the target's sink onto its own drafts with depth. Both are saved (speculators layout, bf16) under OUT and
captured side by side on the long-code first cuts into sample_traces/controls/.

    python scripts/make_positive_control.py [--drift 256] [--out runs/control] [--limit N]

Labelled as constructed everywhere it appears (drafter names `control-base` / `control-planted-drift`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch
from safetensors import safe_open

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from drifttool.model.checkpoint import save_drafter  # noqa: E402
from drifttool.model.controls import plant  # noqa: E402
from drifttool.zoo import smollm2  # noqa: E402
from training.sink_init import init_from_sink_layer  # noqa: E402
from training.train_real import RealArgs, _target_bits, build_pair  # noqa: E402


def build(target: Path, drift: float) -> dict:
    a = RealArgs(target_dir=str(target), variants=("eagle3",), trained_window=4096)
    tcfg, embed = _target_bits(target)
    with safe_open(str(REPO / "drifttool/zoo/models/smollm2/eagle3/model.safetensors"), framework="pt") as h:
        d2t = h.get_tensor("d2t").long()
    out = {}
    for name, strength in (("control-base", 0.0), ("control-planted-drift", drift)):
        m = build_pair(a, tcfg, embed, d2t)
        init_from_sink_layer(m, target, 15)
        d = m["eagle3"]
        if strength:
            plant(d, drift=strength, keep_attention=True)
        out[name] = d.to(torch.bfloat16)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drift", type=float, default=256.0, help="the planted term's logit scale")
    p.add_argument("--out", default="runs/control")
    p.add_argument("--trace", default="sample_traces/controls/smollm2-long_code-control.drift")
    p.add_argument("--limit", type=int, default=0, help="capture only the first N prompts (a quick look)")
    x = p.parse_args()
    target = smollm2.fetch()
    out = Path(x.out)
    args = []
    for name, d in build(target, x.drift).items():
        save_drafter(d, out / name, layout="speculators")
        args += ["--drafter", f"{name}={out / name}"]
    cmd = [sys.executable, "-m", "drifttool.cli", "capture", "--target", str(target), *args, "--probes",
           "probes/real/powered/long_code_inside.jsonl", "--depth", "8", "--max-new-tokens", "32", "--keep-rows", "1",
           "--seed", "0", "--sink", "target", "--quiet", "--out", x.trace, "--overwrite"]
    if x.limit:
        cmd += ["--limit", str(x.limit)]
    return subprocess.call(cmd, cwd=REPO)


if __name__ == "__main__":
    raise SystemExit(main())
