"""drifttool: measure attention drift and hidden-state growth in EAGLE-3 / EAGLE-3.1 drafters.

Public names are imported lazily (PEP 562), so `import drifttool.trace` / the dashboard do not pay for
torch and transformers until a model is actually needed."""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING

from .errors import DriftError
from .version import __version__

_LAZY = {
    "LiveCapture": ".live_api",
    "Trace": ".api",
    "capture": ".live_api",
    "capture_run": ".live_api",
    "patch": ".live_api",
    "compare_many": ".api",
    "load": ".api",
    "load_drafter": ".model.checkpoint",
    "save_drafter": ".model.checkpoint",
    "DrafterConfig": ".model.config",
    "Eagle3Drafter": ".model.drafter",
    "Decoding": ".run.loop",
    "RoundRecord": ".run.loop",
    "SpecResult": ".run.loop",
    "speculate": ".run.loop",
    "Target": ".model.target",
    "load_target": ".model.target",
    "capture_tree": ".live_api",
    "TreeSpec": ".run.tree",
    "parse_tree": ".run.tree",
    "speculate_tree": ".run.tree_loop",
    "TreeCapture": ".run.tree_capture",
}

__all__ = [
    "LiveCapture",
    "Trace",
    "capture",
    "capture_run",
    "patch",
    "compare_many",
    "load",
    "DrafterConfig",
    "Decoding",
    "DriftError",
    "Eagle3Drafter",
    "RoundRecord",
    "SpecResult",
    "Target",
    "load_drafter",
    "load_target",
    "save_drafter",
    "speculate",
    "capture_tree",
    "TreeSpec",
    "parse_tree",
    "speculate_tree",
    "TreeCapture",
    "__version__",
]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'drifttool' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the loaded submodules (not this file's own imports: sys, importlib, types)."""
    subs = {
        n
        for n, v in globals().items()
        if isinstance(v, types.ModuleType)
        and not n.startswith("_")
        and getattr(v, "__name__", "").startswith(__name__ + ".")
    }
    return sorted(set(__all__) | subs)


if TYPE_CHECKING:  # pragma: no cover
    from .api import Trace, compare_many, load
    from .live_api import LiveCapture, capture, capture_run, capture_tree, patch
    from .model.checkpoint import load_drafter, save_drafter
    from .model.config import DrafterConfig
    from .model.drafter import Eagle3Drafter
    from .model.target import Target, load_target
    from .run.loop import Decoding, RoundRecord, SpecResult, speculate
    from .run.tree import TreeSpec, parse_tree
    from .run.tree_capture import TreeCapture
    from .run.tree_loop import speculate_tree
