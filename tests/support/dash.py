"""Small traces for the dashboard tests: two tiny drafters over six short prompts (depth 4), a second
trace with a third series, and a malformed trace folder."""

from __future__ import annotations

from pathlib import Path

from drifttool.run.engines.hf import DrafterSpec, run_capture
from tests.support.capture import build_models, prompt, write_probes


def build_dash_traces(root: Path) -> dict[str, Path]:
    m = build_models(root)
    probes = write_probes(root / "probes.jsonl", [
        {"id": "p0", "token_ids": prompt(0, 20), "tags": ["code", "short"]},
        {"id": "p1", "token_ids": prompt(1, 26), "tags": ["chat"]},
        {"id": "p2", "token_ids": prompt(2, 34), "tags": ["code"]},
        # six groups in all: the fewest a group bootstrap gives a CI for (analysis.metrics.MIN_CLUSTERS)
        {"id": "p3", "token_ids": prompt(3, 22), "tags": ["chat"]},
        {"id": "p4", "token_ids": prompt(4, 28), "tags": ["code"]},
        {"id": "p5", "token_ids": prompt(5, 30), "tags": ["chat"]},
    ])
    a = run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={m['eagle3']}"), DrafterSpec.parse(f"e31={m['eagle31']}")],
                    str(probes), str(root / "a.drift"), depth=4, max_new_tokens=12, progress=False)
    b = run_capture(str(m["target"]), [DrafterSpec.parse(f"e3post={m['eagle3']}?norm_output=true")], str(probes),
                    str(root / "b.drift"), depth=4, max_new_tokens=12, progress=False, limit=2)
    bad = root / "bad.drift"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    return {"a": Path(a), "b": Path(b), "bad": bad, "missing": root / "missing.drift"}
