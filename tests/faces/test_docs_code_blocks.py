"""Issue 53 item 6: the docs' Python examples run. Every ```python block of docs/*.md is executed, the blocks of
one page in order in one fresh interpreter (a later block uses an earlier one's names, as a reader's notebook
would), from a scratch folder that sees the checkout's sample traces and bundled models under their documented
relative paths, so what a block writes (`runs/live.drift`) lands there. A block that needs a model download or a
long capture may be marked `<!-- skip-test: reason -->` on the line before it; keep those rare."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.capture import child_env

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*skip-test:\s*(.+?)\s*-->\s*$")
LINKED = ("sample_traces", "drifttool", "probes")  # what the examples name by relative path


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason or None) of each ```python block of `page`, in order."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = [ln for ln in text[:m.start()].splitlines() if ln.strip()]
        skip = SKIP.search(before[-1]) if before else None
        out.append((line, m.group(1), skip.group(1) if skip else None))
    return out


PAGES = sorted(p for p in DOCS.rglob("*.md") if blocks(p))


def test_the_pages_with_examples_are_found():
    names = {p.name for p in PAGES}
    assert {"getting_started.md", "trees.md"} <= names, names
    skipped = [(p.name, ln, why) for p in PAGES for ln, _, why in blocks(p) if why]
    assert len(skipped) <= 2, f"skip-test should stay rare: {skipped}"


RUNNER = """
import sys
page, blocks = sys.argv[1], {blocks!r}
ns = {{"__name__": "__main__"}}
for line, code in blocks:
    print(f"--- {{page}}:{{line}}", flush=True)
    exec(compile(code, f"{{page}} (block at line {{line}})", "exec"), ns)
print("--- all blocks ran", flush=True)
"""


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_docs_python_blocks_run(page, tmp_path):
    run = [(line, code) for line, code, why in blocks(page) if why is None]
    if not run:
        pytest.skip(f"{page.name}: every block is marked skip-test")
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name, target_is_directory=True)
    script = tmp_path / "run_blocks.py"
    script.write_text(RUNNER.format(blocks=run))
    env = child_env()
    env["MPLBACKEND"] = "Agg"
    r = subprocess.run([sys.executable, str(script), str(page.relative_to(REPO))], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0 and "--- all blocks ran" in r.stdout, \
        f"{page.relative_to(REPO)}: a Python block failed\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
