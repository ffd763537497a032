"""Pooling series across traces: every trace's series of one drafter read as one series (the docs' tables pooled
over suites). Returns new tables; the Comparison given is left as it was."""

from __future__ import annotations

import dataclasses

import pandas as pd

from .compare import Comparison


def by_drafter(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a series table (rounds, depths or heads) with `series` = the drafter name and prompt ids and groups
    made distinct per drafter ('id|drafter'), so that one drafter's rows from several traces pool as one series
    while each prompt stays its own unit. Keys are plain strings: compact traces store them as categoricals, which
    do not concatenate."""
    s = df["drafter"].astype(str)
    new = {"series": s, "prompt_id": df["prompt_id"].astype(str) + "|" + s}  # ids are unique across suites already
    if "group" in df.columns:
        new["group"] = df["group"].astype(str) + "|" + s
    return df.assign(**new)


def pool_by_drafter(cmp: Comparison) -> Comparison:
    """A Comparison whose rounds and depths pool every trace's series of one drafter (by_drafter); its `series`
    list, notes and everything else are the given one's. The given Comparison's tables are not changed."""
    return dataclasses.replace(cmp, rounds=by_drafter(cmp.rounds), depths=by_drafter(cmp.depths))
