""""Did you mean ...?" for a name chosen from a known set (a bundled suite, a specimen) and for a path that does
not exist (its siblings: `smollm2-long-code.drift` -> `smollm2-long_code.drift`). One rule everywhere: difflib's
closest match, with '-' and '_' and letter case counted as the same."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


def _key(s: str) -> str:
    return s.lower().replace("-", "_")


def closest(name: str, names: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name closest to `name`, or None when none is close."""
    names = list(dict.fromkeys(names))
    keyed = {_key(n): n for n in names}
    if _key(name) in keyed:  # only '-' for '_' or case differs
        return keyed[_key(name)]
    hit = difflib.get_close_matches(_key(name), list(keyed), n=1, cutoff=cutoff)
    return keyed[hit[0]] if hit else None


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """' (did you mean 'x'?)' or ''; for the end of an error line."""
    hit = closest(name, names)
    return f" (did you mean {hit!r}?)" if hit is not None and hit != name else ""


def sibling(path: str | Path) -> Path | None:
    """For a path that does not exist: the entry of its (existing) parent folder closest to its name."""
    p = Path(path)
    parent = p.parent
    try:
        if not parent.is_dir():
            return None
        names = [q.name for q in parent.iterdir() if not q.name.startswith(".")]
    except OSError:
        return None
    hit = closest(p.name, names)
    return None if hit is None else parent / hit


def path_hint(path: str | Path) -> str:
    """' (did you mean 'dir/x'?)' for a missing path with a close sibling, else ''."""
    hit = sibling(path)
    return f" (did you mean {str(hit)!r}?)" if hit is not None else ""
