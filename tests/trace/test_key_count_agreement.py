"""Counts that must agree: a depth row's key-set counts are read against its n_keys (issue #51, item 1). An
impossible count (a set larger than the keys the query saw, no keys on a row with masses) is refused in one line
naming the table and column instead of reaching the lifts as 0.0 or 0.02."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.trace.reader import read_table
from drifttool.trace.synthetic import write_trace


def synth(path: Path) -> Path:
    return write_trace(path, {"e3": {"accepted": [2, 1, 0, 2], "self_mass": 0.2}}, depth=3)


def rewrite(f: Path, edit) -> None:
    df = pd.read_parquet(f)
    edit(df)
    df.to_parquet(f, index=False)


def _set(col, value):
    return lambda df: df.__setitem__(col, df[col] * 0 + value if not callable(value) else value(df))


@pytest.mark.parametrize("edit,fragments", [
    (_set("n_keys", 0), ["'n_keys'", "0"]),
    (_set("n_sink", lambda df: df["n_keys"] * 10), ["'n_sink'", "'n_keys'"]),
    (_set("n_self", lambda df: df["n_keys"] + 1), ["'n_self'", "'n_keys'"]),
    (_set("n_recent", lambda df: df["n_keys"] + 5), ["'n_recent'", "'n_keys'"]),
    (_set("n_template", -1), ["'n_template'"]),
])
def test_impossible_key_counts_are_one_line(tmp_path, capsys, edit, fragments):
    t = synth(tmp_path / "x.drift")
    rewrite(t / "depths" / "part-00001.parquet", edit)
    with pytest.raises(DriftError) as e:
        read_table(t, "depths")
    msg = str(e.value)
    assert "depths/part-00001.parquet" in msg and "table 'depths'" in msg, msg
    assert all(f in msg for f in fragments), msg
    # asking for a lift alone reads the counts it divides by: refused there too
    lift = {"n_keys": "sink_lift", "n_sink": "sink_lift", "n_self": "self_lift", "n_recent": "recent_lift",
            "n_template": "template_lift"}[fragments[0].strip("'")]
    with pytest.raises(DriftError):
        read_table(t, "depths", columns=["drafter", "depth", lift])
    rc = main(["compare", str(t)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    assert all(f in lines[0] for f in fragments), lines[0]


def test_agreeing_counts_still_read(tmp_path):
    t = synth(tmp_path / "x.drift")
    # a set as large as every key the query saw is possible (n_sink == n_keys: all keys are sinks)
    rewrite(t / "depths" / "part-00001.parquet", _set("n_sink", lambda df: df["n_keys"]))
    df = read_table(t, "depths")
    assert (df["sink_lift"].dropna() > 0).all()
