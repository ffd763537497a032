"""The monitor's lines in the server's log: a failure that repeats (a full disk fails every request and every
snapshot) is told once per kind, then at most once a minute with how many more there were, so the log says what
happened without flooding vLLM's own lines."""

from __future__ import annotations

import sys
import time

PREFIX = "drifttool monitor: "


class OncePerKind:
    """`tell(kind, line)`: the first line of a kind at once, later ones of that kind at most every `every` seconds
    (with the count of those held back)."""

    def __init__(self, every: float = 60.0):
        self.every = every
        self.seen: dict[str, tuple[float, int]] = {}

    def tell(self, kind: str, line: str) -> bool:
        """True when the line was printed."""
        now = time.monotonic()
        last, held = self.seen.get(kind, (None, 0))
        if last is not None and now - last < self.every:
            self.seen[kind] = (last, held + 1)
            return False
        more = f" ({held} more like it in the last {now - last:.0f} s)" if held and last is not None else ""
        print(PREFIX + line + more, file=sys.stderr, flush=True)
        self.seen[kind] = (now, 0)
        return True
