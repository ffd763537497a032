"""Argument checks at the call (CLI and Python API alike): a wrong type or value is one DriftError line naming the
argument, never a coercion (True as 1, 2.5 truncated to 2, "8" failing later inside the loop)."""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from ..errors import DriftError

if TYPE_CHECKING:
    from ..trace.sinks import SinkSpec


def is_int(v: Any) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and type(v).__name__ != "bool_"


def need_int(name: str, v: Any, minimum: int, what: str = "") -> int:
    if not is_int(v):
        raise DriftError(f"{name}: {v!r} ({type(v).__name__}) is not an integer; expected {what or f'an integer >= {minimum}'}")
    if v < minimum:
        raise DriftError(f"{name}: {v} is invalid; expected {what or f'an integer >= {minimum}'}")
    return int(v)


def need_number(name: str, v: Any, minimum: float, what: str = "") -> float:
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v >= minimum
    if not ok:
        raise DriftError(f"{name}: {v!r} is invalid; expected {what or f'a finite number >= {minimum}'}")
    return float(v)


def need_sink(v: Any, name: str = "sink") -> SinkSpec:
    from ..trace.sinks import SinkSpec

    if v is not None and not isinstance(v, SinkSpec):
        raise DriftError(f"{name}: {v!r} ({type(v).__name__}); expected a drifttool.SinkSpec, e.g. SinkSpec.parse('4')")
    return v or SinkSpec()


def token_ids(ids: Any, name: str = "prompt") -> list[int]:
    """A non-empty sequence of integer token ids (no bools, no floats)."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise DriftError(f"{name}: expected a list of token ids, got {type(ids).__name__}")
    out = list(ids)
    bad = [i for i in out if not is_int(i)]
    if bad:
        raise DriftError(f"{name}: token id {bad[0]!r} ({type(bad[0]).__name__}) is not an integer")
    return [int(i) for i in out]


def run_settings(depth: Any, max_new_tokens: Any, temperature: Any, seed: Any, keep_rows: Any, limit: Any,
                 sink: Any, prefix: str = "--") -> None:
    """The capture settings shared by every engine and the live API; `prefix` '--' names them as CLI flags.
    `depth` None: the run has no chain depth of its own (a tree's comes from its spec)."""
    if depth is not None:
        need_int(f"{prefix}depth", depth, 1, "a speculation depth >= 1")
    need_int(f"{prefix}max-new-tokens" if prefix else "max_new_tokens", max_new_tokens, 1)
    need_number(f"{prefix}temperature", temperature, 0.0, "a finite temperature >= 0 (0 = greedy)")
    need_int(f"{prefix}seed", seed, -(2**63))
    need_int(f"{prefix}keep-rows" if prefix else "keep_rows", keep_rows, 0)
    if limit is not None:
        need_int(f"{prefix}limit", limit, 1, "a number of prompts >= 1")
    need_sink(sink, f"{prefix}sink")
