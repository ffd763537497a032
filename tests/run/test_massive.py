"""The massive-activation flag (some |x| > 100 and >= 1000x the row's median |x|), computed on the host with the
median taken only for rows whose largest |x| exceeds 100: equal to the definition on planted and random rows."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from drifttool.run.attention_stats import massive


def definition(x: torch.Tensor) -> torch.Tensor:
    """The rule with the usual median: the mean of the two middle values of an even-length row (torch.median
    returns the lower one, which made a row whose largest |x| sits between 1000x the two read differently)."""
    a = x.abs().float()
    return ((a > 100) & (a >= 1000 * a.quantile(0.5, dim=-1, keepdim=True))).any(-1)


def test_planted_rows():
    x = torch.full((5, 64), 0.05)
    x[0, 3] = 500.0  # > 100 and >= 1000 x 0.05: massive
    x[1] = 1.0
    x[1, 7] = -500.0  # > 100 but < 1000 x 1.0: not
    x[2, 9] = 99.0  # >= 1000 x median but not > 100: not
    x[3, 0] = -150.0  # sign does not matter: massive
    assert massive(x).tolist() == [True, False, False, True, False]
    assert not massive(torch.full((2, 8), 3.0)).any()  # nothing above 100: the shortcut path
    assert massive(x.to(torch.bfloat16)).tolist() == [True, False, False, True, False]
    assert massive(x.view(1, 5, 64)).shape == (1, 5)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), spikes=st.integers(0, 3), scale=st.sampled_from([0.01, 0.1, 1.0, 50.0]))
def test_equals_the_definition(seed, spikes, scale):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 128, generator=g) * scale
    for _ in range(spikes):
        i, j, k = (int(torch.randint(0, n, (1,), generator=g)) for n in x.shape)
        x[i, j, k] = float(torch.empty(1).uniform_(50, 2000, generator=g))
    assert np.array_equal(massive(x), definition(x).numpy())
    assert np.array_equal(massive(x.numpy()), definition(x).numpy())  # host arrays (what the capture passes)
