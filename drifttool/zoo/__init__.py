"""The bundled models: tiny Llama targets (plain and with an attention sink) with EAGLE-3 / 3.1 drafters, and
the real-target drafters for SmolLM2 (`models/`), plus the real target itself, fetched and converted once
(`smollm2`). The trainers that made them are project tooling outside the package (`training/` of a checkout)."""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "models"

__all__ = ["MODELS_DIR"]
