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
