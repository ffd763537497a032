"""The results page's tree sentence never claims a test is impossible where one could reach p < 0.05: with 6 groups
the sign-flip test's smallest p is 2/2^6 = 0.031 (it printed "no paired test can reach p < 0.05" beside it)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from real_results import tree_power  # noqa: E402


def test_the_sentence_follows_the_smallest_p():
    assert "no paired test can reach p < 0.05" in tree_power(5)  # 2/32 = 0.0625
    six = tree_power(6)
    assert "cannot" not in six and "no paired test can reach" not in six and "0.0312" in six
