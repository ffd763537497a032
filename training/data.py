"""Training text for the zoo: Python source read at run time from the running interpreter.

The standard library is always used; installed site-packages add tokens. A fixed list of stdlib modules
(`HELD_OUT`) is never used for the tokenizer or for training, so probe suites can cut them at several
context lengths and measure models on text they have not seen. File order is deterministic (sorted).
"""

from __future__ import annotations

import math
import sysconfig
from collections.abc import Iterator
from pathlib import Path

# Stdlib modules kept out of tokenizer and model training (probe / held-out-loss text).
HELD_OUT: tuple[str, ...] = (
    "argparse.py",
    "calendar.py",
    "configparser.py",
    "difflib.py",
    "ftplib.py",
    "gettext.py",
    "imaplib.py",
    "mailbox.py",
    "optparse.py",
    "pickletools.py",
    "pydoc.py",
    "shutil.py",
    "smtplib.py",
    "tarfile.py",
    "textwrap.py",
)

# Directory names whose contents are tests, fixtures, GUIs-as-data or vendored copies of the stdlib.
SKIP_DIRS = frozenset(
    {"test", "tests", "testing", "idle_test", "__pycache__", "site-packages", "dist-packages",
     "lib2to3", "turtledemo", "ensurepip", "drifttool"}
)
MAX_FILE_BYTES = 200_000  # bigger files are mostly generated tables (e.g. pydoc_data/topics.py)
MIN_FILE_BYTES = 200


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def site_dirs() -> list[Path]:
    """site-packages of the running interpreter (the venv's when run from one)."""
    paths = sysconfig.get_paths()
    out: list[Path] = []
    for key in ("purelib", "platlib"):
        p = Path(paths[key])
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def held_out_paths() -> list[Path]:
    """Held-out stdlib module paths, in `HELD_OUT` order (those missing from this interpreter skipped)."""
    root = stdlib_dir()
    return [root / name for name in HELD_OUT if (root / name).is_file()]


def eligible(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    if any(part in SKIP_DIRS or part.startswith("test_") for part in rel.parts[:-1]):
        return False
    if path.name in HELD_OUT or path.name.startswith("test_"):
        return False
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return MIN_FILE_BYTES <= size <= MAX_FILE_BYTES


def _py_files(root: Path) -> list[tuple[Path, int]]:
    files = sorted(p for p in root.rglob("*.py") if p.is_file() and eligible(p, root))
    return [(p, p.stat().st_size) for p in files]


def _water_fill(groups: list[list[tuple[Path, int]]], budget: int) -> list[Path]:
    """Take files in sorted order from each group so that no group exceeds a common quota and the total
    stays within `budget`; keeps site-packages diverse instead of alphabetically truncated."""
    totals = sorted(sum(s for _, s in g) for g in groups)
    quota, remaining, left = 0, budget, len(totals)
    for t in totals:
        share = remaining // max(left, 1)
        if t <= share:
            remaining -= t
            left -= 1
            quota = t
        else:
            quota = share
            break
    else:
        quota = math.inf  # everything fits
    out: list[Path] = []
    for g in groups:
        used = 0
        for p, s in g:
            if used + s > quota:
                break
            out.append(p)
            used += s
    return out


def training_files(max_bytes: int = 32_000_000, include_site: bool = True) -> list[Path]:
    """Deterministic list of training source files: all eligible stdlib files first (up to `max_bytes`),
    then site-packages spread evenly across top-level packages to fill the byte cap."""
    out: list[Path] = []
    used = 0
    for p, s in _py_files(stdlib_dir()):
        if used + s > max_bytes:
            return out
        out.append(p)
        used += s
    if not include_site:
        return out
    groups: dict[str, list[tuple[Path, int]]] = {}
    for root in site_dirs():
        for p, s in _py_files(root):
            top = p.relative_to(root).parts[0]
            groups.setdefault(top, []).append((p, s))
    out.extend(_water_fill([groups[k] for k in sorted(groups)], max_bytes - used))
    return out


def read_source(path: Path) -> str | None:
    """File text, or None if it is not UTF-8 (skipped rather than mangled)."""
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def iter_texts(paths: list[Path]) -> Iterator[str]:
    for p in paths:
        text = read_source(p)
        if text:
            yield text


def prepare(build_dir: str | Path, max_bytes: int = 32_000_000, vocab_size: int = 2048) -> Path:
    """Data stage: train the tokenizer on the training files and write token streams under
    `build_dir/data` (train.npy uint16, heldout.npz one array per held-out module, manifest.json).
    Skipped when the manifest exists. Returns the data directory."""
    import json

    import numpy as np

    from . import tokenizer as tk

    out = Path(build_dir) / "data"
    manifest = out / "manifest.json"
    if manifest.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    files = training_files(max_bytes)
    tok = tk.train_tokenizer(iter_texts(files), vocab_size=vocab_size)
    tk.save_tokenizer(tok, out / "tokenizer")
    stream = tk.encode_stream(tok, iter_texts(files))
    np.save(out / "train.npy", stream)
    held = {p.stem: tk.encode_document(tok, read_source(p) or "") for p in held_out_paths()}
    np.savez(out / "heldout.npz", **held)
    info = {
        "max_bytes": max_bytes,
        "vocab_size": vocab_size,
        "train_files": len(files),
        "train_bytes": sum(p.stat().st_size for p in files),
        "train_tokens": int(stream.size),
        "heldout": {k: int(v.size) for k, v in held.items()},
        "files": [str(p) for p in files],
    }
    manifest.write_text(json.dumps(info, indent=1) + "\n")  # written last: marks the stage complete
    return out
