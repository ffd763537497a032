"""Regenerate every dashboard screenshot in the docs from the live dashboard, then record which page code each one
shows (docs/dashboard/screenshots.json; the test command fails on a screenshot whose page changed since).

    .venv/bin/python scripts/screenshots.py

It runs the browser test that opens every page of the default view on the shipped sample traces in Chromium
(tests/dashboard/test_dashboard_browser.py) with DRIFTTOOL_UPDATE_SCREENSHOT=1, which copies its full-page
screenshots to docs/dashboard/ and the Depth page to docs/screenshot_depth.png; an image is rewritten only when its
pixels changed (shots.keep_or_replace), so a refactor that draws the same page re-records the hash alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from drifttool.dashboard.shots import RECORD, record

    env = {**os.environ, "DRIFTTOOL_UPDATE_SCREENSHOT": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-x",
                        "tests/dashboard/test_dashboard_browser.py", "-k", "every_page_renders"], cwd=ROOT, env=env)
    if r.returncode != 0:
        print("screenshots: the browser test failed; nothing recorded", file=sys.stderr)
        return r.returncode
    RECORD.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"screenshots: recorded {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
