"""The documentation's dashboard screenshots and the code each one shows: a page's screenshot is current while its
page module (dashboard/app_pages/NAME.py) and its plot builders (plots/NAME.py) are what they were when it was
taken. scripts/screenshots.py takes them from the live dashboard and records each one's code hash in
docs/dashboard/screenshots.json; the test command fails on a screenshot whose code changed since (it shows an older
page)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

PKG = Path(__file__).resolve().parents[1]
REPO = PKG.parent
DOCS = REPO / "docs"
RECORD = DOCS / "dashboard" / "screenshots.json"


def shots() -> dict[str, str]:
    """docs-relative screenshot path -> the page it shows (the README's Depth screenshot included)."""
    out = {f"dashboard/{p.stem}.png": p.stem for p in sorted((PKG / "dashboard" / "app_pages").glob("*.py"))
           if p.stem != "__init__"}
    out["screenshot_depth.png"] = "depth"
    return out


def code_files(page: str) -> list[Path]:
    """What a page's screenshot shows: its page module and its plot builders."""
    return [p for p in (PKG / "dashboard" / "app_pages" / f"{page}.py", PKG / "plots" / f"{page}.py") if p.is_file()]


NOISE = 2  # Chromium's antialiasing moves a few dozen pixels by 1 level between two renders of the same page


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGBA"), np.int16)


def keep_or_replace(new: Path, dest: Path) -> bool:
    """Copy a new screenshot over `dest` only when its pixels differ by more than rendering noise (NOISE): a change
    to a page's code that draws the same picture (a refactor) then re-records the hash without rewriting the image,
    so the repository does not grow by a copy of every screenshot. True when `dest` was replaced."""
    if dest.is_file():
        a, b = _pixels(new), _pixels(dest)
        if a.shape == b.shape and int(np.abs(a - b).max()) <= NOISE:
            return False
    shutil.copyfile(new, dest)
    return True


def code_hash(page: str) -> str:
    h = hashlib.sha256()
    for p in code_files(page):
        h.update(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()[:16]


def record() -> dict[str, str]:
    """The hashes now, as scripts/screenshots.py writes them after taking the screenshots."""
    return {shot: code_hash(page) for shot, page in shots().items()}


def stale() -> list[str]:
    """Screenshots older than the page they show (missing, never recorded, or their code changed), each with why."""
    try:
        taken = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        taken = {}
    out = []
    for shot, page in shots().items():
        if not (DOCS / shot).is_file():
            out.append(f"docs/{shot}: missing")
        elif taken.get(shot) != code_hash(page):
            files = ", ".join(str(p.relative_to(REPO)) for p in code_files(page))
            out.append(f"docs/{shot}: older than {files} (regenerate: python scripts/screenshots.py)")
    return out
