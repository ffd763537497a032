"""Resumable training checkpoints shared by the zoo trainers: module weights as safetensors, optimizer
states, and a state.json, written into a temporary folder that replaces the previous checkpoint only when
complete (a kill mid-save leaves the previous one). Optimizer states are our own files, read back
weights-only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn


def save_ckpt(
    ck: Path, modules: dict[str, nn.Module], optims: dict[str, torch.optim.Optimizer], state: dict[str, Any]
) -> None:
    """modules / optims: file name -> object (e.g. {"model.safetensors": m}, {"optim.pt": opt})."""
    from safetensors.torch import save_file

    tmp = ck.with_name(ck.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, m in modules.items():
        save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(tmp / name))
    for name, opt in optims.items():
        torch.save(opt.state_dict(), tmp / name)
    (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n")
    old = ck.with_name(ck.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if ck.exists():
        ck.rename(old)
    tmp.rename(ck)
    shutil.rmtree(old, ignore_errors=True)


def load_ckpt(
    ck: Path,
    modules: dict[str, nn.Module],
    optims: dict[str, torch.optim.Optimizer],
) -> dict[str, Any] | None:
    """Load a checkpoint written by save_ckpt into the given objects; its state, or None when there is none."""
    from safetensors.torch import load_file

    if not (ck / "state.json").exists():
        return None
    for name, m in modules.items():
        m.load_state_dict(load_file(str(ck / name)))
    for name, opt in optims.items():
        opt.load_state_dict(torch.load(ck / name, weights_only=True))
    return json.loads((ck / "state.json").read_text())
