"""drifttool: measure attention drift and hidden-state growth in EAGLE-3 / EAGLE-3.1 drafters."""

from .checkpoint import load_drafter, save_drafter
from .config import DrafterConfig
from .drafter import Eagle3Drafter
from .errors import DriftError
from .loop import RoundRecord, SpecResult, speculate
from .target import Target, load_target

__version__ = "0.1.0"

__all__ = [
    "DrafterConfig", "DriftError", "Eagle3Drafter", "RoundRecord", "SpecResult", "Target",
    "load_drafter", "load_target", "save_drafter", "speculate", "__version__",
]
