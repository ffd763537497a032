"""Build the demo zoo: data -> tokenizer -> targets (plain, sink) -> EAGLE-3 / EAGLE-3.1 drafters.

Every stage is skipped when its output exists and the training stages resume from checkpoints, so an
interrupted build is simply re-run. Intermediates live in `build_dir`; the packaged result is
  out_dir/{plain,sink}/target/        HF LlamaForCausalLM folders (+ tokenizer, report.json)
  out_dir/{plain,sink}/{eagle3,eagle3.1}/   speculators-layout drafters (+ report.json)
  out_dir/zoo.json                    headline numbers of every report
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from drifttool.zoo import MODELS_DIR

from . import DEFAULT_BUILD_DIR
from . import data as zdata
from . import train_drafter as td
from . import train_target as tt

TARGETS = ("plain", "sink")
SIZE_LIMIT_BYTES = 25 * 1024 * 1024


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() and (
        folder / "report.json"
    ).is_file()


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def build(
    out_dir: str | Path = MODELS_DIR,
    build_dir: str | Path = DEFAULT_BUILD_DIR,
    *,
    target_minutes: tuple[float, float] = (25.0, 15.0),
    drafter_minutes: float = 9.0,
    max_bytes: int = 32_000_000,
    seed: int = 0,
    target_steps: tuple[int, int] | None = None,
    drafter_steps: int | None = None,
    target_args: dict[str, Any] | None = None,
    drafter_args: dict[str, Any] | None = None,
    threads: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every missing stage; returns the zoo index written to out_dir/zoo.json.
    `target_args` / `drafter_args` override TrainArgs / DrafterTrainArgs fields (tests shrink the models)."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    out, work = Path(out_dir), Path(build_dir)
    targs = tt.TrainArgs(
        build_dir=str(work), minutes_a=target_minutes[0], minutes_b=target_minutes[1],
        steps_a=target_steps[0] if target_steps else None, steps_b=target_steps[1] if target_steps else None,
        max_bytes=max_bytes, seed=seed, threads=threads,
    )
    targs = replace(targs, **(target_args or {}))

    # 1-2. data + tokenizer
    data_dir = zdata.prepare(work, max_bytes, targs.spec.vocab_size)
    log(f"data: {data_dir}")

    # 3. targets (one run, two phases: plain snapshot at the fork, then sink)
    if not all(_complete(out / name / "target") for name in TARGETS):
        made = tt.train(targs, resume=True, log=log)
        for name in TARGETS:
            dst = out / name / "target"
            shutil.rmtree(dst, ignore_errors=True)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(made[name], dst)
    log("targets: done")

    # 4. drafters, per target
    for name in TARGETS:
        dargs = td.DrafterTrainArgs(
            target_dir=str(out / name / "target"), data_dir=str(data_dir), work_dir=str(work / "drafters" / name),
            out_dir=str(out / name), minutes=drafter_minutes, steps=drafter_steps, seed=seed, threads=threads,
        )
        dargs = replace(dargs, **(drafter_args or {}))
        if all((out / name / v / "report.json").is_file() for v in dargs.variants):
            continue
        td.train(dargs, log=log)
    log("drafters: done")

    index = write_index(out)
    if index["bytes"] > SIZE_LIMIT_BYTES:
        log(f"WARNING: zoo is {index['bytes'] / 2**20:.1f} MiB, over the {SIZE_LIMIT_BYTES / 2**20:.0f} MiB limit")
    return index


def write_index(out: Path) -> dict[str, Any]:
    """zoo.json: per target, its held-out loss / sink strength and each drafter's acceptance proxy."""
    index: dict[str, Any] = {"targets": {}, "bytes": 0}
    for name in TARGETS:
        folder = out / name
        if not folder.is_dir():
            continue
        entry: dict[str, Any] = {}
        rep = folder / "target" / "report.json"
        if rep.is_file():
            r = json.loads(rep.read_text())
            entry["target"] = {k: r.get(k) for k in ("heldout_loss", "attn_pos0_per_layer", "tokens", "steps")}
        for v in td.VARIANTS:
            rep = folder / v / "report.json"
            if rep.is_file():
                r = json.loads(rep.read_text())
                entry[v] = {k: r.get(k) for k in (
                    "heldout_top1_agreement_per_step", "mean_leading_agreements", "heldout_feedback_rms_per_step",
                    "steps")}
        index["targets"][name] = entry
    index["bytes"] = _size(out) if out.is_dir() else 0
    (out / "zoo.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="training.build", description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=str(MODELS_DIR))
    p.add_argument("--build-dir", default=str(DEFAULT_BUILD_DIR))
    # Defaults = what the shipped zoo was built with (target phases are wall-clock budgets; drafters a fixed
    # step count, because a wall-clock plan on a shared CPU gave them too few steps).
    p.add_argument("--target-minutes-a", type=float, default=40.0)
    p.add_argument("--target-minutes-b", type=float, default=18.0)
    p.add_argument("--drafter-steps", type=int, default=420, help="TTT steps per drafter (4 drafters)")
    p.add_argument("--drafter-minutes", type=float, default=60.0, help="hard stop per drafter")
    p.add_argument("--max-bytes", type=int, default=32_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    index = build(
        a.out_dir, a.build_dir, target_minutes=(a.target_minutes_a, a.target_minutes_b),
        drafter_minutes=a.drafter_minutes, drafter_steps=a.drafter_steps, max_bytes=a.max_bytes, seed=a.seed,
        threads=a.threads,
        log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True),
    )
    print(json.dumps(index, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
