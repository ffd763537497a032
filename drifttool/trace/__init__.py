"""Versioned on-disk traces: NAME.drift/ = manifest.json + Parquet tables (+ sampled attention rows)."""

from .reader import TraceData, read_manifest, read_table, read_trace
from .schema import SCHEMA_VERSION, TABLES
from .writer import TraceWriter

__all__ = ["SCHEMA_VERSION", "TABLES", "TraceData", "TraceWriter", "read_manifest", "read_table", "read_trace"]
