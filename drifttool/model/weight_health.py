"""What a drafter checkpoint's weights say about its training, beyond its config: faults no header shows.

A checkpoint can declare `fc_norm` and `norm_output` while the norms behind them learned nothing: RMSNorm weights
that never move under bf16 training stay bit-exactly 1.0 (found "debugging an eagle3.1 checkpoint": speculators
PRs #765, #668; Model-Optimizer #2322 saw 78 % of q/k-norm entries still exactly 1.0 at step 56,000). Read from
the tensors themselves (safetensors only; nothing is built):

- `norm_never_trained` (warning): every entry of an RMSNorm weight exactly 1.0 (its initial value);
- `norm_barely_moved` (warning): no entry further from 1.0 than 4 units in the last place of the stored dtype
  (bf16: 2^-5 = 0.031; fp32: 4.8e-7) — moved by rounding, not by learning;
- `norm_mostly_untouched` (info): half or more of the entries exactly 1.0;
- `nonfinite_weights` (error): NaN or Inf anywhere;
- `zero_rows` (warning): all-zero rows in fc, lm_head or the embeddings (a token or feature the drafter cannot use);
- `vocab_mapping` (error): d2t sending a draft id outside the target vocabulary or two draft ids to one target
  id, or t2d disagreeing with it.
Bundled drafters pass (tested), and a freshly initialised drafter fails the norm checks."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from .findings import Finding

NORM = re.compile(r"(?:^|\.)(?:[a-z_]*norm)(?:\.\d+)?\.weight$")
ROWS = re.compile(r"(?:^|\.)(?:fc|lm_head|embed_tokens)\.weight$")
ULPS = 4


def _tensors(folder: Path):
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for name in h.keys():
                yield name, h.get_tensor(name)


def _norm_findings(name: str, w: torch.Tensor) -> list[Finding]:
    x = w.float()
    ones = float((x == 1).float().mean())
    dev = float((x - 1).abs().max())
    ulp = ULPS * float(torch.finfo(w.dtype).eps)  # eps is the ulp just above 1.0
    if ones == 1.0:
        return [Finding("norm_never_trained", "warning", f"{name}: every entry is exactly 1.0 (its initial value): "
                        "this norm learned nothing (bf16 updates below its precision, or a frozen parameter)")]
    if dev <= ulp:
        return [Finding("norm_barely_moved", "warning", f"{name}: no entry further than {dev:.2g} from 1.0 "
                        f"(<= {ULPS} ulp of {str(w.dtype).removeprefix('torch.')}): moved by rounding, not by "
                        "learning")]
    if ones >= 0.5:
        return [Finding("norm_mostly_untouched", "info", f"{name}: {ones:.0%} of its entries exactly 1.0")]
    return []


def _vocab(d2t: torch.Tensor | None, t2d: torch.Tensor | None) -> list[Finding]:
    out = []
    if d2t is None:
        return out
    ids = torch.arange(d2t.numel()) + d2t.long()
    vocab = t2d.numel() if t2d is not None else None
    if ids.min() < 0 or (vocab is not None and ids.max() >= vocab):
        out.append(Finding("vocab_mapping", "error", f"d2t maps draft ids to target ids {int(ids.min())}.."
                           f"{int(ids.max())}, outside the target vocabulary [0, {vocab})"))
    dup = int(ids.numel() - ids.unique().numel())
    if dup:
        out.append(Finding("vocab_mapping", "error", f"d2t maps {dup} draft ids onto a target id another draft id "
                           "already has: not one-to-one"))
    if t2d is not None and not out:
        if int(t2d.bool().sum()) != d2t.numel() or not bool(t2d.bool()[ids].all()):
            out.append(Finding("vocab_mapping", "error", f"t2d marks {int(t2d.bool().sum())} target ids, d2t maps "
                               f"{d2t.numel()} (or to others): the two maps disagree"))
    return out


def weight_findings(folder: str | Path) -> list[Finding]:
    """The findings above for a drafter folder's safetensors (every tensor read once)."""
    out: list[Finding] = []
    d2t = t2d = None
    for name, w in _tensors(Path(folder)):
        if name.endswith("d2t"):
            d2t = w
            continue
        if name.endswith("t2d"):
            t2d = w
            continue
        if not w.is_floating_point():
            continue
        bad = int((~torch.isfinite(w)).sum())
        if bad:
            out.append(Finding("nonfinite_weights", "error", f"{name}: {bad} NaN or Inf entries"))
            continue
        if NORM.search(name) and w.dim() == 1:
            out += _norm_findings(name, w)
        elif ROWS.search(name) and w.dim() == 2:
            zero = int((w == 0).all(dim=1).sum())
            if zero:
                out.append(Finding("zero_rows", "warning", f"{name}: {zero} of {w.shape[0]} rows are all zero"))
    return out + _vocab(d2t, t2d)
