"""The answer's clauses read each quantity against what gives it meaning: a flat RMS says what its groups could
have detected; a sink is judged by its lift's CI against uniform, never a fixed floor."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from drifttool.analysis.answer import growth, sink


def _trend(mde: float, base: float, n: int) -> pd.DataFrame:
    return pd.DataFrame([{"series": "a", "metric": "rms_in", "depth": 8, "population": "all", "p": 0.4,
                          "mde": mde, "base_value": base, "n_groups": n}])


def test_flat_rms_states_the_change_its_groups_could_detect():
    s = SimpleNamespace(series="a", feature_growth=1.01)
    assert growth(s, _trend(0.5, 2.0, 24), 8) == (
        "fed-back RMS stays flat x1.01 from depth 1 to 8, p 0.40 (its 24 groups detect a change of 25% or more at "
        "80% power)")
    assert growth(s, _trend(np.inf, 2.0, 3), 8).endswith("(its 3 groups are too few to detect any change)")
    grown = SimpleNamespace(series="a", feature_growth=1.8)
    assert "detect" not in growth(grown, _trend(0.5, 2.0, 24), 8)


def test_sink_is_judged_by_its_lift_against_uniform():
    no = SimpleNamespace(sink_lift_d1=0.9, sink_lift_d1_lo=0.8, sink_lift_d1_hi=1.1)
    yes = SimpleNamespace(sink_lift_d1=12.0, sink_lift_d1_lo=10.0, sink_lift_d1_hi=14.0)
    assert sink(no).startswith("no sink to lose (depth-1 sink lift 0.90 [0.80, 1.10]")
    assert sink(yes).startswith("the drafter attends the sink")
