"""Parse user-facing dtype names once; record them in one canonical spelling (`bf16` and `bfloat16` are one
setting, so a manifest written with either resumes with either)."""

from __future__ import annotations

import torch

from .errors import DriftError

_NAMES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def parse_dtype(d) -> torch.dtype:
    if isinstance(d, torch.dtype):
        return d
    try:
        return _NAMES[str(d).lower().removeprefix("torch.")]
    except KeyError:
        raise DriftError(f"--dtype: unknown dtype {d!r}; expected one of float32, bfloat16, float16") from None


def dtype_name(d) -> str:
    """Canonical name of a dtype given in any accepted spelling: float32, bfloat16 or float16."""
    return str(parse_dtype(d)).removeprefix("torch.")
