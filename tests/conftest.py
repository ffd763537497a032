"""Shared fixtures. Tests share 2 CPU cores with other jobs: one torch thread, tiny models only."""

from __future__ import annotations

from pathlib import Path

import torch

torch.set_num_threads(1)

import pytest  # noqa: E402

from tests.support.tiny_training import TinyPair, build_pair  # noqa: E402


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The shuffle seed, at the end: pytest-randomly puts it in the header, which addopts' -q hides.
    `pytest -p randomly --randomly-seed=N` replays that order; `-p no:randomly` runs in file order."""
    if config.pluginmanager.hasplugin("randomly") and config.getoption("randomly_reorganize", True):
        terminalreporter.write_line(f"Using --randomly-seed={config.getoption('randomly_seed')}")


@pytest.fixture(scope="session")
def trained_pair(tmp_path_factory) -> TinyPair:
    """EAGLE-3 drafter trained ~2 s (TTT, 3 steps) against a tiny 4-layer target; see tiny_training."""
    return build_pair(tmp_path_factory.mktemp("eagle3"))


@pytest.fixture(scope="session")
def trained_pair31(tmp_path_factory) -> TinyPair:
    """Same target, data and init, trained as EAGLE-3.1 (fc_norm + post-norm feedback)."""
    return build_pair(tmp_path_factory.mktemp("eagle31"), fc_norm=True, norm_output=True)


@pytest.fixture(scope="session")
def dash_traces(tmp_path_factory) -> dict[str, Path]:
    """Dashboard fixture traces: a.drift (e3, e31), b.drift (e3post), bad.drift (malformed), missing path."""
    from tests.support.dash import build_dash_traces

    return build_dash_traces(tmp_path_factory.mktemp("dash"))

