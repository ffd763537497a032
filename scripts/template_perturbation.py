"""The EAGLE 3.1 paper's template perturbation on the real target: every question of probes/real/mt_chat.jsonl
rendered four ways (drifttool.run.probes.template_variants: chat template with / without the bos token, plain text
with / without it), written as a token-id suite, then captured with the shipped EAGLE-3 and EAGLE-3.1 drafters.

    python scripts/template_perturbation.py            # writes probes/real/mt_chat_template.jsonl
    T=$(drifttool zoo fetch smollm2); M=drifttool/zoo/models/smollm2
    drifttool capture --target $T --drafter eagle3=$M/eagle3 --drafter eagle3.1=$M/eagle3.1 \\
      --probes probes/real/mt_chat_template.jsonl --depth 8 --max-new-tokens 48 --keep-rows 0 --seed 0 \\
      --out sample_traces/chat/smollm2-mt_chat_template.drift
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from drifttool.errors import DriftError  # noqa: E402
from drifttool.model.target import load_target  # noqa: E402
from drifttool.run.probes import load_suite, template_variants  # noqa: E402
from drifttool.zoo import smollm2  # noqa: E402


def checked_suite(path: Path) -> list:
    """The chat suite, refused in one line (before any target is fetched or loaded) when it is empty or has a
    probe without chat messages (no template to take away)."""
    suite = load_suite(str(path))
    if not suite:
        raise DriftError(f"{path}: the suite is empty; expected chat probes (JSONL lines with 'messages')")
    bare = next((p for p in suite if p.messages is None), None)
    if bare is not None:
        raise DriftError(f"{path}: probe {bare.id!r} has no chat messages (it has no template form); expected a "
                         "'messages' list on every line")
    return suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/template_perturbation.py")
    ap.add_argument("--suite", default=str(ROOT / "probes" / "real" / "mt_chat.jsonl"), help="chat probe suite")
    ap.add_argument("--out", default=str(ROOT / "probes" / "real" / "mt_chat_template.jsonl"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        suite = checked_suite(Path(args.suite))
        target = load_target(str(smollm2.fetch()))
        rows = template_variants(suite, target)
    except DriftError as e:
        print(f"template_perturbation: error: {e}", file=sys.stderr)
        return 2
    out.write_text("".join(json.dumps({"id": p.id, "group": p.group, "token_ids": p.token_ids, "tags": p.tags,
                                       "max_new_tokens": p.max_new_tokens}) + "\n" for p in rows))
    print(f"{out}: {len(rows)} prompts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
