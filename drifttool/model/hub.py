"""Hub ids (`org/name`) resolved through the local Hugging Face cache, as users have their models.

A path that exists is used as is. Otherwise a string shaped like a hub id (`org/name`, optionally
`org/name@revision`) is looked up in the cache transformers and huggingface_hub use (`$HF_HUB_CACHE`, else
`$HF_HOME/hub`, else `~/.cache/huggingface/hub`); when it is missing and the machine may go online
(`HF_HUB_OFFLINE` unset), `snapshot_download` fetches only what drifttool reads (configs, safetensors,
tokenizer, chat template; never pickles). Offline with no snapshot: one line saying how to fetch it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import DriftError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")
PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.txt", "*.model"]


def looks_like_hub_id(s: str) -> bool:
    return bool(HUB_ID.match(s)) and not s.startswith((".", "/", "~"))


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def resolve(spec: str | Path, what: str) -> Path:
    """A local folder for `spec` (`what` = 'target' or 'drafter', used in messages)."""
    p = Path(spec)
    if p.exists() or not looks_like_hub_id(str(spec)):
        return p
    repo, _, rev = str(spec).partition("@")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise DriftError(f"{spec}: not a local folder, and huggingface_hub is not installed to look it up as a "
                         f"hub id (pip install huggingface_hub)") from None
    try:
        return Path(snapshot_download(repo, revision=rev or None, allow_patterns=PATTERNS, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    except Exception as e:  # e.g. a malformed cache entry
        raise DriftError(f"{spec}: {what} not readable from the Hugging Face cache ({str(e).splitlines()[0]})") from None
    fetch = f"huggingface-cli download {repo}" + (f" --revision {rev}" if rev else "")
    if _offline():
        raise DriftError(f"{spec}: {what} is neither a local folder nor in the Hugging Face cache ({cache_dir()}) "
                         f"and HF_HUB_OFFLINE is set; fetch it on a connected machine with `{fetch}`")
    try:
        return Path(snapshot_download(repo, revision=rev or None, allow_patterns=PATTERNS))
    except Exception as e:  # no network, gated or missing repo
        raise DriftError(f"{spec}: {what} is not a local folder, not in the Hugging Face cache ({cache_dir()}), and "
                         f"could not be downloaded ({str(e).splitlines()[0][:160]}); try `{fetch}`") from None


def cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)
