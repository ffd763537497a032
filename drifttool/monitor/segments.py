"""Rolling trace segments: the sampled requests written as ordinary traces, DIR/segments/seg-NNNNNN.drift, a new
one every `per_segment` requests, the oldest removed while more than `keep` exist or they hold more than
`max_bytes`. Each request is one shard committed atomically by TraceWriter, so a server killed at any moment
leaves every segment readable with whole shards only (the open one as a partial trace); `compare`, `check` and
the dashboard read segments as any trace."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

from ..trace.writer import TraceWriter

# seg-NNNNNN.drift (engine 0), seg-eK-NNNNNN.drift (data-parallel engine K > 0: each engine's replay writes and
# prunes its own, so two engines of one server never take the same segment); six digits at least
NAME = re.compile(r"^seg-(?:e(\d+)-)?(\d{6,})\.drift$")


def _engine(p: Path) -> int:
    return int(NAME.match(p.name).group(1) or 0)


def _named(folder: Path, engine: int | None = None) -> list[Path]:
    """Every folder named as a segment (of `engine` only, when given), oldest first by number (manifest or not)."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and NAME.match(p.name)
             and (engine is None or _engine(p) == engine)]
    return sorted(found, key=lambda p: (int(NAME.match(p.name).group(2)), _engine(p)))


def segments(folder: Path, engine: int | None = None) -> list[Path]:
    """The segments in `folder` (every engine's, or one engine's), oldest first: a folder created but without its
    manifest yet (or ever: a crash in between) is no segment, so no reader meets a folder that is not a trace."""
    return [p for p in _named(folder, engine) if (p / "manifest.json").is_file()]


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class SegmentWriter:
    def __init__(self, folder: Path, manifest: dict[str, Any], per_segment: int = 256, keep: int = 24,
                 max_bytes: int = 1 << 30, engine: int = 0):
        self.folder, self.manifest, self.engine = Path(folder), manifest, int(engine)
        self.per_segment, self.keep, self.max_bytes = per_segment, keep, max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self.writer: TraceWriter | None = None
        self.n = 0

    def _next_path(self) -> Path:
        last = _named(self.folder, self.engine)  # a name taken by a folder without its manifest is not reused either
        i = int(NAME.match(last[-1].name).group(2)) + 1 if last else 1
        return self.folder / (f"seg-{i:06d}.drift" if self.engine == 0 else f"seg-e{self.engine}-{i:06d}.drift")

    def add(self, key: str, tables: dict, rows: dict | None, problem: str | None = None) -> Path:
        """One request's shard (and its replay flag); returns the segment it went to."""
        if self.writer is None:
            path = self._next_path()
            try:
                self.writer = TraceWriter(path, self.manifest)
            except BaseException:  # a full disk, say: no manifest-less folder is left for each retry
                if not (path / "manifest.json").exists():
                    shutil.rmtree(path, ignore_errors=True)
                raise
            self.n = 0
        self.writer.add(key, tables, rows)
        path = self.writer.path
        self.n += 1
        try:  # the shard is committed: nothing after this may fail the request (it would be replayed twice)
            if problem is not None:
                self.writer.flag(key, "replay", problem)
            if self.n >= self.per_segment:
                self.roll()
        except Exception as e:  # noqa: BLE001 - the segment stays readable (a partial, or complete sharded, trace)
            print(f"drifttool monitor: {path.name}: not finished ({type(e).__name__}: {e}); the next request starts a "
                  "new segment", file=sys.stderr, flush=True)
            if self.writer is not None:
                try:
                    self.writer.close()
                except Exception:  # noqa: BLE001
                    pass
            self.writer = None
        return path

    def roll(self) -> None:
        """Finish the open segment (complete, compacted) and prune the oldest."""
        if self.writer is not None:
            self.writer.finish(compact=True)
            self.writer = None
        self.prune()

    def prune(self) -> None:
        open_path = self.writer.path if self.writer is not None else None
        done = [p for p in segments(self.folder, self.engine) if p != open_path]  # its own engine's only
        sizes = {p: _size(p) for p in done}
        while done and (len(done) + (open_path is not None) > self.keep or sum(sizes.values()) > self.max_bytes):
            old = done.pop(0)
            shutil.rmtree(old, ignore_errors=True)
            sizes.pop(old)

    def close(self) -> None:
        self.roll()
