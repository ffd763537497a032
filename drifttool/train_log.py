"""Drift while a drafter trains: every `every` steps (and at step 0) the drafter under training drafts a fixed,
small probe set through drifttool's own capture (no grad, its train/eval mode restored after), and the per-depth
quantities are logged under `drift/...` names into the trainer's own logger, and each evaluation appended to a
trace series (`DIR/step-NNNNNNN.drift`, drafter `NAME@STEP`) that `compare` and the dashboard's Training page read
as they read checkpoint series. The numbers are those of an offline `drifttool capture` of the same weights on the
same probes: the same capture code writes the trace and `summary` reads it.

`DriftLogger` is the core; `DriftCallback` plugs it into a Hugging Face `Trainer` (its `log`, so TensorBoard,
W&B or any `report_to` integration receives the keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import DriftError
from .trace.metric_table import acceptance_length

PREFIX = "drift/"


def summary(depths: pd.DataFrame, heads: pd.DataFrame | None = None) -> dict[str, float]:
    """The logged scalars of one evaluation, from its depth rows (and per-head rows for the non-sink recency
    ratio), pooled over every drafted token as the live monitor pools them: per depth k the recency-matched ratio
    (own drafts over equally recent prompt tokens, non-sink shares; depths >= 2), sink lift, sink retention (mean
    sink mass at k over depth 1), fed-back RMS growth (mean layer-input RMS at k over depth 1) and acceptance rate
    (accepted drafts at k per drafted round); and the acceptance length."""
    from .analysis.nonsink import with_nonsink

    d = with_nonsink(depths, heads) if heads is not None and len(heads) else depths
    out: dict[str, float] = {}
    by = d.groupby("depth")
    first = by.get_group(1) if 1 in by.groups else None
    for k, rows in by:
        k = int(k)
        out[f"{PREFIX}acceptance_rate/d{k}"] = float(rows["accepted"].astype(bool).mean())
        out[f"{PREFIX}sink_lift/d{k}"] = _mean(rows, "sink_lift")
        if first is not None:
            out[f"{PREFIX}sink_retention/d{k}"] = _ratio(_mean(rows, "sink_mass"), _mean(first, "sink_mass"))
            out[f"{PREFIX}rms_growth/d{k}"] = _ratio(_mean(rows, "rms_in"), _mean(first, "rms_in"))
        if k >= 2 and {"self_ns", "matched_ns"} <= set(rows.columns):
            a, b = rows["self_ns"].to_numpy(np.float64), rows["matched_ns"].to_numpy(np.float64)
            both = np.isfinite(a) & np.isfinite(b)
            out[f"{PREFIX}recency_ratio/d{k}"] = _ratio(float(a[both].sum()), float(b[both].sum()))
    per_round = d.groupby(["prompt_id", "round"], observed=True)["accepted"].sum()
    out[f"{PREFIX}acceptance_length"] = float(acceptance_length(per_round.sum(), len(per_round)))
    return out


def _mean(rows: pd.DataFrame, col: str) -> float:
    if col not in rows:
        return float("nan")
    v = rows[col].to_numpy(np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else float("nan")


def _ratio(a: float, b: float) -> float:
    return a / b if np.isfinite(a) and np.isfinite(b) and b > 0 else float("nan")


class DriftLogger:
    """One probe set, one target, one cadence. `evaluate(drafter, step)` runs the probes and returns the
    `drift/...` scalars (and writes `series/step-NNNNNNN.drift` when a series folder is given)."""

    def __init__(self, target, probes: list, depth: int = 4, every: int = 100, max_new_tokens: int = 32,
                 mode: str = "teacher-forced", series: str | Path | None = None, name: str = "drafter"):
        from .model.target import load_target

        if not probes:
            raise DriftError("probes: empty; expected a few prompts (token id lists or text)")
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise DriftError(f"every: {every!r}; expected a whole number of steps >= 1")
        self.target = load_target(target)
        self.probes, self.depth, self.every = list(probes), depth, every
        self.max_new_tokens, self.mode, self.name = max_new_tokens, mode, name
        self.series = Path(series) if series is not None else None
        self.history: list[tuple[int, dict[str, float]]] = []

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def evaluate(self, drafter, step: int) -> dict[str, float]:
        """The probes drafted by `drafter` as it is now (no grad; its mode restored afterwards)."""
        import torch

        from .live_api import LiveCapture

        was_training = drafter.training
        drafter.eval()
        try:
            with torch.no_grad(), LiveCapture(self.target, drafter, depth=self.depth, mode=self.mode,
                                              max_new_tokens=self.max_new_tokens,
                                              name=f"{self.name}@{step}") as cap:
                for i, p in enumerate(self.probes):
                    cap.run(p, prompt_id=f"probe-{i}")
                if self.series is not None:
                    cap.to_trace(self.series / f"step-{step:07d}.drift", overwrite=True)
                out = summary(cap.depths, cap.heads)
        finally:
            drafter.train(was_training)
        self.history.append((step, out))
        return out


def hf_callback(logger: DriftLogger, drafter_of=None) -> Any:
    """A `transformers.TrainerCallback` running `logger` at step 0 and every `logger.every` steps on the model under
    training (`drafter_of(model)` picks the drafter out of a wrapper; default: the model itself), logging through
    the Trainer. Add it with `attach(trainer, logger)` (the callback needs the Trainer to log through)."""
    from transformers import TrainerCallback

    class DriftCallback(TrainerCallback):
        """drifttool's drift logger inside a Hugging Face Trainer (train_log.DriftLogger)."""

        def __init__(self):
            self.trainer = None
            self.logger = logger

        def _run(self, model, step: int) -> None:
            drafter = drafter_of(model) if drafter_of is not None else model
            metrics = logger.evaluate(drafter, step)
            if self.trainer is not None:
                self.trainer.log({k: v for k, v in metrics.items() if np.isfinite(v)})

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step == 0 and model is not None:
                self._run(model, 0)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if model is not None and logger.due(state.global_step):
                self._run(model, state.global_step)

    return DriftCallback()


def attach(trainer, logger: DriftLogger, drafter_of=None) -> Any:
    """`logger` as a callback of a Hugging Face `trainer`; returns the callback."""
    cb = hf_callback(logger, drafter_of)
    cb.trainer = trainer
    trainer.add_callback(cb)
    return cb
