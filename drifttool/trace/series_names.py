"""How a checkpoint of a training series is named in a trace: `VARIANT@STEP` (e.g. `eagle3@400`). The capture
names its drafters so (run/series.py) and the analyses read the step back (analysis/training.py)."""

from __future__ import annotations

import re

SERIES_NAME = re.compile(r"^(?P<variant>.+)@(?P<step>\d+)$")


def series_name(variant: str, step: int) -> str:
    return f"{variant}@{step}"


def split_series(label: str) -> tuple[str, int] | None:
    """'eagle3@400' (or 'trace:eagle3@400') -> ('eagle3', 400); None for a series that is not a checkpoint."""
    m = SERIES_NAME.match(label.rsplit(":", 1)[-1])
    return (m.group("variant"), int(m.group("step"))) if m else None
