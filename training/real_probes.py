"""Probe suites for the real target (probes/real/*.jsonl): the workloads where drift is said to hurt, at
context lengths inside (≤ 2048) and beyond the drafters' trained window, plus a short-chat control.

Long code is raw held-out standard-library source read at run time (code completion in a long file, first
token of the file at position 0); agent traces, document QA and chat are chat `messages` that drifttool
renders through the target's own chat template. Deterministic; no third-party text is shipped."""

from __future__ import annotations

import json
import random
from pathlib import Path

from .data import HELD_OUT
from .probe_gen import TOOLS, document, random_name, tool_output

CODE_CUTS = [512, 1024, 2048, 4096]
CHAT = ["How do I reverse a list in Python?", "Write a function that returns the n-th Fibonacci number.",
        "What is the difference between a process and a thread?", "Explain what a Python generator is.",
        "Write a shell command that finds all files larger than 10 MB.", "What does HTTP status 503 mean?"]


def agent_messages(seed: int, steps: int) -> list[dict[str, str]]:
    r = random.Random(seed)
    msgs = [{"role": "system", "content": "You are a coding agent. Call tools by answering with one JSON object."},
            {"role": "user", "content": f"Fix the failing test in {random_name(r)}.py and report what changed."}]
    for _ in range(steps):
        tool = r.choice(sorted(TOOLS))
        msgs.append({"role": "assistant", "content": json.dumps({"tool": tool, "arguments": TOOLS[tool](r)})})
        msgs.append({"role": "tool", "content": json.dumps(tool_output(r, tool))})
    return msgs


def suites() -> dict[str, list[dict]]:
    code_mods = [m.removesuffix(".py") for m in HELD_OUT if m in ("difflib.py", "configparser.py")]
    return {
        "long_code": [{"id": f"code-{m}", "group": f"code-{m}", "source": {"stdlib_module": m}, "cut": CODE_CUTS,
                       "tags": ["code", "held-out-stdlib"], "max_new_tokens": 40} for m in code_mods],
        # ~110 tokens per tool round trip: 5 / 12 / 26 / 36 steps ≈ 0.6k / 1.4k / 2.9k / 4k tokens
        "agent_traces": [{"id": f"agent-{n}", "group": f"agent-{n}", "messages": agent_messages(3000 + n, n), "tags": ["agent", "json"],
                          "max_new_tokens": 40} for n in (5, 12, 26, 36)],
        # 3 / 7 / 14 / 23 sections: 538 / 1186 / 2165 / 3858 tokens with the SmolLM2 chat template
        "doc_qa": [{"id": f"docqa-{n}", "group": f"docqa-{n}", "messages": [{"role": "user", "content": document(4000 + n, n)[0]}],
                    "tags": ["doc-qa"], "max_new_tokens": 32} for n in (3, 7, 14, 23)],
        "short_chat": [{"id": f"chat-{i}", "group": f"chat-{i}", "messages": [{"role": "user", "content": t}], "tags": ["short", "control"],
                        "max_new_tokens": 40} for i, t in enumerate(CHAT)],
    }


def write(out_dir: Path) -> dict[str, int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    s = suites()
    for name, rows in s.items():
        (out_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    quick = [dict(s["long_code"][0], cut=[1024, 2048]), s["agent_traces"][1], s["doc_qa"][1], s["short_chat"][0]]
    (out_dir / "quick.jsonl").write_text("".join(json.dumps(r) + "\n" for r in quick))
    # what CI reruns against the shipped drafters' stored reference numbers (small: 2 cores, no GPU)
    ci = [dict(s["long_code"][0], cut=[512], max_new_tokens=24), dict(s["agent_traces"][0], max_new_tokens=24),
          dict(s["short_chat"][0], max_new_tokens=24)]
    (out_dir / "ci.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ci))
    return {k: len(v) for k, v in s.items()}


if __name__ == "__main__":
    import sys

    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else "probes/real")))
