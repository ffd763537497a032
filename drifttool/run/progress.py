"""Progress display (rich): prompts done, rounds, ETA."""

from __future__ import annotations

from contextlib import contextmanager


class _Bar:
    def __init__(self, prog, task):
        self.prog, self.task, self.rounds = prog, task, 0

    def advance(self, prompt_id: str, rounds: int) -> None:
        self.rounds += rounds
        if self.prog is not None:
            self.prog.update(self.task, advance=1, description=f"{prompt_id[:28]:<28} rounds={self.rounds}")


@contextmanager
def progress_bar(n_prompts: int, n_drafters: int, enabled: bool = True):
    if not enabled:
        yield _Bar(None, None)
        return
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
    with Progress(*cols, transient=False) as prog:
        task = prog.add_task(f"capturing x{n_drafters} drafters", total=n_prompts)
        yield _Bar(prog, task)
