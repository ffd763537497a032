"""Training windows shared by the zoo's target and drafter trainers: BOS + consecutive stream tokens at
offsets drawn from a generator keyed by (seed, ..., step), so a resumed run replays the same batches, and
the held-out windows they are evaluated on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


def batch_shape(args: Any, step: int) -> tuple[int, int]:
    """(batch, window) for a step from args.batch_tokens / window / long_window / long_every; the same every
    run so resumption replays the same schedule."""
    if args.long_every and step % args.long_every == args.long_every - 1:
        return max(1, args.batch_tokens // args.long_window), args.long_window
    return max(1, args.batch_tokens // args.window), args.window


def sample_windows(stream: np.ndarray, batch: int, window: int, key: list[int]) -> torch.Tensor:
    """`batch` rows of BOS + window-1 consecutive stream tokens at offsets drawn from a generator seeded by
    `key` (shared by target and drafter training)."""
    rng = np.random.default_rng(key)
    starts = rng.integers(0, stream.size - window, size=batch)
    rows = np.stack([stream[s : s + window - 1] for s in starts]).astype(np.int64)
    return F.pad(torch.from_numpy(rows), (1, 0), value=0)  # BOS = 0


def heldout_windows(data_dir: Path, window: int, limit: int) -> torch.Tensor:
    """Non-overlapping BOS + (window-1) chunks of the held-out modules, taken round-robin, at most `limit`."""
    held = np.load(data_dir / "heldout.npz")
    per = []
    for name in sorted(held.files):
        arr = held[name].astype(np.int64)
        n = arr.size // (window - 1)
        per.append([arr[i * (window - 1) : (i + 1) * (window - 1)] for i in range(n)])
    rows: list[np.ndarray] = []
    i = 0
    while len(rows) < limit and any(i < len(p) for p in per):
        rows.extend(p[i] for p in per if i < len(p))
        i += 1
    ids = torch.from_numpy(np.stack(rows[:limit]))
    return F.pad(ids, (1, 0), value=0)
