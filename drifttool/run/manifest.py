"""The manifest a capture writes: the identity of the target, of every drafter and of the settings that shaped
a trace's numbers, and the settings hash `--resume` checks. Every engine builds it here; the reader
(trace/reader.py) validates what it reads back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..trace.identity import flat_identity, folder_weights, module_weights
from ..version import __version__

if TYPE_CHECKING:
    from ..model.drafter import Eagle3Drafter
    from ..model.target import Target


def settings_digest(obj: Any) -> str:
    """A short, order-independent hash of a JSON-able value (the settings hash, a target config's hash)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def target_identity(target: Target, path: str | None) -> dict[str, Any]:
    """The target as the manifest records it: shape, aux layers, config and weights by content, provenance."""
    cfg = target.config.to_dict() if hasattr(target.config, "to_dict") else {}
    ident = {
        "path": str(path) if path else target.name,
        "architecture": type(target.model).__name__ if target.model is not None  # None: vLLM holds the weights
        else (getattr(target.config, "architectures", None) or ["?"])[0],
        "num_layers": target.num_layers, "hidden_size": target.hidden_size, "vocab_size": target.vocab_size,
        "max_position_embeddings": target.max_positions, "aux_layer_ids": target.aux_layer_ids,
        "config_hash": settings_digest({k: v for k, v in cfg.items() if not k.startswith("_")}),
        "weights": (folder_weights(path) if path else None) or (
            module_weights(target.model) if target.model is not None else None),
    }
    if path and (Path(path) / "report.json").is_file():
        try:
            ident["report"] = json.loads((Path(path) / "report.json").read_text())
        except (ValueError, RecursionError, OSError):
            ident["report"] = "unreadable report.json"
    from ..zoo.smollm2 import provenance

    prov = provenance(Path(path)) if path else None
    if prov is not None:  # e.g. the real target converted from a GGUF: which file, which precision
        ident["provenance"] = prov
    return ident


def drafter_identity(name: str, d: Eagle3Drafter) -> dict[str, Any]:
    """A drafter as the manifest records it: layout, flags, overrides, assumptions, weights by content."""
    c = d.config
    out = {
        "name": name, "path": c.source, "layout": c.layout, "variant": c.variant, "flags": c.flags(),
        "overrides": c.overrides, "assumptions": c.assumptions, "config_hash": c.config_hash(),
        "aux_layer_ids": c.aux_layer_ids, "aux_convention": c.aux_convention,
        "aux_layer_ids_read": c.input_aux_layer_ids, "sliding_window": c.sliding_window, "model_type": c.model_type,
        "max_position_embeddings": c.max_position_embeddings, "trained_window": c.trained_window,
        "rope_theta": c.rope_theta, "rope_scaling": c.rope_scaling, "has_embed": c.has_embed,
        "hidden_size": c.hidden_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "draft_vocab_size": c.draft_vocab_size,
        "weights": folder_weights(c.source) if c.source else None,
    }
    if out["weights"] is None:  # built in Python (API), not loaded from a folder
        out["weights"] = module_weights(d)
    return out


def build_manifest(target: Target, target_path: str | None, models: dict[str, Eagle3Drafter],
                   capture_settings: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Identity of everything that shaped the numbers, and a hash that --resume checks."""
    m = {"drifttool_version": __version__, "target": target_identity(target, target_path),
         "drafters": [drafter_identity(n, d) for n, d in models.items()], "capture": capture_settings, **(extra or {})}
    m["identity"] = flat_identity(m, sorted(extra or {}))
    m["settings_hash"] = settings_digest(m["identity"])
    return m
