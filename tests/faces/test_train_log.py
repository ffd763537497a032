"""The drift logger inside a real Hugging Face Trainer (issue #64, item 1): a tiny drafter trains for a few steps
with `train_log.attach(trainer, DriftLogger(...))`; the `drift/...` keys reach the Trainer's own log (step 0 and
every `every` steps), each evaluation is a trace of the series (`NAME@STEP`), the drafter's train mode is
restored, and the last logged numbers equal an offline `drifttool capture` of the trained weights on the same
probes (the CLI in a fresh process, read back and summarised)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import drifttool as dt
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.train_log import DriftLogger, attach
from tests.support.capture import TINY, offline_drift_summary, prompt

transformers = pytest.importorskip("transformers")


class Objective(nn.Module):
    """A loss over the drafter's fc and decoder layer (any loss will do: the logger reads the weights as they are)."""

    def __init__(self, drafter):
        super().__init__()
        self.drafter = drafter

    def forward(self, x, y):
        h = self.drafter.fc(x)
        return {"loss": ((h - y) ** 2).mean()}


def test_the_logger_runs_inside_the_trainer_and_equals_an_offline_capture(tmp_path):
    t = tiny_target(**TINY)
    t.model.save_pretrained(tmp_path / "target")
    d = tiny_drafter(t, seed=1)
    probes = [prompt(11, 20), prompt(12, 24)]
    logger = DriftLogger(t, probes, depth=3, every=2, max_new_tokens=8, series=tmp_path / "series", name="e3")
    g = torch.Generator().manual_seed(0)
    fc_in = d.fc.in_features
    data = [{"x": torch.randn(fc_in, generator=g), "y": torch.randn(TINY["hidden"], generator=g)} for _ in range(16)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=4,
                                          learning_rate=0.05, report_to=[], logging_steps=1000, save_strategy="no",
                                          remove_unused_columns=False, use_cpu=True, disable_tqdm=True)
    trainer = transformers.Trainer(model=Objective(d), args=args, train_dataset=data)
    attach(trainer, logger, drafter_of=lambda m: m.drafter)
    before = d.fc.weight.detach().clone()
    trainer.train()
    assert not torch.equal(before, d.fc.weight)  # it did train
    assert d.training  # the Trainer's mode, restored after each evaluation
    assert [s for s, _ in logger.history] == [0, 2, 4]
    logged = [h for h in trainer.state.log_history if any(k.startswith("drift/") for k in h)]
    assert [h["step"] for h in logged] == [0, 2, 4]
    last = logged[-1]
    assert {"drift/acceptance_length", "drift/rms_growth/d3", "drift/recency_ratio/d2",
            "drift/acceptance_rate/d1"} <= set(last)
    series = sorted(p.name for p in (tmp_path / "series").iterdir())
    assert series == ["step-0000000.drift", "step-0000002.drift", "step-0000004.drift"]
    assert dt.load(tmp_path / "series" / series[-1]).drafters == ["e3@4"]
    # offline: the trained weights saved, captured by the CLI on the same probes with the same settings
    dt.save_drafter(d, tmp_path / "trained")
    want = offline_drift_summary(tmp_path, tmp_path / "target", tmp_path / "trained", probes)
    got = {k: v for k, v in logger.history[-1][1].items()}
    assert set(want) == set(got)
    assert sum(math.isfinite(v) for v in got.values()) >= len(got) - 1, got  # numbers, not NaNs compared
    for k, v in want.items():  # float32 captures of the same weights: equal to float32 resolution
        assert (math.isnan(v) and math.isnan(got[k])) or got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
