"""A live monitor's folder as dashboard input (DRIFTTOOL_MONITOR's dir=, or its segments/): read as the trace
segments it holds at each script run, so segments the monitor writes later appear and pruned ones go. No
Streamlit here: the CLI checks its arguments with it before starting the app."""

from __future__ import annotations

from pathlib import Path


def is_live(path: Path) -> bool:
    path = Path(path)
    return path.is_dir() and not (path / "manifest.json").is_file() and (
        (path / "segments").is_dir() or any(path.glob("seg-*.drift")))


def live_segments(path: Path) -> list[Path]:
    from ..monitor.segments import segments

    path = Path(path)
    return segments(path / "segments" if (path / "segments").is_dir() else path)


def expand(paths: list[str | Path]) -> list[Path]:
    """Each given path, a live folder replaced by its current segments."""
    return [p for a in paths for p in (live_segments(Path(a)) if is_live(Path(a)) else [Path(a)])]


def pooled(path: Path):
    """A live folder as one trace of all its current segments (trace/pooled.py: one setup, each request once)."""
    from ..trace.pooled import PooledTrace

    path = Path(path)
    return PooledTrace(live_segments(path), f"{path.resolve().name}-pooled.drift")
