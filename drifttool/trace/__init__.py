"""Versioned on-disk traces: NAME.drift/ = manifest.json + Parquet tables (+ sampled attention rows).

Names are imported lazily (PEP 562): `trace.metric_table` can be imported (and extended with a row) before
anything derives the schema's column lists from it."""

from __future__ import annotations

import importlib

_LAZY = {"TraceData": ".reader", "read_manifest": ".reader", "read_table": ".reader", "read_trace": ".reader",
         "SCHEMA_VERSION": ".schema", "TABLES": ".schema", "TraceWriter": ".writer"}
__all__ = ["SCHEMA_VERSION", "TABLES", "TraceData", "TraceWriter", "read_manifest", "read_table", "read_trace"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
