"""Training scaffolding shared by the zoo trainers (train_target, train_drafter, train_real): learning-rate
schedules (linear warmup then cosine decay), setting a step's learning rate, the AdamW they all use, and the
wall-clock budget of a resumable loop. Each trainer keeps its own notion of progress (planned steps, wall-clock
budget)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class StepArgs:
    """The optimiser, batch and bookkeeping settings the step-planned trainers (train_target, train_drafter)
    share; each overrides the defaults it differs in. Every `long_every`-th step uses `long_window`-token
    windows (half the batch, same tokens per step) so probes up to the target's full context stay in
    distribution, while the other steps use the cheaper `window` (attention cost grows with length; docs/eagle3.md §8
    saw instability when training only at 1024). long_every=0 disables it."""

    lr: float = 1.5e-3
    min_lr_frac: float = 0.1
    warmup_frac: float = 0.03
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    clip: float = 1.0
    batch_tokens: int = 2048
    window: int = 512
    long_window: int = 1024
    long_every: int = 4
    seed: int = 0
    ckpt_minutes: float = 3.0
    threads: int = 1


def cosine(lr: float, min_lr_frac: float, frac: float) -> float:
    """Cosine decay from lr (frac 0) to lr * min_lr_frac (frac 1)."""
    lo = lr * min_lr_frac
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * frac))


def warmup_cosine(lr: float, min_lr_frac: float, step: int, warm_steps: int, frac: float) -> float:
    """Linear warmup over `warm_steps` steps, then cosine decay at progress `frac` (0..1) of the rest."""
    if step < warm_steps:
        return lr * (step + 1) / warm_steps
    return cosine(lr, min_lr_frac, frac)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr


def adamw(
    params: Iterable[Any],
    lr: float,
    betas: tuple[float, float],
    weight_decay: float | None = None,
) -> torch.optim.AdamW:
    """AdamW over parameters or parameter groups (groups carry their own weight decay: pass None)."""
    kw = {} if weight_decay is None else {"weight_decay": weight_decay}
    return torch.optim.AdamW(params, lr=lr, betas=betas, **kw)


class Budget:
    """Wall-clock bookkeeping of a resumable loop: the elapsed seconds live in `clock[key]` (carried across
    resumes by the checkpointed state) and `save` runs every `ckpt_minutes`."""

    def __init__(self, clock: dict, key: str, ckpt_minutes: float, save: Callable[[], None]):
        self.clock, self.key, self.ckpt_s, self.save = clock, key, ckpt_minutes * 60, save
        self.t0 = self.since = time.perf_counter()
        self.base = clock[key]

    def tick(self) -> float:
        """After a step: update the elapsed time; returns this session's run time so far."""
        now = time.perf_counter()
        self.clock[self.key] = self.base + now - self.t0
        return now - self.t0

    def checkpoint_if_due(self) -> None:
        """Save when `ckpt_minutes` have passed since the last save (not counting the saves themselves)."""
        if time.perf_counter() - self.since > self.ckpt_s:
            self.save()
            self.since = time.perf_counter()
