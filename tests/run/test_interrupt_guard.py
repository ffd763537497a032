"""Signals at the worst moments of a shard commit (found under load: the resume tests failed twice).

1. An interrupt between a file's rename and its bookkeeping made the retry rename a file already moved
   (FileNotFoundError, exit 1, a traceback).
2. A signal landing inside pyarrow's writer cleanup was dropped by Python ("Exception ignored in __del__").
Now the runner holds Ctrl-C / SIGTERM while a shard commits, and the rename loop is idempotent."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from drifttool.run.runner import Interrupts
from drifttool.trace import writer as wmod
from drifttool.trace.reader import read_trace
from drifttool.trace.writer import TraceWriter
from tests.trace.test_fuzzed_trace_and_probe_files import MANIFEST as MAN
from tests.trace.test_fuzzed_trace_and_probe_files import _prompt


def test_interrupt_between_rename_and_bookkeeping_finishes_the_shard(tmp_path, monkeypatch):
    real = os.replace
    fired = []

    def replace_then_interrupt(src, dst):
        real(src, dst)
        if not fired:  # the signal arrives right after the first rename, before the loop records it
            fired.append(1)
            raise KeyboardInterrupt

    w = TraceWriter(tmp_path / "x.drift", MAN)
    monkeypatch.setattr(wmod.os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):  # raised after the shard is complete, not a FileNotFoundError
        w.add("p0", *_prompt("p0", 3, np.random.default_rng(0)))
    monkeypatch.setattr(wmod.os, "replace", real)
    w.close()
    assert not list((tmp_path / "x.drift").rglob(".*.tmp"))
    t = read_trace(tmp_path / "x.drift")
    assert t.manifest["prompts_done"] == ["p0"] and len(t.table("rounds")) == 3


def test_signals_wait_for_the_commit_then_interrupt():
    it = Interrupts()
    with it.installed():
        with pytest.raises(KeyboardInterrupt):
            with it.held():
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGINT)
                done = True  # still running: both signals are held
        assert done and not it.pending
        with pytest.raises(KeyboardInterrupt):  # outside a commit a signal interrupts at once
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is not it.handler  # restored


def test_an_error_inside_a_commit_is_not_masked_by_a_held_signal():
    it = Interrupts()
    with it.installed():
        with pytest.raises(ValueError):
            with it.held():
                os.kill(os.getpid(), signal.SIGTERM)
                raise ValueError("disk full")
    assert it.pending  # the interrupt was not lost either: the caller's next boundary would see it
