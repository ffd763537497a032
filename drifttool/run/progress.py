"""Progress display: a rich bar on a terminal; plain periodic lines (done/total, rate, ETA) to stderr when the
output is a file or pipe, where a bar would appear only once, at the end (a 19-minute `demo` printed nothing)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

PLAIN_EVERY_S = 30.0  # at most one plain line per this many seconds (and one per prompt when prompts are slower)


class _Bar:
    def __init__(self, prog, task):
        self.prog, self.task, self.rounds = prog, task, 0

    def advance(self, prompt_id: str, rounds: int) -> None:
        self.rounds += rounds
        if self.prog is not None:
            self.prog.update(self.task, advance=1, description=f"{prompt_id[:28]:<28} rounds={self.rounds}")


class _Lines(_Bar):
    """'capture: 3/12 prompts (x3 drafters), 41 rounds, 0.21 prompts/s, ETA 43 s' lines on stderr."""

    def __init__(self, total: int, n_drafters: int, stream=None, every: float = PLAIN_EVERY_S):
        super().__init__(None, None)
        self.total, self.n_drafters, self.done = total, n_drafters, 0
        self.stream = stream or sys.stderr
        self.t0 = self.last = time.monotonic()
        self.every = every
        self.line(f"capture: 0/{total} prompts (x{n_drafters} drafters)")

    def line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def advance(self, prompt_id: str, rounds: int) -> None:
        self.rounds += rounds
        self.done += 1
        now = time.monotonic()
        if now - self.last < self.every and self.done < self.total:
            return
        self.last = now
        el = now - self.t0
        rate = self.done / el if el > 0 else float("nan")
        eta = (self.total - self.done) / rate if rate and rate == rate else float("nan")
        self.line(f"capture: {self.done}/{self.total} prompts (x{self.n_drafters} drafters), {self.rounds} rounds, "
                  f"{el:.0f} s, {rate:.3g} prompts/s" + (f", ETA {eta:.0f} s" if self.done < self.total else ", done"))


@contextmanager
def progress_bar(n_prompts: int, n_drafters: int, enabled: bool = True, stream=None):
    if not enabled:
        yield _Bar(None, None)
        return
    out = stream or sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        yield _Lines(n_prompts, n_drafters, out)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("prompts"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*cols, transient=False, console=Console(file=out)) as prog:
        task = prog.add_task(f"capturing x{n_drafters} drafters", total=n_prompts)
        yield _Bar(prog, task)
