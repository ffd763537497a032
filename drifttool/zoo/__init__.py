"""The bundled demo zoo: tiny Llama targets (plain and with an attention sink) and EAGLE-3 / 3.1 drafters.

Everything is trained locally from Python source read off the running interpreter (no downloads, no
third-party text shipped); `build.build` runs the stages, `models/` holds the packaged result.
"""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "models"
DEFAULT_BUILD_DIR = Path(__file__).resolve().parents[2] / "zoo_build"

__all__ = ["MODELS_DIR", "DEFAULT_BUILD_DIR"]
