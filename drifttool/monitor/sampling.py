"""Which requests the live monitor records. A uniform sample (a hash of the request id under `sample`) measures the
traffic as it is; beside it two selections keep what a uniform 1 % misses: at least one request every `every`
seconds (so a quiet or low-sample server never measures nothing: at 1 % about 7.6 % of 256-request runs replay
nothing) and every request whose prompt has at least `long` tokens (long contexts, where drift is expected).
Each request is decided once, at its first sight, and carries its reason (`uniform`, `cadence`, `long`) into its
segment (the prompt's tags, `sample:REASON`), so a statistic can tell a selected sample from a uniform one."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

REASONS = ("uniform", "cadence", "long")
MEMO = 65536  # decisions kept for requests not finished yet (the oldest forgotten beyond this)


def uniform(request_id: str, fraction: float) -> bool:
    """The uniform rule: a hash of the request's id under `fraction` (the same answer in every hook)."""
    if fraction >= 1:
        return True
    return int(hashlib.sha1(request_id.encode()).hexdigest()[:8], 16) < fraction * 2**32


class Sampler:
    """`keep(rid, prompt_len)` decides once per request (later calls return the same answer); `reason(rid)` says
    why it was kept (None: not kept); `finish(rid)` forgets it and returns that reason."""

    def __init__(self, fraction: float, every: float = 0.0, long: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.fraction, self.every, self.long, self.clock = fraction, every, long, clock
        self.decided: OrderedDict[str, str | None] = OrderedDict()
        self.last_kept: float | None = None

    def keep(self, rid: str, prompt_len: Callable[[], int | None] | None = None) -> bool:
        if rid not in self.decided:
            self.decided[rid] = self._decide(rid, prompt_len)
            while len(self.decided) > MEMO:
                self.decided.popitem(last=False)
        return self.decided[rid] is not None

    def _decide(self, rid: str, prompt_len: Callable[[], int | None] | None) -> str | None:
        now = self.clock()
        why = None
        if uniform(rid, self.fraction):
            why = "uniform"
        elif self.long and prompt_len is not None and (prompt_len() or 0) >= self.long:
            why = "long"
        elif self.every and (self.last_kept is None or now - self.last_kept >= self.every):
            why = "cadence"
        if why is not None:
            self.last_kept = now
        return why

    def reason(self, rid: str) -> str | None:
        return self.decided.get(rid)

    def finish(self, rid: str) -> str | None:
        return self.decided.pop(rid, None)
