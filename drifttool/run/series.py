"""Checkpoint series: drift across training. A folder of step-N checkpoints becomes one drafter per checkpoint in
one capture, each named `VARIANT@STEP`, so every statistic of `compare`, the notebook and the dashboard exists
per checkpoint and `analysis.training` lines them up against the step.

Layouts found: ROOT/<step dir>/config.json (one drafter per step; the variant is ROOT's name) and
ROOT/<step dir>/<variant>/config.json (several per step, as this project's trainer writes them). A step dir is
named by its last integer: `step-000400` (drifttool's trainer), `checkpoint-400` (HF Trainer), `epoch_0_step_400`
(SpecForge), `3` (speculators' per-epoch folders)."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import DriftError
from ..trace.series_names import series_name

_LAST_INT = re.compile(r"(\d+)(?!.*\d)")


def step_of(name: str) -> int | None:
    m = _LAST_INT.search(name)
    return int(m.group(1)) if m else None


def find_checkpoints(root: str | Path) -> list[tuple[str, int, Path]]:
    """(variant, step, drafter folder) for every checkpoint under `root`, sorted by variant then step."""
    root = Path(root)
    if not root.is_dir():
        raise DriftError(f"--drafter-series {root}: not a folder (expected a folder of step-N checkpoints)")
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        step = step_of(d.name)
        if step is None:
            continue
        if (d / "config.json").is_file():
            out.append((root.name, step, d))
        else:
            out += [(v.name, step, v) for v in sorted(d.iterdir()) if v.is_dir() and (v / "config.json").is_file()]
    if not out:
        raise DriftError(f"--drafter-series {root}: no checkpoints (expected sub-folders named by their step, e.g. "
                         "step-000400/, checkpoint-400/ or epoch_0_step_400/, each holding a drafter's config.json "
                         "or one folder per variant)")
    seen = {}
    for v, s, p in out:
        if (v, s) in seen:
            raise DriftError(f"--drafter-series {root}: step {s} of {v!r} twice ({seen[(v, s)]} and {p})")
        seen[(v, s)] = p
    return sorted(out, key=lambda x: (x[0], x[1]))


def series_specs(root: str | Path, keep: int | None = None) -> list[tuple[str, str]]:
    """(name VARIANT@STEP, path) per checkpoint; `keep` thins each variant to that many evenly spaced steps (the
    first and last kept)."""
    found = find_checkpoints(root)
    by: dict[str, list[tuple[int, Path]]] = {}
    for v, s, p in found:
        by.setdefault(v, []).append((s, p))
    out = []
    for v, items in by.items():
        if keep and len(items) > keep:
            idx = sorted({round(i * (len(items) - 1) / (keep - 1)) for i in range(keep)}) if keep > 1 else [-1]
            items = [items[i] for i in idx]
        out += [(series_name(v, s), str(p)) for s, p in items]
    return out
