"""Which drafters a run loads: `[NAME=]DIR[?flag=value&...]` specs, checked as a set (names unique, one aux-layer
convention) and loaded against the target's shape. Every engine loads its drafters here."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import DriftError
from ..model.checkpoint import read_drafter
from ..model.drafter import Eagle3Drafter
from ..model.target import TargetShape
from .drafter_specs import DrafterSpec, check_drafters, parse_overrides  # noqa: F401 - re-exported (the engines')


def check_mtp_targets(specs: list, models: dict, target_path: str | None) -> None:
    """An MTP head lives in its target's checkpoint and vLLM reads it from there: one read from folder A beside a
    target loaded from folder B with other weights (same config) ran with exit 0 and no word."""
    if target_path is None:
        return
    from ..trace.identity import folder_weights

    tw = None
    for d in specs:
        m = models.get(d.name)
        if m is None or not m.config.mtp or Path(d.path).resolve() == Path(target_path).resolve():
            continue
        tw = tw or folder_weights(target_path)
        if folder_weights(d.path) != tw:
            raise DriftError(f"--drafter {d.name}: the MTP head of {d.path} with --target {target_path}, whose weights "
                             "differ: an MTP layer belongs to its own target (vLLM reads it from there); give "
                             f"--target {d.path}")


def check_same_aux(models: dict) -> None:
    """One capture runs the target once per prompt for all drafters, so they must read the same target states."""
    kinds = {bool(m.config.mtp) for m in models.values()}
    if len(kinds) > 1:
        mtp = sorted(n for n, m in models.items() if m.config.mtp)
        raise DriftError(f"--drafter: {mtp} are MTP heads (they read the target's last hidden state) and the others "
                         "EAGLE heads (three aux layers): one capture runs one kind; capture them separately")
    aux = {tuple(m.config.input_aux_layer_ids) for m in models.values()}
    if len(aux) > 1:
        raise DriftError(f"--drafter: drafters disagree on eagle_aux_hidden_state_layer_ids {sorted(aux)}; capture them separately")


def load_drafters(specs: list[DrafterSpec], shape: TargetShape, device: str, dtype: torch.dtype,
                  ) -> dict[str, Eagle3Drafter]:
    """Every spec's drafter built for the target's shape, by name; they must agree on the aux layers."""
    models = {d.name: read_drafter(d.path, shape, overrides=d.overrides, device=device, dtype=dtype) for d in specs}
    check_same_aux(models)
    return models
