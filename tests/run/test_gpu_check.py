"""scripts/gpu_check.sh: without CUDA one line and exit 0 (CI); its checks run at toy size on CPU so the
checking code is tested here (the CUDA run itself needs a GPU machine)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.capture import REPO, child_env


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has CUDA: the script would run the checks"
)
def test_without_cuda_one_line_and_exit_0():
    r = subprocess.run(
        ["bash", str(Path(REPO) / "scripts" / "gpu_check.sh")],
        capture_output=True,
        text=True,
        env={**child_env(), "PYTHON": sys.executable},
        timeout=1800,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [
        "gpu_check: skipped: no CUDA device (torch.cuda.is_available() is False)"
    ]


def test_tiny_checks_pass_on_cpu(capsys):
    assert _module().main(["--device", "cpu", "--scale", "tiny", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 6 and "FAIL" not in out and "device_map_placement" in out
    assert "lse_masses_vs_full" in out  # the CPU kernel gives an lse: the cheap path was compared, not skipped


def test_wrong_lse_masses_fail(capsys, monkeypatch):
    """A planted error of 1e-3 in the lse path's sink mass is a FAIL and exit 1."""
    import drifttool.run.hooks as hooks

    real = hooks.stats.lse_probs
    monkeypatch.setattr(hooks.stats, "lse_probs", lambda *a, **kw: real(*a, **kw) + 1e-3)
    assert _module().main(["--device", "cpu", "--scale", "tiny", "--dtype", "float32"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("lse_masses_vs_full"))
    assert "FAIL" in line


def test_a_wrong_capture_row_fails(capsys, monkeypatch):
    """The rows check compares numbers: a capture whose rows are off by 1e-3 is a FAIL and exit 1."""
    from drifttool.run.hooks import Capture

    real = Capture.attention
    monkeypatch.setattr(Capture, "attention", lambda self, *a, **kw: real(self, *a, **kw) + 1e-3)
    assert _module().main(["--device", "cpu", "--scale", "tiny", "--dtype", "float32"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("capture_rows_vs_eager"))
    assert "FAIL" in line
    assert _module().main(["--device", "cpu", "--scale", "real"]) == 2
