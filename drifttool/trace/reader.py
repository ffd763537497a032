"""Validating, lazy trace reader: TraceData, a loaded trace whose tables are read on first access, and its sampled
attention rows. The tables are plain Parquet: pandas/polars/duckdb read them directly.

By concern: the manifest's checks live in trace/manifest_check.py, table reading in trace/tables.py, what older
schemas lack in trace/migrate.py; their public names are re-exported here, where readers import them from."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd

from ..errors import DriftError
from .layout import Source, member, shard_file, shard_prompts, sources
from .manifest_check import read_manifest
from .migrate import group_of_id
from .schema import ROWS_INDEX
from .tables import read_part, read_table, sorted_categories
from .validate import nonfinite_note

__all__ = ["TraceData", "group_of_id", "member", "read_manifest", "read_part", "read_table", "read_trace",
           "shard_file", "shard_prompts", "sorted_categories"]


class TraceData:
    """A loaded trace; tables are read on first access."""

    def __init__(self, path):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.nonfinite: dict[str, int] = {}  # table.column -> NaN/inf count, filled as tables are read

    @property
    def notes(self) -> list[str]:
        """One note on non-finite values in the tables read so far (none: empty)."""
        n = nonfinite_note(self.path, self.nonfinite)
        return [n] if n else []

    @property
    def name(self) -> str:
        return self.path.name.removesuffix(".drift")

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        """One table (`columns`: only those, derived ones computed); NaN/inf counts go to `nonfinite`."""
        counts: dict[str, int] = {}
        df = read_table(self.path, name, self.manifest, columns=columns, nonfinite=counts)
        self.nonfinite.update(counts)  # per column: reading a table again (once per drafter) must not add up
        return df

    @cached_property
    def prompts(self) -> pd.DataFrame:
        return self.table("prompts")

    @cached_property
    def groups(self) -> dict[str, str]:
        """prompt id -> group (source document), the statistical unit. Traces that record no `group` column
        (captured before groups existed) get the probe line's id: the prompt id without a cut's `@N` suffix."""
        try:
            p = self.table("prompts")
        except DriftError:  # a damaged prompts table: the other tables still carry prompt ids
            return {}
        ids = p["prompt_id"].astype(str)
        g = p["group"].astype(str) if "group" in p.columns else group_of_id(ids)
        return dict(zip(ids, g))

    @property
    def groups_recorded(self) -> bool:
        try:
            return "group" in self.table("prompts").columns
        except DriftError:
            return False

    @cached_property
    def rounds(self) -> pd.DataFrame:
        return self.table("rounds")

    @cached_property
    def depths(self) -> pd.DataFrame:
        return self.table("depths")

    @cached_property
    def heads(self) -> pd.DataFrame:
        return self.table("heads")

    @cached_property
    def aux(self) -> pd.DataFrame:
        return self.table("aux")

    @property
    def is_tree(self) -> bool:
        """Captured with draft trees (`capture --tree`): per-node tables instead of per-depth ones."""
        return bool(self.manifest["capture"].get("tree"))

    def _tree_table(self, name: str) -> pd.DataFrame:
        if not self.is_tree:
            raise DriftError(f"{self.path}: a chain trace (captured without --tree); it has no {name} table")
        return self.table(name)

    @cached_property
    def tree_nodes(self) -> pd.DataFrame:
        return self._tree_table("tree_nodes")

    @cached_property
    def tree_heads(self) -> pd.DataFrame:
        return self._tree_table("tree_heads")

    @cached_property
    def head_summary(self) -> pd.DataFrame:
        """Per (drafter, prompt, depth, head) sums (schema.HEAD_SUMMARY); computed from heads for old traces."""
        return self.table("head_summary")

    def _rows_sources(self) -> list[Source]:
        return sources(self.path, self.manifest, "rows_index",
                       only=[s["index"] for s in self.manifest["shards"] if s.get("rows")])

    def rows_index(self) -> pd.DataFrame:
        """Sampled attention rows: index of (drafter, prompt, round) -> tensor name in the rows/ file of `shard`."""
        import pyarrow as pa

        parts = []
        for src in self._rows_sources():
            f = src.file
            if not f.is_file():
                raise DriftError(f"{f}: missing (sampled-rows index of shard {src.shards[0]}); the trace is damaged")
            try:
                t = read_part(f, "rows_index", ROWS_INDEX, prompts=src.prompts,
                              depth=self.manifest["capture"].get("depth"), nonfinite={}).to_pandas()
            except (pa.ArrowException, ValueError) as e:  # ValueError: e.g. undecodable strings
                raise DriftError(f"{f}: corrupt Parquet ({str(e).splitlines()[0]})") from None
            if src.merged is None:
                t["shard"] = src.shards[0]
            elif "shard" not in t or not set(t["shard"].astype(int)) <= set(src.shards):
                raise DriftError(f"{f}: column 'shard' missing or naming shards the manifest does not merge there")
            parts.append(t)
        cols = ["drafter", "prompt_id", "round", "context_len", "tensor", "slot_tokens", "shard"]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)

    def rows_file(self, shard: int) -> Path:
        """The safetensors file holding a shard's sampled rows (its own, or the merged one)."""
        s = next((x for x in self.manifest["shards"] if x["index"] == shard), None)
        if s is None:
            raise DriftError(f"{self.path}: sampled rows name shard {shard}, which the manifest does not list")
        return sources(self.path, self.manifest, "rows", "safetensors", only=[shard])[0].file

    def check_rows(self) -> int:
        """Every sampled-rows file the index names opens and holds its tensors; returns how many rows."""
        from safetensors import safe_open

        idx = self.rows_index()
        for f, sub in idx.groupby(idx["shard"].map(lambda s: self.rows_file(int(s)))):
            if not f.is_file():
                raise DriftError(f"{f}: missing (sampled rows of shard {int(sub['shard'].iloc[0])}); "
                                 "the trace is damaged")
            try:
                with safe_open(str(f), "np") as st:
                    keys = set(st.keys())
            except Exception as e:  # noqa: BLE001 - any corruption is a user-facing data error
                raise DriftError(f"{f}: corrupt sampled rows ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
            lost = sorted(set(sub["tensor"]) - keys)
            if lost:
                raise DriftError(f"{f}: lacks the sampled row {lost[0]!r} that rows_index lists")
        return len(idx)

    def attention_row(self, drafter: str, prompt_id: str, round: int):
        """[K, L] head-mean attention rows for a sampled round, and the token id held by each slot."""
        from safetensors import safe_open

        idx = self.rows_index()
        hit = idx[(idx.drafter == drafter) & (idx.prompt_id == prompt_id) & (idx["round"] == round)]
        if hit.empty:
            have = idx[(idx.drafter == drafter) & (idx.prompt_id == prompt_id)]["round"].tolist()
            raise ValueError(f"no sampled attention row for {drafter}/{prompt_id} round {round}; sampled rounds: {have}")
        r = hit.iloc[0]
        f = self.rows_file(int(r.shard))
        try:
            with safe_open(str(f), "np") as st:  # one tensor, not the whole (merged) file
                arr = st.get_tensor(r.tensor)
        except Exception as e:  # noqa: BLE001 - any corruption is a user-facing data error
            raise DriftError(f"{f}: cannot read sampled rows ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        return arr, list(r.slot_tokens)


def read_trace(path) -> TraceData:
    return TraceData(path)
