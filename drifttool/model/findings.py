"""One finding about a drafter checkpoint: what `conform`'s static part reports (the config's reading,
model/conformance.py, and the weights' health, model/weight_health.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Finding:
    code: str
    severity: str  # error: an engine will misread or refuse it; warning: likely wrong; info: what was assumed
    message: str
    engines: dict[str, str] = field(default_factory=dict)  # engine -> what it does with this
    flag: str | None = None  # the flag the finding is about, where it is about one
    value: Any = None  # the value the checkpoint stores for it (where it stores one)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
