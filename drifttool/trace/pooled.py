"""Several traces of one capture setup read as one trace: a live monitor's segments (the same drafters, weights
and settings, one request per shard) pooled, so `compare` and the dashboard analyse a day of traffic as a whole
instead of one segment at a time. Checked before use: every part names the same drafters with the same weights
and the same capture settings, and no request appears twice."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd

from ..errors import DriftError
from .reader import TraceData


def _setup(t: TraceData) -> tuple:
    m = t.manifest
    return (tuple((d.get("name"), d.get("weights"), d.get("config_hash")) for d in m.get("drafters", [])),
            m.get("settings_hash"))


class PooledTrace(TraceData):
    """The union of `paths` (traces of one setup) as one trace named `name`; sampled attention rows are not
    pooled (each segment keeps its own)."""

    def __init__(self, paths: list[Path], name: str):
        if not paths:
            raise DriftError(f"{name}: no trace segments to pool")
        self.parts = [TraceData(p) for p in paths]
        first = self.parts[0]
        for t in self.parts[1:]:
            if _setup(t) != _setup(first):
                raise DriftError(f"{t.path}: other drafters, weights or capture settings than {first.path}; only "
                                 "segments of one server setup pool into one trace")
        self.path = Path(name)
        self.manifest = self._manifest()
        self.nonfinite = {}
        seen: dict[str, Path] = {}
        for t in self.parts:
            for key in t.manifest.get("prompts_done", []):
                if key in seen:
                    raise DriftError(f"{t.path}: request {key} is also in {seen[key]}; a request pools once")
                seen[key] = t.path

    def _manifest(self) -> dict:
        m = copy.deepcopy(self.parts[-1].manifest)
        m["prompts_done"] = [k for t in self.parts for k in t.manifest.get("prompts_done", [])]
        m["counts"] = {k: sum(int(t.manifest.get("counts", {}).get(k, 0)) for t in self.parts)
                       for k in ("prompts", "rounds")}
        m["flags"] = [f for t in self.parts for f in t.manifest.get("flags", [])]
        m["shards"] = []  # each part's shards stay its own (attention rows are read per segment)
        m["pooled_from"] = [str(t.path) for t in self.parts]
        return m

    @property
    def name(self) -> str:
        return self.path.name.removesuffix(".drift")

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        frames = [t.table(name, columns) for t in self.parts]
        for t in self.parts:
            self.nonfinite.update({f"{t.name}/{k}": v for k, v in t.nonfinite.items()})
        frames = [f for f in frames if len(f)] or frames[:1]
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


