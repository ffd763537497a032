"""The project's own tooling, not part of the installed package: trains the bundled models (the tiny demo zoo,
`python -m training.build`; the real-target drafters, `scripts/train_real_drafters.sh`) and builds the bundled
probe suites. drifttool itself only reads what this writes (`drifttool/zoo/models/`, `probes/`)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_BUILD_DIR = Path(__file__).resolve().parents[1] / "zoo_build"
