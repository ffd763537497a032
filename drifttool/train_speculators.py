"""drifttool's drift logger (train_log.DriftLogger) inside speculators' trainer (`speculators.train.trainer.Trainer`,
the `speculators` package, EAGLE-3 drafters).

speculators' Trainer logs what its model's forward returns: `(draft_tokens, loss, metrics)`, the metrics summed over
ranks, divided by the world size and handed to its metric logger (TensorBoard, W&B, Trackio) under `train/` on the
steps where `global_step % log_freq == 0`. `attach_speculators` wraps the model's forward so that on those steps,
when the drift logger is due, the `drift/...` scalars join the returned metrics as 0-dim tensors: they travel the
trainer's own reduction and logger. Every rank evaluates the same probes on the same weights, so the cross-rank
mean is the value itself. The scalars logged at step s describe the weights step s's forward ran with (before its
optimizer update), the same weights its loss describes.

The drafter the logger drafts with is the model as speculators saves it: `to_drafter` writes it with its own
`save_pretrained` into a temporary folder and reads it back with drifttool's checkpoint loader, exactly the path an
offline `drifttool capture` of that checkpoint takes (so the logged numbers are the offline capture's). One
process or DDP (the module under `.module`); an FSDP-sharded model would need its full state dict gathered first,
which this adapter does not do."""

from __future__ import annotations

import tempfile
from typing import Any

from .errors import DriftError
from .train_log import DriftLogger


def unwrap(model):
    """The speculators model inside a DDP (or compile) wrapper."""
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):
        model = getattr(model, "module", None) or model._orig_mod
    return model


def to_drafter(model, target=None):
    """A speculators EAGLE-3 model as drifttool's drafter, through its own checkpoint format (module doc)."""
    from .model.checkpoint import load_drafter

    m = unwrap(model)
    if not hasattr(m, "save_pretrained"):
        raise DriftError(f"speculators: {type(m).__name__} has no save_pretrained; expected a speculators model")
    with tempfile.TemporaryDirectory(prefix="drifttool-spec-") as d:
        m.save_pretrained(d)
        return load_drafter(d, target)


def drift_metrics(model, logger: DriftLogger, step: int) -> dict[str, Any]:
    """The logger's `drift/...` scalars for `model` as it is now, as float32 0-dim tensors on its device."""
    import torch

    vals = logger.evaluate(to_drafter(model, logger.target), step)
    device = next(unwrap(model).parameters()).device
    return {k: torch.tensor(float(v), dtype=torch.float32, device=device) for k, v in vals.items()}


def attach_speculators(trainer, logger: DriftLogger) -> None:
    """Put `logger` into a speculators `trainer` (module doc): its model's forward, in training mode at a logged
    step (`trainer.global_step % trainer.config.log_freq == 0`) where the logger is due, returns the drift scalars
    with its own metrics. `logger.every` must be a multiple of the trainer's `log_freq` (else some evaluations
    would never be logged)."""
    log_freq = int(getattr(getattr(trainer, "config", None), "log_freq", 1) or 1)
    if logger.every % log_freq:
        raise DriftError(f"drift logger: every={logger.every} is not a multiple of the trainer's log_freq={log_freq}; "
                         "its evaluations would not all reach the trainer's logger")
    wrap_forward(trainer.model, logger, lambda: trainer.global_step, log_freq)


def wrap_forward(model, logger: DriftLogger, step_of, log_freq: int = 1) -> None:
    """`model.forward` returning the drift scalars with its metrics on training calls where `step_of()` is a logged,
    due step (attach_speculators; tests call it with their own step counter)."""
    m = unwrap(model)
    orig = m.forward

    def forward(*args, **kwargs):
        out = orig(*args, **kwargs)
        step = int(step_of())
        if m.training and step % log_freq == 0 and logger.due(step) and isinstance(out, tuple) and len(out) == 3:
            draft, loss, metrics = out
            metrics = {**metrics, **drift_metrics(m, logger, step)}
            return draft, loss, metrics
        return out

    m.forward = forward
