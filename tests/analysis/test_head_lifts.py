"""Head lifts: a head's mean mass over the mean uniform share of its key set on the same rounds (every head of a
round saw the same keys), so a head attending uniformly reads 1.0 whatever the context length."""

from __future__ import annotations

import numpy as np
import pandas as pd

from drifttool.analysis.views import head_lifts


def test_uniform_heads_read_one_and_a_sink_head_its_ratio():
    # two rounds at depth 1: 10 and 40 keys, 4 sink slots, 2 recent, 0 template, 0 self
    dd = pd.DataFrame({"series": "a", "depth": 1, "n_keys": [10, 40], "n_sink": [4, 4], "n_self": [0, 0],
                       "n_recent": [2, 2], "n_template": [0, 0]})
    share = np.mean([4 / 10, 4 / 40])
    hm = pd.DataFrame({"series": ["a", "a"], "depth": [1, 1], "head": [0, 1],
                       "sink_mass": [share, 0.9], "self_mass": [0.0, 0.0], "recent_mass": [np.mean([0.2, 0.05]), 0.0],
                       "template_mass": [0.0, 0.0]})
    out = head_lifts(hm.copy(), dd)
    assert np.isclose(out.sink_lift[0], 1.0) and np.isclose(out.recent_lift[0], 1.0)
    assert np.isclose(out.sink_lift[1], 0.9 / share)
    assert out.self_lift.isna().all() and out.template_lift.isna().all()  # empty key sets: no share, no lift
    empty = head_lifts(hm.copy(), dd.iloc[:0])
    assert empty.sink_lift.isna().all()
