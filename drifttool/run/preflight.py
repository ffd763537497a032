"""Every location a capture reads or writes, checked at the call before any model loads (issue 53: an `--out`
without `.drift` used to fail after the models had loaded, a drafter typo after the target had). Imports no
torch, so the CLI can call it first; every engine's run calls it too (`runner.begin`), for the Python API."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DriftError
from ..suggest import path_hint


def check_out(out: Any, resume: bool = False, overwrite: bool = False, flag: str = "--out") -> Path:
    """The trace folder a capture will write: named NAME.drift, not a file, creatable, and (without --resume /
    --overwrite) not already a trace; with --resume, a trace to resume."""
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise DriftError(f"{flag}: {out!r}; expected a trace folder path NAME.drift")
    p = Path(out)
    if p.suffix != ".drift":
        raise DriftError(f"{flag} {p}: a trace folder name must end in .drift (e.g. {p.with_suffix('.drift').name})")
    if p.exists() and not p.is_dir():
        raise DriftError(f"{flag} {p}: exists and is a file; expected a trace folder")
    mf = p / "manifest.json"
    if resume and not mf.is_file():
        raise DriftError(f"--resume {p}: no manifest.json there; nothing to resume{path_hint(p) if not p.exists() else ''}")
    if not resume and mf.exists() and not overwrite:
        raise DriftError(f"{flag} {p}: a trace already exists there (use --resume or --overwrite)")
    up = next((q for q in (p, *p.parents) if q.exists()), Path("."))  # the folder mkdir would start from
    if not up.is_dir():
        raise DriftError(f"{flag} {p}: {up} is a file, not a folder; cannot create the trace folder there")
    if not os.access(up, os.W_OK | os.X_OK):
        raise DriftError(f"{flag} {p}: cannot create the trace folder ({up} is not writable)")
    return p


def check_model_folder(spec: Any, what: str, label: str) -> Path:
    """A target or drafter location: a local folder holding config.json, or a hub id (resolved from the local
    Hugging Face cache, downloaded when allowed; model.hub). A missing local path names its closest sibling.
    `label` starts the error line ('--target DIR', '--drafter NAME=DIR')."""
    from ..model.hub import looks_like_hub_id, resolve

    s = str(spec)
    p = Path(s)
    if not p.exists() and looks_like_hub_id(s) and not path_hint(p):  # a hub id, not a typo of a local folder
        p = resolve(s, what)  # one line if it cannot be found or fetched
    if not p.exists():
        raise DriftError(f"{label}: no such {what} folder{path_hint(p)}; expected a checkpoint folder with "
                         "config.json" + (" (or a hub id org/name)" if what == "target" else ""))
    if not p.is_dir():
        raise DriftError(f"{label}: is a file; expected the {what} checkpoint folder holding config.json")
    if not (p / "config.json").is_file():
        raise DriftError(f"{label}: no config.json in that folder; expected a {what} checkpoint folder "
                         "(config.json + *.safetensors)")
    return p


def check_locations(target: Any, drafters: Iterable[Any], out: Any, resume: bool = False,
                    overwrite: bool = False) -> None:
    """Output first (nothing to load for it), then the target, then each drafter (`d.name`, `d.path`). A loaded
    target object (the Python API's `Target` or an nn.Module) is not a location and is skipped."""
    check_out(out, resume, overwrite)
    if isinstance(target, (str, os.PathLike)):
        check_model_folder(target, "target", f"--target {target}")
    for d in drafters:
        check_model_folder(d.path, "drafter", f"--drafter {d.path}")
