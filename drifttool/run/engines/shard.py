"""One prompt's shard from every drafter's run: what the chain and the tree engines share."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ...errors import DriftError


def each_drafter(drafters: dict, run: Callable) -> tuple[dict[str, pd.DataFrame], dict]:
    """`run(name, drafter)` -> (tables, sampled rows or None) for every drafter on one prompt; returns the shard's
    tables (concatenated in drafter order) and the rows merged. A drafter's error names the drafter; the target's
    ("target features ...") belongs to the prompt and passes through unchanged."""
    parts: dict[str, list[pd.DataFrame]] = {}
    rows: dict = {}
    for name, d in drafters.items():
        try:
            tabs, arr = run(name, d)
        except DriftError as e:
            if str(e).startswith("target features"):
                raise
            raise DriftError(f"drafter {name!r}: {e}") from None
        for k, v in tabs.items():
            parts.setdefault(k, []).append(v)
        rows.update(arr or {})
    return {k: pd.concat(v, ignore_index=True) for k, v in parts.items()}, rows
