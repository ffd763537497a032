"""The monitor's documented install is what the vLLM test environment installs (issue #63, item 2: the documented
line left pip errors, `accelerate` and `gguf` missing): the packages of docs/monitor.md's install block equal those
scripts/test_vllm.sh installs beside drifttool's wheel, so a test run proves the documented list."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _packages(line: str) -> set[str]:
    return {w for w in line.split("install", 1)[1].split() if not w.startswith("-") and w != "#"}


def test_the_documented_install_is_the_tested_one():
    docs = (ROOT / "docs" / "monitor.md").read_text()
    block = re.search(r"<!-- install:begin[^>]*-->\s*```bash\n(.*?)```", docs, re.S).group(1)
    doc_line = [ln for ln in block.splitlines() if "pip install" in ln and "--no-deps" not in ln]
    script = (ROOT / "scripts" / "test_vllm.sh").read_text().splitlines()
    test_line = [ln for ln in script if "pip install" in ln and "pyarrow" in ln]
    assert len(doc_line) == 1 and len(test_line) == 1
    assert _packages(doc_line[0]) == _packages(test_line[0].replace('"$ENV/bin/python"', ""))
    assert {"accelerate", "gguf"} <= _packages(doc_line[0])
