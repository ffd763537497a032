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

CODE_CUTS = [512, 1024, 2048, 4096]  # the first bundled suites' cuts (quick.jsonl and ci.jsonl keep them)
CHAT = ["How do I reverse a list in Python?", "Write a function that returns the n-th Fibonacci number.",
        "What is the difference between a process and a thread?", "Explain what a Python generator is.",
        "Write a shell command that finds all files larger than 10 MB.", "What does HTTP status 503 mean?"]

# Powered suites: 24 independent source documents per long suite (each its own group), contexts from 512 to
# 7936 tokens (SmolLM2 has 8192 positions; 7936 + 32 new tokens + the depth fit), inside and beyond the
# drafters' 4096-token trained window. Long code: the 12 held-out stdlib modules of >= 8k tokens and 12 files of
# the stdlib's test package (training skips every test directory), each cut once inside and once beyond.
GROUPS = 24
CODE_TESTS = ("test_ast", "test_buffer", "test_builtin", "test_bytes", "test_codecs", "test_collections",
              "test_descr", "test_enum", "test_functools", "test_itertools", "test_re", "test_typing")
SHORT_MODULES = ("calendar.py", "gettext.py", "textwrap.py")  # held out, but under 8k tokens
INSIDE = (512, 1024, 2048, 4096)
BEYOND = (6144, 7936)
# ~110 tokens per agent tool round trip, ~168 per design-notes section (SmolLM2 chat template): six lengths
# from ~0.5k to ~7.7k tokens, four documents each
AGENT_STEPS = (4, 9, 18, 36, 54, 70)
DOC_SECTIONS = (3, 6, 12, 23, 35, 46)


def agent_messages(seed: int, steps: int) -> list[dict[str, str]]:
    r = random.Random(seed)
    msgs = [{"role": "system", "content": "You are a coding agent. Call tools by answering with one JSON object."},
            {"role": "user", "content": f"Fix the failing test in {random_name(r)}.py and report what changed."}]
    for _ in range(steps):
        tool = r.choice(sorted(TOOLS))
        msgs.append({"role": "assistant", "content": json.dumps({"tool": tool, "arguments": TOOLS[tool](r)})})
        msgs.append({"role": "tool", "content": json.dumps(tool_output(r, tool))})
    return msgs


def code_modules() -> list[str]:
    """The 24 long-code documents as dotted stdlib names: held-out modules first, then test files."""
    mods = [m.removesuffix(".py") for m in HELD_OUT if m not in SHORT_MODULES]
    return mods + [f"test.{t}" for t in CODE_TESTS]


def first_suites() -> dict[str, list[dict]]:
    """The first (underpowered) suites: 2 code files, 4 agent traces, 4 documents. quick.jsonl and ci.jsonl are
    cut from them, so the demo and CI's stored reference numbers stay what they were."""
    code_mods = [m.removesuffix(".py") for m in HELD_OUT if m in ("difflib.py", "configparser.py")]
    return {
        "long_code": [{"id": f"code-{m}", "group": f"code-{m}", "source": {"stdlib_module": m}, "cut": CODE_CUTS,
                       "tags": ["code", "held-out-stdlib"], "max_new_tokens": 40} for m in code_mods],
        "agent_traces": [{"id": f"agent-{n}", "group": f"agent-{n}", "messages": agent_messages(3000 + n, n), "tags": ["agent", "json"],
                          "max_new_tokens": 40} for n in (5, 12, 26, 36)],
        "doc_qa": [{"id": f"docqa-{n}", "group": f"docqa-{n}", "messages": [{"role": "user", "content": document(4000 + n, n)[0]}],
                    "tags": ["doc-qa"], "max_new_tokens": 32} for n in (3, 7, 14, 23)],
        "short_chat": [{"id": f"chat-{i}", "group": f"chat-{i}", "messages": [{"role": "user", "content": t}], "tags": ["short", "control"],
                        "max_new_tokens": 40} for i, t in enumerate(CHAT)],
    }


def suites() -> dict[str, list[dict]]:
    """The powered suites (probes/real/powered/): 24 groups per long suite."""
    code = []
    for i, m in enumerate(code_modules()):
        name = m.removeprefix("test.")
        tags = ["code", "held-out-stdlib" if not m.startswith("test.") else "stdlib-tests"]
        code.append({"id": f"code-{name}", "group": f"code-{name}", "source": {"stdlib_module": m},
                     "cut": [INSIDE[i % len(INSIDE)], BEYOND[i % len(BEYOND)]], "tags": tags})
    agent = [{"id": f"agent-{g}", "group": f"agent-{g}", "messages": agent_messages(5000 + g, AGENT_STEPS[g % 6]),
              "tags": ["agent", "json"]} for g in range(GROUPS)]
    docs = [{"id": f"docqa-{g}", "group": f"docqa-{g}",
             "messages": [{"role": "user", "content": document(6000 + g, DOC_SECTIONS[g % 6])[0]}], "tags": ["doc-qa"]}
            for g in range(GROUPS)]
    return {"long_code": code, "agent_traces": agent, "doc_qa": docs, "short_chat": first_suites()["short_chat"]}


def write(out_dir: Path) -> dict[str, int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    s = first_suites()
    for name, rows in s.items():
        (out_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out_dir / "powered").mkdir(exist_ok=True)
    for name in ("long_code", "agent_traces", "doc_qa"):
        (out_dir / "powered" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in suites()[name]))
    quick = [dict(s["long_code"][0], cut=[1024, 2048]), s["agent_traces"][1], s["doc_qa"][1], s["short_chat"][0]]
    (out_dir / "quick.jsonl").write_text("".join(json.dumps(r) + "\n" for r in quick))
    # what CI reruns against the shipped drafters' stored reference numbers (small: 2 cores, no GPU)
    ci = [dict(s["long_code"][0], cut=[512], max_new_tokens=24), dict(s["agent_traces"][0], max_new_tokens=24),
          dict(s["short_chat"][0], max_new_tokens=24)]
    (out_dir / "ci.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ci))
    return {k: len(v) for k, v in suites().items()}


if __name__ == "__main__":
    import sys

    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else "probes/real")))
