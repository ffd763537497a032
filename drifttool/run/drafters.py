"""Which drafters a run loads: `[NAME=]DIR[?flag=value&...]` specs, checked as a set (names unique, one aux-layer
convention) and loaded against the target's shape. Every engine loads its drafters here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import DriftError
from ..model.checkpoint import read_drafter
from ..model.ckpt_config import check_override_key
from ..model.drafter import Eagle3Drafter
from ..model.target import TargetShape


@dataclass
class DrafterSpec:
    """`[NAME=]DIR[?flag=value&flag=value]` on the command line."""

    name: str
    path: str
    overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, common: dict[str, str] | None = None) -> DrafterSpec:
        name, path = (text.split("=", 1) if "=" in text.split("?", 1)[0] else (None, text))
        path, _, query = path.partition("?")
        ov, own = dict(common or {}), set()
        for kv in filter(None, query.split("&")):
            k, eq, v = kv.partition("=")
            if not eq:
                raise DriftError(f"--drafter {text}: override {kv!r} must look like flag=value")
            if k in own:
                raise DriftError(f"--drafter {text}: gives override {k!r} twice; give each flag once")
            own.add(k)
            check_override_key(k, f"--drafter {text}: override")
            ov[k] = v  # the drafter's own override wins over a common --override of the same flag
        p = Path(path)
        return cls(name or (p.name + ("+" + "+".join(f"{k}={v}" for k, v in ov.items()) if ov else "")), path, ov)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for kv in items or []:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise DriftError(f"--override {kv!r}: expected flag=value, e.g. norm_output=true")
        if k.strip() in out:
            raise DriftError(f"--override {kv!r}: gives {k.strip()!r} twice ({k.strip()}={out[k.strip()]} before); "
                             "give each flag once")
        out[k.strip()] = v.strip()
    return out


def check_drafters(drafters: list) -> None:
    if not drafters:
        raise DriftError("--drafter: give at least one drafter checkpoint folder")
    names = [d.name for d in drafters]
    colon = [n for n in names if ":" in n]
    if colon:  # ':' separates a trace from a drafter in every series label: x:e3 and y:e3 both read as e3
        raise DriftError(f"--drafter: drafter name {colon[0]!r} contains ':', which separates trace and drafter in "
                         "series labels; rename it (NAME=DIR) or its series folder")
    if len(set(names)) != len(names):
        raise DriftError(f"--drafter: duplicate drafter names {names}; name them NAME=DIR")


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
