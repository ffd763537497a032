"""Shared by the Ray capture tests: the capture command on the tiny models, a trace table in a comparable order, and
the check that two traces hold the same values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from drifttool.trace.reader import read_trace

TABLES = ("prompts", "rounds", "depths", "heads", "aux")


def capture_args(m, probes, out, *extra, quiet: bool = True) -> list[str]:
    return ["capture", "--target", str(m["target"]), "--drafter", f"e3={m['eagle3']}", "--drafter",
            f"e31={m['eagle31']}", "--probes", str(probes), "--depth", "3", "--max-new-tokens", "8",
            *(["--quiet"] if quiet else []), "--sink", "first:4", "--out", str(out), *map(str, extra)]


def table(path, name: str) -> pd.DataFrame:
    df = read_trace(path).table(name)
    keys = [c for c in ("drafter", "prompt_id", "round", "depth", "head", "chunk") if c in df]
    df = df.assign(**{c: df[c].astype(str) for c in ("drafter", "prompt_id", "tags") if c in df})
    timings = [c for c in df.columns if c.endswith("_s")]  # wall-clock seconds: the one thing that may differ
    return df.drop(columns=timings).sort_values(keys).reset_index(drop=True)


def assert_same_trace(a_path, b_path) -> None:
    """Every table, every column, value for value (rows sorted by drafter, prompt, round, depth, head)."""
    for name in TABLES:
        a, b = table(a_path, name), table(b_path, name)
        assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0, name
        for c in a.columns:
            if a[c].dtype.kind == "f":
                np.testing.assert_array_equal(a[c].to_numpy(), b[c].to_numpy(), err_msg=f"{name}.{c}")
            else:
                assert a[c].tolist() == b[c].tolist(), f"{name}.{c}"
