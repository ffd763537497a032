"""Generate the bundled probe suites (probes/*.jsonl). Deterministic; no third-party text is shipped:
long code is resolved at run time from the installed standard library (held-out modules), and the agent
traces, document-QA and chat texts are generated here from templates with a fixed seed."""

from __future__ import annotations

import json
import random
from pathlib import Path

from .data import HELD_OUT

CODE_CUTS = [128, 256, 512, 896]
TOOLS = {
    "list_dir": lambda r: {"path": r.choice(["/srv/app", "/var/log", "/home/ci/repo", "/etc/nginx"])},
    "read_file": lambda r: {"path": r.choice(["setup.py", "app/models.py", "README.md", "conf/site.conf"]),
                            "max_bytes": r.choice([2048, 4096, 8192])},
    "run_tests": lambda r: {"target": r.choice(["tests/", "tests/test_api.py", "-k parser"]), "verbose": r.random() < 0.5},
    "search_code": lambda r: {"query": r.choice(["def parse", "class Config", "import json", "TODO"]), "limit": 10},
    "http_get": lambda r: {"url": r.choice(["http://127.0.0.1:8080/health", "http://127.0.0.1:8080/api/items"])},
}
WORDS = ("config parser cache token request handler module value error index buffer stream queue worker "
         "session record schema column metric window offset batch layer").split()


def random_name(r: random.Random) -> str:
    return "_".join(r.sample(WORDS, 2))


def tool_output(r: random.Random, tool: str) -> dict:
    if tool == "list_dir":
        return {"entries": [{"name": f"{random_name(r)}.py", "size": r.randrange(200, 90000)} for _ in range(r.randrange(3, 8))]}
    if tool == "read_file":
        body = "\n".join(f"def {random_name(r)}(self, {r.choice(WORDS)}):\n    return self.{random_name(r)}" for _ in range(r.randrange(2, 5)))
        return {"content": body, "truncated": r.random() < 0.3}
    if tool == "run_tests":
        n = r.randrange(5, 60)
        f = r.randrange(0, 3)
        return {"passed": n - f, "failed": f, "failures": [f"test_{random_name(r)}" for _ in range(f)]}
    if tool == "search_code":
        return {"matches": [{"file": f"src/{random_name(r)}.py", "line": r.randrange(1, 400)} for _ in range(r.randrange(1, 6))]}
    return {"status": 200, "json": {"items": [{"id": r.randrange(1000), "name": random_name(r)} for _ in range(3)]}}


def agent_trace(seed: int, steps: int) -> str:
    r = random.Random(seed)
    parts = [f"<|system|>\nYou are a coding agent. Call tools with JSON.\n<|user|>\nFix the failing test in {random_name(r)}.py "
             f"and report what changed.\n"]
    for _ in range(steps):
        tool = r.choice(sorted(TOOLS))
        parts.append("<|assistant|>\n" + json.dumps({"tool": tool, "arguments": TOOLS[tool](r)}) + "\n")
        parts.append("<|tool|>\n" + json.dumps(tool_output(r, tool)) + "\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def document(seed: int, sections: int) -> tuple[str, str]:
    r = random.Random(seed)
    facts = []
    lines = [f"# Design notes for the {random_name(r)} service\n"]
    for s in range(sections):
        lines.append(f"\n## {s + 1}. {random_name(r).replace('_', ' ').title()}\n")
        for _ in range(r.randrange(3, 6)):
            key, val = random_name(r), r.randrange(2, 5000)
            facts.append((key, val))
            lines.append(f"The {key.replace('_', ' ')} limit is {val}; it is read from `{key.upper()}` at start-up "
                         f"and checked by `{random_name(r)}()` before each {r.choice(WORDS)} is accepted.\n")
    key, val = r.choice(facts)
    q = f"\nQuestion: what is the {key.replace('_', ' ')} limit, and where is it read from?\nAnswer:"
    return "".join(lines) + q, f"{val}"


SHORT = [
    "def fibonacci(n):\n", "import os\nimport sys\n\n", "class Config:\n    def __init__(self, path):\n",
    "for i in range(10):\n    if i % 2 == 0:\n", "with open(path) as f:\n    data = ", "try:\n    import json\nexcept ImportError:\n",
    "def parse_args(argv=None):\n    parser = ", "    return sorted(items, key=lambda x: ",
]


def write_suites(out_dir: Path) -> dict[str, int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    suites: dict[str, list[dict]] = {
        "long_code": [{"id": f"code-{m.removesuffix('.py')}", "group": f"code-{m.removesuffix('.py')}", "source": {"stdlib_module": m.removesuffix(".py")},
                       "cut": CODE_CUTS, "tags": ["code", "held-out-stdlib"], "max_new_tokens": 48}
                      for m in HELD_OUT[:8]],
        "agent_traces": [{"id": f"agent-{i}", "group": f"agent-{i}", "text": agent_trace(1000 + i, 4 + 3 * i), "cut": [256, 512, 896],
                          "tags": ["agent", "json"], "max_new_tokens": 48} for i in range(6)],
        "doc_qa": [{"id": f"docqa-{i}", "group": f"docqa-{i}", "text": document(2000 + i, 2 + 2 * i)[0], "cut": [896], "keep": "end",
                    "tags": ["doc-qa"], "max_new_tokens": 32} for i in range(6)],
        "short_chat": [{"id": f"short-{i}", "group": f"short-{i}", "text": t, "tags": ["short", "control"], "max_new_tokens": 48}
                       for i, t in enumerate(SHORT)],
    }
    for name, rows in suites.items():
        (out_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    quick = [dict(suites["long_code"][0], cut=[256, 896]), dict(suites["agent_traces"][1], cut=[512]),
             suites["doc_qa"][1], suites["short_chat"][0]]
    (out_dir / "quick.jsonl").write_text("".join(json.dumps(r) + "\n" for r in quick))
    return {k: len(v) for k, v in suites.items()}


if __name__ == "__main__":
    import sys

    print(write_suites(Path(sys.argv[1] if len(sys.argv) > 1 else "probes")))
