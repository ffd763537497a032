"""Crash-safe, resumable trace writing: one Parquet shard per completed prompt, committed by an atomic manifest.

Every file of a shard is first written under a hidden name (`.part-N.parquet.tmp`, which Parquet folder readers
such as `pandas.read_parquet("x.drift/depths")` skip); then the manifest is rewritten atomically to list the
shard (the commit point); only then are the files renamed into place. So a reader without drifttool never sees
rows of an uncommitted prompt, even after kill -9; drifttool's reader takes a listed shard's file under its hidden
name until `--resume` finishes the rename. One lock per trace folder (`.lock`, released by the OS when the
process dies) keeps a second writer out in every mode (new, --resume, --overwrite)."""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DriftError
from .files import LOCK, lock_trace, settle, write_json_atomic
from .layout import parquet_options, to_stored
from .schema import SCHEMA_VERSION, STORED

__all__ = ["LOCK", "TraceWriter", "lock_trace", "settle", "write_json_atomic", "write_parquet"]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _merged(old: Any, new: Any) -> Any:
    """`new` over `old`, dicts merged at every level (a resumed run adds to what the first run recorded)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{k: _merged(old.get(k), v) for k, v in new.items()}}
    return new


def write_parquet(df: pd.DataFrame, table: str, path: Path) -> None:
    """A table's stored form (layout.to_stored: no derived columns, dictionary keys, no pandas metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tbl = to_stored(table, pa.Table.from_pandas(df, preserve_index=False))
    pq.write_table(tbl, path, **parquet_options(tbl.schema))  # fast zstd level: the merge recompresses


class TraceWriter:
    def __init__(self, path, manifest: dict[str, Any], resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        # What add() runs under: the runner sets it to hold Ctrl-C / SIGTERM until the shard is committed.
        self.guard: Callable[[], AbstractContextManager] = nullcontext
        if self.path.suffix != ".drift":
            raise DriftError(f"--out {self.path}: a trace folder name must end in .drift")
        mf = self.path / "manifest.json"
        if resume and not mf.is_file():
            raise DriftError(f"--resume {self.path}: no manifest.json there; nothing to resume")
        self._lock = self._acquire()
        try:
            self._open(manifest, resume, overwrite)
        except BaseException:
            self.close()
            raise

    def _acquire(self):
        try:
            return lock_trace(self.path, "wait for it to finish or choose another --out")
        except DriftError as e:
            raise DriftError(f"--out {e}") from None

    def close(self) -> None:
        """Release the trace's lock (idempotent); finish() calls it."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.release()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self, manifest: dict[str, Any], resume: bool, overwrite: bool) -> None:
        from .identity import identity_diff
        from .manifest_check import read_manifest

        mf = self.path / "manifest.json"
        if resume:
            old = read_manifest(self.path)
            diff = identity_diff(old, manifest)
            if diff:
                raise DriftError(f"--resume {self.path}: {diff}; rerun without --resume into a new folder")
            counts = old.get("counts")
            if not isinstance(old.get("prompts_done"), list) or not isinstance(counts, dict) or not all(
                    isinstance(counts.get(k), int) for k in ("prompts", "rounds")):
                raise DriftError(f"--resume {self.path}: manifest.json lacks its 'prompts_done' list or 'counts' "
                                 "(prompts, rounds); cannot resume it; capture into a new folder")
            self.manifest = old
            self.manifest["status"] = "partial"
            self.manifest["schema_version"] = SCHEMA_VERSION  # new shards are written in the current form
            self._settle()
        else:
            if mf.exists() and not overwrite:
                raise DriftError(f"--out {self.path}: a trace already exists there (use --resume or --overwrite)")
            try:
                if overwrite:
                    for p in self.path.rglob("*"):
                        if p.is_file() and (p.suffix in (".parquet", ".safetensors", ".tmp")
                                            or p.name in ("manifest.json", "tokenizer.json")):
                            p.unlink()
            except OSError as e:
                raise DriftError(f"--out {self.path}: cannot create the trace folder ({e.strerror})") from None
            self.manifest = dict(manifest)
            self.manifest.update(
                schema_version=SCHEMA_VERSION, status="partial", created=_now(), shards=[], prompts_done=[],
                counts={"prompts": 0, "rounds": 0}, trace_id=uuid.uuid4().hex,
            )
        self._save_manifest()

    @property
    def done(self) -> set[str]:
        return set(self.manifest["prompts_done"])

    def _settle(self) -> None:
        """After a crash: finish the renames of listed (committed) files, delete files of unlisted shards and
        the files a committed merge replaced (compact.py)."""
        settle(self.path, self.manifest)

    def _save_manifest(self) -> None:
        try:
            write_json_atomic(self.path / "manifest.json", self.manifest)
        except OSError as e:
            raise DriftError(f"{self.path / 'manifest.json'}: cannot write ({e.strerror}); completed shards are kept") from None

    def _discard(self, written: list[Path]) -> None:
        for p in written:
            p.unlink(missing_ok=True)

    def _stage(self, name: str, tables: dict[str, pd.DataFrame], rows: dict[str, np.ndarray] | None) -> list[Path]:
        """Write every file of one shard under its hidden temporary name; returns those paths."""
        staged: list[Path] = []
        try:
            for table, df in tables.items():
                missing = [c for c in STORED.get(table, []) if c not in df.columns]
                if missing:
                    raise ValueError(f"table {table!r} lacks columns {missing}")
                d = self.path / table
                d.mkdir(exist_ok=True)
                staged.append(d / f".{name}.parquet.tmp")
                write_parquet(df, table, staged[-1])
            if rows:
                from safetensors.numpy import save_file

                d = self.path / "rows"
                d.mkdir(exist_ok=True)
                staged.append(d / f".{name}.safetensors.tmp")
                save_file({k: np.ascontiguousarray(v) for k, v in rows.items()}, str(staged[-1]))
        except OSError as e:
            self._discard(staged)
            raise DriftError(
                f"{self.path}: cannot write shard {name} ({e.strerror or e}); the {len(self.manifest['shards'])} "
                "completed prompts are kept and --resume continues"
            ) from None
        except BaseException:  # Ctrl-C / SIGTERM mid-shard: nothing of the shard stays behind
            self._discard(staged)
            raise
        return staged

    def add(self, prompt_id: str, tables: dict[str, pd.DataFrame], rows: dict[str, np.ndarray] | None = None,
            record: dict[str, Any] | None = None) -> None:
        """Write one completed prompt (all drafters) as a shard: stage its files, commit it in the manifest,
        then rename the files into place (under `guard`, so an interrupt waits for the shard). `record`: manifest
        fields about this prompt (e.g. which Ray worker captured it), merged in by the same commit, so a killed
        run keeps them for every prompt it kept."""
        with self.guard():
            self._add(prompt_id, tables, rows, record or {})

    def _add(self, prompt_id: str, tables: dict[str, pd.DataFrame], rows: dict[str, np.ndarray] | None,
             record: dict[str, Any]) -> None:
        idx = max((s["index"] for s in self.manifest["shards"]), default=-1) + 1
        name = f"part-{idx:05d}"
        if "heads" in tables and "head_summary" not in tables:
            from .summary import head_summary

            tables = {**tables, "head_summary": head_summary(tables["heads"], tables.get("rounds"))}
        staged = self._stage(name, tables, rows)
        n_rounds = int(len(tables["rounds"])) if "rounds" in tables else 0
        before = copy.deepcopy(self.manifest)
        self.manifest["shards"].append({"index": idx, "prompts": [prompt_id], "rounds": n_rounds,
                                        "rows": bool(rows)})
        self.manifest["prompts_done"].append(prompt_id)
        self.manifest["counts"]["prompts"] += 1
        self.manifest["counts"]["rounds"] += n_rounds
        self.manifest["updated"] = _now()
        for key, value in record.items():
            self.manifest[key] = _merged(self.manifest.get(key), value)
        late: BaseException | None = None
        try:
            self._save_manifest()  # the commit point
        except BaseException as e:
            if not self._committed(idx):
                self.manifest = before
                self._discard(staged)
                raise
            late = e  # committed after all: finish the renames first
        # kill -9 here leaves hidden files of a committed shard: readers and --resume take them; Ctrl-C waits
        while staged:
            src = staged[0]
            dst = src.with_name(src.name[1:-4])
            try:
                if src.exists() or not dst.exists():  # an interrupt between a rename and the pop: already moved
                    os.replace(src, dst)
                staged.pop(0)
            except KeyboardInterrupt as e:
                late = e
        if late is not None:
            raise late

    def _committed(self, idx: int) -> bool:
        try:
            m = json.loads((self.path / "manifest.json").read_text())
            return any(s.get("index") == idx for s in m.get("shards", []))
        except (OSError, ValueError, AttributeError):
            return False

    def record(self, key: str, value: Any) -> None:
        """A top-level manifest field about how the trace was written (not a capture setting: --resume ignores it),
        e.g. which Ray worker captured each prompt; merged into what earlier runs of a resumed trace recorded."""
        self.manifest[key] = _merged(self.manifest.get(key), value)
        self._save_manifest()

    def flag(self, key: str, check: str, message: str) -> None:
        """Mark a written prompt as failing a faithfulness check (`manifest.flags`; info/compare/dashboard show it)."""
        self.manifest.setdefault("flags", []).append({"key": key, "check": check, "message": message})
        self._save_manifest()

    def finish(self, compact: bool = True) -> None:
        """Mark the trace complete; then (compact) merge its shards into one file per table (compact.py).
        A crash during the merge leaves the complete, sharded trace."""
        self.manifest["status"] = "complete"
        self.manifest["finished"] = _now()
        try:
            self._save_manifest()
            if compact:
                from .compact import merge_shards

                self.manifest = merge_shards(self.path, self.manifest)
        finally:
            self.close()
