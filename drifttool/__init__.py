"""drifttool: measure attention drift and hidden-state growth in EAGLE-3 / EAGLE-3.1 drafters."""

from .api import LiveCapture, Trace, capture, compare_many, load
from .checkpoint import load_drafter, save_drafter
from .config import DrafterConfig
from .drafter import Eagle3Drafter
from .errors import DriftError
from .loop import RoundRecord, SpecResult, speculate
from .target import Target, load_target
from .version import __version__  # noqa: E402

__all__ = [
    "LiveCapture", "Trace", "capture", "compare_many", "load",
    "DrafterConfig", "DriftError", "Eagle3Drafter", "RoundRecord", "SpecResult", "Target",
    "load_drafter", "load_target", "save_drafter", "speculate", "__version__",
]
