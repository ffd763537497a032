"""Crash-safe, resumable trace writing: one Parquet shard per completed prompt, then an atomic manifest.

A shard file is written under a dot-name (ignored by Parquet dataset readers) and renamed into place;
the manifest, rewritten atomically after every shard, lists exactly the shards that are complete. A crash
or Ctrl-C therefore leaves a readable trace marked `partial`; `resume=True` continues it."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DriftError
from .schema import SCHEMA_VERSION, TABLES


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class TraceWriter:
    def __init__(self, path, manifest: dict[str, Any], resume: bool = False, overwrite: bool = False):
        from .reader import read_manifest

        self.path = Path(path)
        if self.path.suffix != ".drift":
            raise DriftError(f"--out {self.path}: a trace folder name must end in .drift")
        mf = self.path / "manifest.json"
        if resume:
            if not mf.is_file():
                raise DriftError(f"--resume {self.path}: no manifest.json there; nothing to resume")
            old = read_manifest(self.path)
            if old.get("settings_hash") != manifest.get("settings_hash"):
                raise DriftError(
                    f"--resume {self.path}: the trace was captured with different settings "
                    "(drafters, probes, depth, mode, sink or seed); rerun without --resume into a new folder"
                )
            counts = old.get("counts")
            if not isinstance(old.get("prompts_done"), list) or not isinstance(counts, dict) or not all(
                    isinstance(counts.get(k), int) for k in ("prompts", "rounds")):
                raise DriftError(f"--resume {self.path}: manifest.json lacks its 'prompts_done' list or 'counts' "
                                 "(prompts, rounds); cannot resume it; capture into a new folder")
            self.manifest = old
            self.manifest["status"] = "partial"
            self._drop_orphans()
        else:
            if mf.exists() and not overwrite:
                raise DriftError(f"--out {self.path}: a trace already exists there (use --resume or --overwrite)")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                if overwrite:
                    for p in self.path.rglob("*"):
                        if p.is_file() and (p.suffix in (".parquet", ".safetensors", ".tmp") or p.name == "manifest.json"):
                            p.unlink()
            except OSError as e:
                raise DriftError(f"--out {self.path}: cannot create the trace folder ({e.strerror})") from None
            self.manifest = dict(manifest)
            self.manifest.update(
                schema_version=SCHEMA_VERSION, status="partial", created=_now(), shards=[], prompts_done=[],
                counts={"prompts": 0, "rounds": 0},
            )
        self._save_manifest()

    @property
    def done(self) -> set[str]:
        return set(self.manifest["prompts_done"])

    def _drop_orphans(self) -> None:
        listed = {s["index"] for s in self.manifest["shards"]}
        for p in self.path.rglob("*"):
            if p.is_file() and p.name.startswith("part-"):
                idx = p.name.split("-")[1].split(".")[0]
                if not idx.isdigit():  # not a shard file of ours (e.g. "part-00001 (copy).parquet"): leave it
                    continue
                if int(idx) not in listed:
                    p.unlink()
            elif p.is_file() and p.name.endswith(".tmp"):
                p.unlink()

    def _save_manifest(self) -> None:
        try:
            write_json_atomic(self.path / "manifest.json", self.manifest)
        except OSError as e:
            raise DriftError(f"{self.path / 'manifest.json'}: cannot write ({e.strerror}); completed shards are kept") from None

    def _discard(self, written: list[Path]) -> None:
        for p in written:
            p.unlink(missing_ok=True)
        for p in self.path.rglob(".*.tmp"):
            p.unlink(missing_ok=True)

    def add(self, prompt_id: str, tables: dict[str, pd.DataFrame], rows: dict[str, np.ndarray] | None = None) -> None:
        """Write one completed prompt (all drafters) as a shard, then commit it in the manifest."""
        idx = len(self.manifest["shards"])
        name = f"part-{idx:05d}"
        written: list[Path] = []
        try:
            for table, df in tables.items():
                missing = [c for c in TABLES.get(table, []) if c not in df.columns]
                if missing:
                    raise ValueError(f"table {table!r} lacks columns {missing}")
                d = self.path / table
                d.mkdir(exist_ok=True)
                tmp, final = d / f".{name}.parquet.tmp", d / f"{name}.parquet"
                df.to_parquet(tmp, index=False, compression="zstd")  # ~2x smaller than snappy here
                os.replace(tmp, final)
                written.append(final)
            if rows:
                from safetensors.numpy import save_file

                d = self.path / "rows"
                d.mkdir(exist_ok=True)
                tmp, final = d / f".{name}.safetensors.tmp", d / f"{name}.safetensors"
                save_file({k: np.ascontiguousarray(v) for k, v in rows.items()}, str(tmp))
                os.replace(tmp, final)
                written.append(final)
        except OSError as e:
            self._discard(written)
            raise DriftError(
                f"{self.path}: cannot write shard {name} ({e.strerror or e}); the {len(self.manifest['shards'])} "
                "completed prompts are kept and --resume continues"
            ) from None
        except BaseException:
            # Ctrl-C / SIGTERM mid-shard: leave no unlisted part files, which Parquet folder readers
            # (pd.read_parquet(trace / "depths")) would otherwise read as if they were complete.
            self._discard(written)
            raise
        n_rounds = int(len(tables["rounds"])) if "rounds" in tables else 0
        self.manifest["shards"].append({"index": idx, "prompts": [prompt_id], "rounds": n_rounds,
                                        "rows": bool(rows)})
        self.manifest["prompts_done"].append(prompt_id)
        self.manifest["counts"]["prompts"] += 1
        self.manifest["counts"]["rounds"] += n_rounds
        self.manifest["updated"] = _now()
        self._save_manifest()

    def flag(self, key: str, check: str, message: str) -> None:
        """Mark a written prompt as failing a faithfulness check (`manifest.flags`; info/compare/dashboard show it)."""
        self.manifest.setdefault("flags", []).append({"key": key, "check": check, "message": message})
        self._save_manifest()

    def finish(self) -> None:
        self.manifest["status"] = "complete"
        self.manifest["finished"] = _now()
        self._save_manifest()
