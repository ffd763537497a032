"""Strict reading of config.json fields: a value of the wrong type or out of range is one DriftError line naming
the field, never a coercion (`bool("false")` is True, `int("123")` is 123, `list("123")` is three ids)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import DriftError

REQUIRED = object()
ROPE_FACTOR_TYPES = ("linear", "dynamic", "llama3")


def _show(v: Any) -> str:
    return f"{v!r} ({type(v).__name__})"


def pos_int(d: dict[str, Any], key: str, where: str, default: Any = REQUIRED, minimum: int = 1) -> int:
    """An integer >= minimum (JSON 4096 or 4096.0; not true, not "4096"); null or absent take `default`."""
    v = d.get(key)
    if v is None:
        if default is REQUIRED:
            raise DriftError(f"{where}: missing required field {key!r}")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise DriftError(f"{where}: field {key!r} is {_show(v)}; expected an integer >= {minimum}")
    if v < minimum:
        raise DriftError(f"{where}: field {key!r} is {v}; expected an integer >= {minimum}")
    return int(v)


def pos_float(d: dict[str, Any], key: str, where: str, default: float) -> float:
    """A finite number > 0; null or absent take `default`."""
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise DriftError(f"{where}: field {key!r} is {_show(v)}; expected a finite number > 0")
    return float(v)


def strict_bool(v: Any, key: str, where: str) -> bool:
    if not isinstance(v, bool):
        raise DriftError(f"{where}: field {key!r} is {_show(v)}; expected true or false (a JSON boolean)")
    return v


def aux_ids(v: Any, where: str) -> list[int]:
    if not isinstance(v, list) or not v or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
        raise DriftError(f"{where}: field 'eagle_aux_hidden_state_layer_ids' is {_show(v)}; expected a non-empty "
                         "list of layer ids (integers >= 0)")
    return list(v)


def rope_scaling(s: Any, where: str) -> dict[str, Any] | None:
    """None, or an object whose type has the fields that type needs (factor > 0; llama3 its window)."""
    if s is None:
        return None
    if not isinstance(s, dict):
        raise DriftError(f"{where}: field 'rope_scaling' is {_show(s)}; expected an object or null")
    kind = s.get("rope_type", s.get("type", "default"))
    if kind in ROPE_FACTOR_TYPES:
        if s.get("factor") is None:
            raise DriftError(f"{where}: rope_scaling of type {kind!r} lacks 'factor' (expected a number > 0)")
        pos_float(s, "factor", f"{where}: rope_scaling", 1.0)
    if kind == "llama3":
        pos_int(s, "original_max_position_embeddings", f"{where}: rope_scaling")
        for k in ("low_freq_factor", "high_freq_factor"):
            pos_float(s, k, f"{where}: rope_scaling", 1.0)
    return s


def check_target_config(cfg: dict[str, Any], where: str) -> None:
    """The fields every decoder LM config needs, before transformers builds (or fails to build) the model."""
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        if key in cfg:
            pos_int(cfg, key, where)
    for key in ("max_position_embeddings", "intermediate_size", "num_key_value_heads", "head_dim"):
        pos_int(cfg, key, where, default=None)
    for key in ("rms_norm_eps", "layer_norm_eps", "rope_theta"):
        pos_float(cfg, key, where, 1.0)
    rope_scaling(cfg.get("rope_scaling"), where)
