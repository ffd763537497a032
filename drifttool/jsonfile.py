"""Read a JSON object from a user-supplied file, turning every way it can be bad into one DriftError line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import DriftError


def read_json_object(path: Path, missing: str) -> dict[str, Any]:
    """`missing` says what the file is for (used when it does not exist)."""
    if not path.is_file():
        raise DriftError(f"{path}: missing ({missing})")
    try:
        data = json.loads(path.read_text())
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, int digit limit, nesting
        raise DriftError(f"{path}: not valid JSON ({e})") from None
    except OSError as e:
        raise DriftError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise DriftError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _finite(x: Any) -> Any:
    """x with every non-finite float (NaN, +-inf) as None, recursively; numpy scalars and arrays as Python values."""
    import math

    import numpy as np

    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, np.ndarray):
        return _finite(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def dumps_strict(obj: Any, **kw: Any) -> str:
    """JSON every strict parser reads (jq, JavaScript's JSON.parse, Go): NaN and +-inf become null (a quantity that
    could not be computed, or an infinite MDE: no test possible), never the bare NaN / Infinity tokens Python's
    json writes by default; other unknown objects as their str()."""
    return json.dumps(_finite(obj), allow_nan=False, default=str, **kw)
