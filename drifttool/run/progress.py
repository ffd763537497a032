"""Progress display: a rich bar on a terminal; plain periodic lines (done/total, rate, ETA) to stderr when the
output is a file or pipe, where a bar would appear only once, at the end (a 19-minute `demo` printed nothing).

Work is counted in tokens, not prompts: a prompt costs its prompt tokens plus its new tokens, once per drafter, so
the ETA holds when prompts are 50x apart in length. Within a prompt the round loop reports each round's committed
tokens (`tick`), so a long prompt shows progress (and, piped, a line at least every PLAIN_EVERY_S) instead of
silence until it ends."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

PLAIN_EVERY_S = 30.0  # at most one plain line per this many seconds, prompt ends and mid-prompt ticks alike
_ACTIVE: list = []  # the bar of the capture running in this process (the round loop ticks it)


def tick(tokens: int) -> None:
    """`tokens` more of the current prompt done (the round loop calls it per round; nothing when no bar is open)."""
    if _ACTIVE:
        _ACTIVE[-1].tick(tokens)


class _Bar:
    def __init__(self, prog=None, task=None, total_tokens: int | None = None):
        self.prog, self.task, self.rounds = prog, task, 0
        self.total_tokens, self.tokens, self.partial = total_tokens, 0, 0
        self.t0 = time.monotonic()
        self.by_worker: dict[str, list[int]] = {}  # capture on Ray: worker -> [prompts, tokens]

    def _count_worker(self, worker: str | None, tokens: int) -> None:
        if worker is not None:
            n = self.by_worker.setdefault(worker, [0, 0])
            n[0], n[1] = n[0] + 1, n[1] + tokens

    def workers_text(self) -> str:
        """'; workers 1a2b:311 5 prompts 41 tokens/s, ...' (capture on Ray), '' otherwise."""
        el = time.monotonic() - self.t0
        if not self.by_worker or el <= 0:
            return ""
        return "; workers " + ", ".join(f"{w.rsplit(':', 1)[-1]} {n} prompts {tok / el:.3g} tokens/s"
                                        for w, (n, tok) in sorted(self.by_worker.items()))

    def tick(self, tokens: int) -> None:
        """Within a prompt: its committed tokens so far (capped at the prompt's cost when advance() settles it)."""
        self.partial += tokens
        if self.prog is not None and self.total_tokens:
            self.prog.update(self.task, completed=min(self.tokens + self.partial, self.total_tokens))

    def advance(self, prompt_id: str, rounds: int, tokens: int = 0, worker: str | None = None) -> None:
        """A prompt (with every drafter) finished: its rounds, and its cost in tokens (replaces its ticks);
        `worker`: the Ray worker that captured it (its rate is shown)."""
        self._count_worker(worker, tokens)
        self.rounds += rounds
        self.tokens += tokens
        self.partial = 0
        if self.prog is not None:
            self.prog.update(self.task, advance=None if self.total_tokens else 1,
                             completed=self.tokens if self.total_tokens else None,
                             description=f"{prompt_id[:28]:<28} rounds={self.rounds}{self.workers_text()}")


class _Lines(_Bar):
    """'capture: 3/12 prompts (x3 drafters), 41 rounds, 61,234/250,000 tokens, 412 s, 149 tokens/s, ETA 1275 s'
    lines on stderr: at each prompt's end and within a long one, at most one per `every` seconds."""

    def __init__(self, total: int, n_drafters: int, stream=None, every: float = PLAIN_EVERY_S,
                 total_tokens: int | None = None):
        super().__init__(total_tokens=total_tokens)
        self.total, self.n_drafters, self.done = total, n_drafters, 0
        self.stream = stream or sys.stderr
        self.last = self.t0
        self.every = every
        self.line(f"capture: 0/{total} prompts (x{n_drafters} drafters)"
                  + (f", {total_tokens:,} tokens to process" if total_tokens else ""))

    def line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def tick(self, tokens: int) -> None:
        self.partial += tokens
        if time.monotonic() - self.last >= self.every:
            self._report(f"in prompt {self.done + 1}")

    def advance(self, prompt_id: str, rounds: int, tokens: int = 0, worker: str | None = None) -> None:
        self._count_worker(worker, tokens)
        self.rounds += rounds
        self.done += 1
        self.tokens += tokens
        self.partial = 0
        if time.monotonic() - self.last < self.every and self.done < self.total:
            return
        self._report()

    def _report(self, where: str = "") -> None:
        now = self.last = time.monotonic()
        el = now - self.t0
        head = f"capture: {self.done}/{self.total} prompts (x{self.n_drafters} drafters), {self.rounds} rounds, "
        if self.total_tokens:
            done = min(self.tokens + self.partial, self.total_tokens)
            rate = done / el if el > 0 else float("nan")
            eta = (self.total_tokens - done) / rate if rate and rate == rate else float("nan")
            text = head + f"{done:,}/{self.total_tokens:,} tokens, {el:.0f} s, {rate:.3g} tokens/s"
        else:
            rate = self.done / el if el > 0 else float("nan")
            eta = (self.total - self.done) / rate if rate and rate == rate else float("nan")
            text = head + f"{el:.0f} s, {rate:.3g} prompts/s"
        finished = self.done >= self.total
        self.line(text + (", done" if finished else f", ETA {eta:.0f} s" if eta == eta else "")
                  + (f" ({where})" if where and not finished else "") + self.workers_text())


@contextmanager
def progress_bar(n_prompts: int, n_drafters: int, enabled: bool = True, stream=None,
                 total_tokens: int | None = None):
    """The capture's progress (`total_tokens`: the work's cost in tokens, for a token-based ETA)."""
    if not enabled:
        bar = _Bar()
    else:
        out = stream or sys.stderr
        bar = None if getattr(out, "isatty", lambda: False)() else _Lines(n_prompts, n_drafters, out,
                                                                          total_tokens=total_tokens)
    if bar is not None:
        _ACTIVE.append(bar)
        try:
            yield bar
        finally:
            _ACTIVE.remove(bar)
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

    unit = "tokens" if total_tokens else "prompts"
    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*cols, transient=False, console=Console(file=out)) as prog:
        task = prog.add_task(f"capturing x{n_drafters} drafters", total=total_tokens or n_prompts)
        bar = _Bar(prog, task, total_tokens)
        _ACTIVE.append(bar)
        try:
            yield bar
        finally:
            _ACTIVE.remove(bar)


class _Beat:
    """What `still_running` says: the command's label and its current stage (the caller sets `stage`)."""

    def __init__(self, label: str, stage: str = ""):
        self.label, self.stage = label, stage


@contextmanager
def still_running(label: str, every: float | None = None, stream=None):
    """A line on stderr at least every `every` seconds (PLAIN_EVERY_S) while the block runs — `conform: still
    running, 62 s (the engine's drafts)` — for commands with no per-prompt bar (conform printed nothing for 460 s).
    Yields an object whose `stage` the caller may update; nothing is printed once the block ends."""
    import threading

    beat, done = _Beat(label), threading.Event()
    out, wait = stream or sys.stderr, PLAIN_EVERY_S if every is None else every
    t0 = time.monotonic()

    def loop() -> None:
        while not done.wait(wait):
            stage = f" ({beat.stage})" if beat.stage else ""
            print(f"{beat.label}: still running, {time.monotonic() - t0:.0f} s{stage}", file=out, flush=True)

    th = threading.Thread(target=loop, name=f"drifttool-{label}-progress", daemon=True)
    th.start()
    try:
        yield beat
    finally:
        done.set()
        th.join(5)
