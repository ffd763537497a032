"""Which positions count as attention sinks: the first N positions (StreamingLLM keeps 4), explicit positions,
or every occurrence of given token ids."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ..errors import DriftError


@dataclass
class SinkSpec:
    first_n: int = 4
    positions: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    target: bool = False  # `--sink target`: the target's own sink positions, resolved when the target is loaded
    # `--sink auto` (the capture's default): `target` where the engine can read the target's attention and the rule
    # finds a sink, else the first 4 positions; resolved by the engine, which records what it used and why
    auto: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("target", "auto"):  # recorded only when asked for: older traces keep their settings hash
            if not d[k]:
                d.pop(k)
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> SinkSpec:
        """Inverse of to_dict (a manifest's capture.sink); None: the default (first 4 positions)."""
        if d is None:
            return cls()
        return cls(first_n=int(d.get("first_n", 0)), positions=[int(p) for p in d.get("positions", [])],
                   token_ids=[int(t) for t in d.get("token_ids", [])], target=bool(d.get("target", False)),
                   auto=bool(d.get("auto", False)))

    @classmethod
    def parse(cls, text: str | None) -> SinkSpec:
        """'4' | 'first:4' | 'pos:0,1,7' | 'tok:0,2' (combinable with ';') | 'target' (the positions the target itself
        attends as sinks, found when it is loaded: model/target_sinks.py). A repeated pos: or tok: part merges with
        the earlier ones (`pos:1;pos:7` is positions [1, 7]); a repeated first:N, an empty list (`pos:`) or an
        empty part is refused (never kept as the last value, never read as "no sink")."""
        if text is None or str(text).strip() == "":
            return cls()
        if str(text).strip().lower() == "target":
            return cls(first_n=0, target=True)
        if str(text).strip().lower() == "auto":
            return cls(first_n=4, auto=True)
        spec, seen = cls(first_n=0), set()
        for part in str(text).split(";"):
            kind, nums = _sink_part(text, part.strip())
            if kind == "first":
                if "first" in seen:
                    raise DriftError(f"--sink {text!r}: gives 'first' twice; give the first-N sink count once")
                spec.first_n = nums[0]
            elif kind == "pos":
                spec.positions = _merged(spec.positions, nums)
            else:
                spec.token_ids = _merged(spec.token_ids, nums)
            seen.add(kind)
        return spec

    def positions_in(self, token_ids) -> list[int]:
        """Sink positions (ascending) among positions 0..L-1 given the token id at each position (an unknown
        token: any negative id) — the one definition of which positions are sinks: the capture's sink mass
        (`mask` / `index` on tensors) and the drill-down's marks both come from it. (`positions` is the field of
        explicit positions, hence the name.)"""
        if self.target or self.auto:
            raise DriftError(f"--sink {'target' if self.target else 'auto'}: not resolved against a loaded target (the "
                             "capture engine does it)")
        ids = [int(t) for t in token_ids]
        toks = set(self.token_ids)
        first, pos = min(self.first_n, len(ids)), set(self.positions)
        return [i for i, t in enumerate(ids) if i < first or i in pos or t in toks]

    def mask(self, token_ids):
        """Boolean mask over positions 0..L-1: positions_in's rule, vectorised for the capture's every round
        (tests/package/test_one_definition_per_concept.py holds the two equal). A numpy array of ids gives a numpy
        mask, a torch tensor a torch mask on its device."""
        self.positions_in([])  # an unresolved target / auto rule is refused the same way
        if not _is_torch(token_ids):
            import numpy as np

            m = np.zeros(len(token_ids), dtype=bool)
            m[self.index(token_ids)] = True
            return m
        import torch

        length = token_ids.shape[0]
        m = torch.zeros(length, dtype=torch.bool, device=token_ids.device)
        m[: min(self.first_n, length)] = True
        pos = [p for p in self.positions if p < length]
        if pos:
            m[pos] = True
        if self.token_ids:
            m |= torch.isin(token_ids, torch.as_tensor(self.token_ids, dtype=token_ids.dtype, device=token_ids.device))
        return m

    def index(self, token_ids):
        """Sink positions (ascending int64) given the token id at each position: a numpy array for numpy ids (the
        capture's every round: a rule without token ids never reads them), a torch tensor for a tensor."""
        if _is_torch(token_ids):
            return self.mask(token_ids).nonzero()[:, 0]
        import numpy as np

        self.positions_in([])
        length = len(token_ids)
        fixed = sorted({*range(min(self.first_n, length)), *(p for p in self.positions if p < length)})
        if not self.token_ids:
            return np.array(fixed, dtype=np.int64)
        m = np.isin(np.asarray(token_ids), self.token_ids)
        m[fixed] = True
        return np.flatnonzero(m).astype(np.int64)


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _merged(have: list[int], new: list[int]) -> list[int]:
    """`have` then the values of `new` not in it yet (the order given: a trace's recorded rule stays as typed)."""
    out = list(have)
    for n in new:
        if n not in out:
            out.append(n)
    return out


def _sink_part(text: str, part: str) -> tuple[str, list[int]]:
    """One ';'-separated part of a --sink rule: its kind (first / pos / tok) and its non-empty list of integers."""
    if not part:
        raise DriftError(f"--sink {text!r}: has an empty part (a stray ';'); expected first:N, pos:i,j or tok:id")
    kind, _, val = part.partition(":") if ":" in part else ("first", "", part)
    kind = kind.strip()
    raw = [x.strip() for x in val.split(",") if x.strip()]
    # ASCII digits, at most 9 of them (a position or token id a model can have): int() reads '٣' as 3, and
    # first:99999999999999999999 was a traceback when the capture built its mask
    if not all(re.fullmatch(r"-?[0-9]{1,9}", x) for x in raw):
        raise DriftError(f"--sink {text!r}: expected integers of at most 9 digits (0-9), e.g. 4, first:4, pos:0,1 "
                         "or tok:0 (auto and target stand alone)")
    nums = [int(x) for x in raw]
    if any(n < 0 for n in nums):
        raise DriftError(f"--sink {text!r}: values must be >= 0")
    if kind == "first" and len(nums) != 1:
        raise DriftError(f"--sink {text!r}: expected first:N with one count N, e.g. first:4")
    if kind in ("pos", "tok") and not nums:
        raise DriftError(f"--sink {text!r}: '{kind}:' lists no {'positions' if kind == 'pos' else 'token ids'}; "
                         f"expected e.g. {kind}:0,1 (for no sink at all: first:0)")
    if kind not in ("first", "pos", "tok"):
        raise DriftError(f"--sink {text!r}: expected first:N, pos:i,j,..., tok:id,... or target")
    return kind, nums


RECENT = 32  # the last R context slots (the "recent" mass of the EAGLE 3.1 paper's Table 2)

