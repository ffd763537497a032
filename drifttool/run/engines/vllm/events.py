"""The recorder's events as files: how what vLLM's worker recorded reaches the process that replays it.

vLLM's `collective_rpc` is for control messages (its results go through msgpack, tensors only with pickle
allowed), so a worker writes its events to a folder the driver gave it (safetensors for tensors, JSON for the
rest: nothing is unpickled) and returns the file's path. Workers of one vLLM instance share the host."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ....errors import DriftError
from .recorder import Proposal, Step, Verify


def write_events(events: dict[str, list[Proposal | Verify]], path: Path) -> Path:
    """One take of the recorder as `path`.safetensors + `path`.json (written atomically, JSON last)."""
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, list[dict]] = {}
    n = 0
    for req, evs in events.items():
        rows = meta.setdefault(req, [])
        for ev in evs:
            if isinstance(ev, Proposal):
                key, n = f"p{n}", n + 1
                tensors[f"{key}.feats"] = ev.feats.contiguous()
                for k, st in enumerate(ev.steps):
                    for name in ("ids", "pos", "hidden"):
                        tensors[f"{key}.{k}.{name}"] = getattr(st, name).contiguous()
                rows.append({"kind": "proposal", "key": key, "sample_idx": ev.sample_idx, "drafts": ev.drafts,
                             "steps": len(ev.steps), "wall": ev.wall, "batch": ev.batch})
            else:
                rows.append({"kind": "verify", "drafts": ev.drafts, "target_argmax": ev.target_argmax,
                             "sampled": ev.sampled})
    st, js = path.with_suffix(".safetensors"), path.with_suffix(".json")
    save_file(tensors or {"_empty": torch.zeros(0)}, str(st))
    tmp = js.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, js)
    return path


def read_events(path: str | Path) -> dict[str, list[Proposal | Verify]]:
    """The events `write_events` wrote, per request."""
    path = Path(path)
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        tensors = load_file(str(path.with_suffix(".safetensors")))
    except (OSError, json.JSONDecodeError) as e:
        raise DriftError(f"--engine vllm: the worker's recorded events {path}: unreadable ({e})") from None
    out: dict[str, list[Proposal | Verify]] = {}
    for req, rows in meta.items():
        evs = out.setdefault(req, [])
        for r in rows:
            if r["kind"] == "proposal":
                k = r["key"]
                steps = [Step(*(tensors[f"{k}.{i}.{n}"] for n in ("ids", "pos", "hidden"))) for i in range(r["steps"])]
                evs.append(Proposal(tensors[f"{k}.feats"], int(r["sample_idx"]), list(r["drafts"]), steps,
                                    float(r["wall"]), int(r["batch"])))
            else:
                evs.append(Verify(list(r["drafts"]), list(r["target_argmax"]), list(r["sampled"])))
    return out
