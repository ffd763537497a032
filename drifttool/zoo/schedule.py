"""Training scaffolding shared by the zoo trainers (train_target, train_drafter, train_real): the cosine decay
each learning-rate schedule ends in, and setting a step's learning rate. Each trainer keeps its own warmup and
its own notion of progress (planned steps, wall-clock budget)."""

from __future__ import annotations

import math

import torch


def cosine(lr: float, min_lr_frac: float, frac: float) -> float:
    """Cosine decay from lr (frac 0) to lr * min_lr_frac (frac 1)."""
    lo = lr * min_lr_frac
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * frac))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr
