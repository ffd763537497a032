"""Which positions count as attention sinks: the first N positions (StreamingLLM keeps 4), explicit positions,
or every occurrence of given token ids."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from .errors import DriftError


@dataclass
class SinkSpec:
    first_n: int = 4
    positions: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def parse(cls, text: str | None) -> SinkSpec:
        """'4' | 'first:4' | 'pos:0,1,7' | 'tok:0,2' (combinable with ';')."""
        if text is None or str(text).strip() == "":
            return cls()
        spec = cls(first_n=0)
        for part in str(text).split(";"):
            part = part.strip()
            kind, _, val = part.partition(":") if ":" in part else ("first", "", part)
            try:
                nums = [int(x) for x in val.split(",") if x.strip()]
            except ValueError:
                raise DriftError(f"--sink {text!r}: expected integers, e.g. 4, first:4, pos:0,1 or tok:0") from None
            if any(n < 0 for n in nums):
                raise DriftError(f"--sink {text!r}: values must be >= 0")
            if kind == "first" and len(nums) == 1:
                spec.first_n = nums[0]
            elif kind == "pos":
                spec.positions = nums
            elif kind == "tok":
                spec.token_ids = nums
            else:
                raise DriftError(f"--sink {text!r}: expected first:N, pos:i,j,... or tok:id,...")
        return spec

    def mask(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Boolean mask over sequence positions 0..L-1 given the token id at each position."""
        length = token_ids.shape[0]
        m = torch.zeros(length, dtype=torch.bool, device=token_ids.device)
        m[: min(self.first_n, length)] = True
        for p in self.positions:
            if p < length:
                m[p] = True
        for t in self.token_ids:
            m |= token_ids == t
        return m
