"""Progress by tokens (issue #53, item 2): piped, the capture prints a line within a long prompt (the round loop
ticks the bar) and its ETA counts tokens (prompt + new, per drafter), so prompts 50x apart in length do not make it
lie; the totals match what was captured."""

from __future__ import annotations

import io
import re

from drifttool.run import progress


def test_lines_within_a_prompt_and_an_eta_by_tokens(monkeypatch):
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(progress.time, "monotonic", lambda: float(next(clock)))
    out = io.StringIO()
    with progress.progress_bar(2, 2, stream=out, total_tokens=2 * (100 + 10) + 2 * (5000 + 10)) as bar:
        for _ in range(4):  # one long prompt: four ticks 10 s apart, a line every 30 s
            progress.tick(1000)
        bar.advance("long", 40, 2 * (5000 + 10))
        progress.tick(50)
        bar.advance("short", 5, 2 * (100 + 10))
    lines = out.getvalue().splitlines()
    assert lines[0] == "capture: 0/2 prompts (x2 drafters), 10,240 tokens to process"
    mid = [ln for ln in lines if "(in prompt 1)" in ln]
    assert mid and re.search(r"0/2 prompts .* [0-9,]+/10,240 tokens, \d+ s, [0-9.]+ tokens/s, ETA \d+ s", mid[0])
    assert lines[-1].startswith("capture: 2/2 prompts (x2 drafters), 45 rounds, 10,240/10,240 tokens") and \
        lines[-1].endswith(", done")


def test_a_real_capture_ticks_every_round_and_its_tokens_add_up(tmp_path):
    from drifttool import save_drafter
    from drifttool.model.tiny import tiny_drafter, tiny_target
    from drifttool.run.engines.hf import DrafterSpec, run_capture
    from drifttool.trace.sinks import SinkSpec
    from tests.support.capture import TINY

    t = tiny_target(**TINY)
    t.model.save_pretrained(tmp_path / "target")
    save_drafter(tiny_drafter(t, seed=1), tmp_path / "d")
    probes = tmp_path / "p.jsonl"
    probes.write_text('{"id": "a", "token_ids": [5, 6, 7, 8, 9, 10]}\n{"id": "b", "token_ids": [11, 12, 13]}\n')
    seen = []
    real = progress._Lines.tick
    progress._Lines.tick = lambda self, n: (seen.append(n), real(self, n))[1]
    try:
        out = io.StringIO()
        import contextlib

        with contextlib.redirect_stderr(out):
            run_capture(str(tmp_path / "target"), [DrafterSpec("d", str(tmp_path / "d"))], str(probes),
                        str(tmp_path / "t.drift"), depth=3, max_new_tokens=8, sink=SinkSpec.parse("first:1"), progress=True)
    finally:
        progress._Lines.tick = real
    assert seen[0] == 6 and len(seen) > 3  # the prompt's tokens, then each round's committed tokens
    last = out.getvalue().strip().splitlines()[-1]
    assert "2/2 prompts" in last and f"{(6 + 8) + (3 + 8):,}/{(6 + 8) + (3 + 8):,} tokens" in last, last
