"""Chat conversations for training drafters against the real target, built from local material only.

EAGLE's recipe trains drafters on responses the target itself generates. The prompts here come from the
running interpreter (standard library + installed packages' source, the Python reference docs shipped as
`pydoc_data.topics`) and from the seeded agent-trace generator, in four kinds that match the probe suites:
long code, agent traces, document QA, short chat. The standard-library modules in `data.HELD_OUT` and every
7th docs topic are never used for training (probes and held-out evaluation use them). Deterministic: the
same seed gives the same list.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

from .data import HELD_OUT, eligible, site_dirs, stdlib_dir
from .probe_gen import TOOLS, random_name, tool_output

CODE_ASKS = (
    "Explain what the code above does, function by function.",
    "Write a short docstring for the last function above.",
    "List the classes and functions defined above with one line each.",
    "Is there a bug in the code above? Answer briefly.",
    "Continue the code above.",
    "Summarise this module in three sentences.",
    "Write a unit test for one of the functions above.",
    "Which standard-library modules does this code import, and why?",
)
DOC_ASKS = (
    "Summarise the documentation above.",
    "According to the text above, what are the rules? Answer in a list.",
    "Give a short example that illustrates the documentation above.",
    "What is the most important point of the section above?",
    "Explain the section above to a beginner.",
)
CHAT = (
    "How do I reverse a list in Python?", "What is a decorator?", "Write a function that checks if a number is prime.",
    "Explain the difference between a list and a tuple.", "How do I read a JSON file in Python?",
    "What does the `yield` keyword do?", "Write a bash command that counts lines in all .py files.",
    "What is recursion? Give an example.", "How can I sort a dictionary by value?", "What is a virtual environment?",
    "Explain Big-O notation briefly.", "Write a SQL query that selects the ten newest rows.",
    "How do I handle exceptions in Python?", "What is the difference between == and is?",
    "Write a function that merges two sorted lists.", "What is a hash table?",
    "Give me three tips for writing readable code.", "How do I measure how long a function takes?",
    "What is a race condition?", "Explain what an HTTP status code 404 means.",
)


@dataclass
class Conversation:
    id: str
    kind: str  # code | agent | docqa | chat
    split: str  # train | heldout
    messages: list[dict[str, str]]

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "kind": self.kind, "split": self.split, "messages": self.messages})


def _code_files(heldout: bool) -> list[Path]:
    root = stdlib_dir()
    if heldout:
        return [root / n for n in HELD_OUT if (root / n).is_file()]
    files = sorted(p for p in root.rglob("*.py") if p.is_file() and eligible(p, root))
    for s in site_dirs():
        files += sorted(p for p in s.rglob("*.py") if p.is_file() and eligible(p, s))
    return files


def _chunk(text: str, r: random.Random, chars: int) -> str:
    lines = text.splitlines(keepends=True)
    start = r.randrange(max(1, len(lines) // 2)) if len(text) > chars else 0
    out, n = [], 0
    for line in lines[start:]:
        if n + len(line) > chars:
            break
        out.append(line)
        n += len(line)
    return "".join(out) or text[:chars]


def _code(r: random.Random, files: list[Path], cid: str, split: str, long: bool = False) -> Conversation | None:
    path = r.choice(files)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    # ~3.3 chars per token for Python: 150 .. 2400 tokens of code, long ones over-represented
    sizes = (600, 1500, 3000, 5000, 8000, 11000, 13000) if long else (600, 1500, 3000, 5000, 6500, 8000)
    chars = int(r.choice(sizes) * r.uniform(0.8, 1.0))
    body = _chunk(text, r, chars)
    if len(body) < 200:
        return None
    msg = f"Here is `{path.name}`:\n```python\n{body}```\n{r.choice(CODE_ASKS)}"
    return Conversation(cid, "code", split, [{"role": "user", "content": msg}])


def _agent(r: random.Random, cid: str, split: str, long: bool = False) -> Conversation:
    msgs = [{"role": "system", "content": "You are a coding agent. Call tools by answering with one JSON object."},
            {"role": "user", "content": f"Fix the failing test in {random_name(r)}.py and report what changed."}]
    for _ in range(r.randrange(3, 48 if long else 24)):
        tool = r.choice(sorted(TOOLS))
        msgs.append({"role": "assistant", "content": json.dumps({"tool": tool, "arguments": TOOLS[tool](r)})})
        msgs.append({"role": "tool", "content": json.dumps(tool_output(r, tool))})
    return Conversation(cid, "agent", split, msgs)


def _docqa(r: random.Random, topics: dict[str, str], cid: str, split: str, long: bool = False) -> Conversation:
    key = r.choice(sorted(topics))
    sizes = (1500, 4000, 7000, 11000) if long else (1500, 4000, 7000)
    doc = _chunk(topics[key], r, int(r.choice(sizes) * r.uniform(0.8, 1.0)))
    msg = f"Documentation of `{key}`:\n\n{doc}\n\n{r.choice(DOC_ASKS)}"
    return Conversation(cid, "docqa", split, [{"role": "user", "content": msg}])


def _topics(heldout: bool) -> dict[str, str]:
    from pydoc_data.topics import topics

    return {k: v for k, v in topics.items() if (zlib.crc32(k.encode()) % 7 == 0) == heldout and len(v) > 400}


def build(n: int, split: str = "train", seed: int = 0, long: bool = False) -> list[Conversation]:
    """n conversations: 45% long code, 25% agent traces, 20% document QA, 10% short chat. `long` draws longer
    code/doc chunks and agent traces (up to ~4k tokens, for a 4096-token trained window) under its own seed."""
    r = random.Random(f"{seed}-{split}-long" if long else f"{seed}-{split}")
    heldout = split == "heldout"
    files, topics = _code_files(heldout), _topics(heldout)
    out: list[Conversation] = []
    while len(out) < n:
        cid = f"{split}-{len(out):06d}"
        u = r.random()
        if u < 0.45:
            c = _code(r, files, cid, split, long)
        elif u < 0.70:
            c = _agent(r, cid, split, long)
        elif u < 0.90:
            c = _docqa(r, topics, cid, split, long)
        else:
            c = Conversation(cid, "chat", split, [{"role": "user", "content": r.choice(CHAT)}])
        if c is not None:
            out.append(c)
    return out
