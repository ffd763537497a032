"""Which positions count as attention sinks: the first N positions (StreamingLLM keeps 4), explicit positions,
or every occurrence of given token ids."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

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

    def mask(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Boolean mask over sequence positions 0..L-1 given the token id at each position (the one definition
        of which positions are sinks: the capture's sink mass and the drill-down's marks both come from it)."""
        if self.target or self.auto:
            raise DriftError(f"--sink {'target' if self.target else 'auto'}: not resolved against a loaded target (the "
                             "capture engine does it)")
        length = token_ids.shape[0]
        m = torch.zeros(length, dtype=torch.bool, device=token_ids.device)
        m[: min(self.first_n, length)] = True
        for p in self.positions:
            if p < length:
                m[p] = True
        for t in self.token_ids:
            m |= token_ids == t
        return m

    def index(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Sink positions (ascending, int64) among positions 0..L-1 given the token id at each position."""
        return self.mask(token_ids).nonzero()[:, 0]

    def positions_in(self, token_ids) -> list[int]:
        """Sink positions as a list, for token ids given as a sequence (an unknown token: any negative id).
        (`positions` is the field of explicit positions, hence the name.)"""
        return self.index(torch.as_tensor(list(token_ids), dtype=torch.long)).tolist()


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
    try:
        nums = [int(x) for x in val.split(",") if x.strip()]
    except ValueError:
        raise DriftError(f"--sink {text!r}: expected integers, e.g. 4, first:4, pos:0,1 or tok:0 (auto and "
                         "target stand alone)") from None
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


def template_index(context_ids: torch.Tensor, template_ids, sink_idx: torch.Tensor) -> torch.Tensor:
    """The template key set of a round: the context slots holding one of the chat template's special tokens
    (`template_ids`, e.g. <|im_start|> / <|im_end|>), sinks excluded (int64, ascending; empty without ids)."""
    if not len(template_ids):
        return torch.zeros(0, dtype=torch.long)
    m = torch.isin(context_ids, torch.as_tensor(list(template_ids), dtype=context_ids.dtype))
    if sink_idx.numel():
        m[sink_idx[sink_idx < len(m)]] = False
    return m.nonzero()[:, 0]


RECENT = 32  # the last R context slots (the "recent" mass of the EAGLE 3.1 paper's Table 2)


def recent_index(n: int, r: int, sink_idx: torch.Tensor) -> torch.Tensor:
    """The recent key set of a round with n context slots: the last r of them (slots max(0, n - r) .. n - 1),
    sinks excluded so that the sink and recent masses never count a key twice (int64, ascending)."""
    idx = torch.arange(max(0, n - r), n, dtype=torch.long)
    if sink_idx.numel():
        idx = idx[~torch.isin(idx, sink_idx.to(idx.device))]
    return idx


def matched_index(n: int, m: int, sink_idx: torch.Tensor) -> torch.Tensor:
    """The recency-matched control's key set of a round: the last m context slots that are not sinks (ascending;
    fewer when the context has fewer). The own slots it stands in for are never sinks of the prompt, so a sink that
    happens to be recent (a token rule, a short prompt) is skipped, not counted as recency."""
    s = sink_idx.to(torch.long)
    idx = torch.arange(max(0, n - m - s.numel()), n, dtype=torch.long)
    if s.numel():
        idx = idx[~torch.isin(idx, s.to(idx.device))]
    return idx[max(0, idx.numel() - m):]

