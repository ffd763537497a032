"""What a trace's numbers depend on, as one flat mapping stored in the manifest: `--resume` refuses to append when
any entry differs (other weights under the same config, another setting) and names the entries that differ.

Weights are identified by content, not by path or mtime (a copied or re-downloaded checkpoint is the same
checkpoint; `cp` without -p changes mtimes): per safetensors file its name, size, a hash of its header (tensor
names, dtypes, shapes, offsets) and of its data: the whole file up to FULL_HASH_BYTES, above that SAMPLES
evenly spaced blocks of BLOCK bytes (a few MiB read per file, so a 140 GB target costs well under a second).
Another checkpoint, even with the same config, differs in practically every block."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

FULL_HASH_BYTES = 256 << 20
BLOCK = 64 << 10
SAMPLES = 64
SCHEME = "safetensors-header+data-v1"


def _file_digest(f: Path, h) -> None:
    size = f.stat().st_size
    with f.open("rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        h.update(f"{f.name}\0{size}\0".encode())
        if size <= FULL_HASH_BYTES:
            fh.seek(0)
            while chunk := fh.read(1 << 20):
                h.update(chunk)
            return
        h.update(fh.read(min(n, size - 8)))  # the header: every tensor's name, dtype, shape and offsets
        start = 8 + n
        span = max(size - start - BLOCK, 0)
        for i in range(SAMPLES):
            fh.seek(start + span * i // (SAMPLES - 1))
            h.update(fh.read(BLOCK))


def folder_weights(path: str | Path) -> str | None:
    """Digest of the *.safetensors files in a checkpoint folder (None when there are none)."""
    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return None
    h = hashlib.sha256(SCHEME.encode())
    for f in files:
        _file_digest(f, h)
    return h.hexdigest()[:24]


def sample_positions(n: int, k: int, device=None):
    """k evenly spaced int64 positions 0 .. n - 1 (first and last included), exact for any n."""
    import torch

    return torch.arange(k, dtype=torch.int64, device=device) * (n - 1) // (k - 1)


def module_weights(module) -> str:
    """Digest of an in-memory model (API: a Target or drafter built in Python): per tensor its name, shape,
    dtype and up to 4096 evenly spaced values (positions i * (n - 1) // 4095 in exact integer arithmetic: a float32
    linspace rounds past the last element once n exceeds 2^24)."""
    h = hashlib.sha256(b"module-v2")
    for name, t in sorted(module.state_dict().items()):
        flat = t.detach().reshape(-1)
        if flat.numel() > 4096:
            flat = flat[sample_positions(flat.numel(), 4096, flat.device)]
        h.update(f"{name}\0{list(t.shape)}\0{t.dtype}\0".encode())
        h.update(flat.double().cpu().numpy().tobytes())
    return h.hexdigest()[:24]


def _canon(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v, sort_keys=True, default=str)


# provenance entries that describe one conversion run (when, how long), not the weights it produced: a target
# converted again on another machine, to the same verified files, is the same target (--resume across machines)
CONVERSION_RUN = ("converted_at", "convert_seconds")


def flat_identity(manifest: dict[str, Any], extra_keys: list[str]) -> dict[str, Any]:
    """Every entry that shapes the numbers: drifttool version, each capture setting (the probe file by content,
    not path), each drafter's config hash, overrides and weights, the target's config hash and weights, and the
    engine's extra settings."""
    ident: dict[str, Any] = {"drifttool_version": manifest.get("drifttool_version")}
    for k, v in manifest["capture"].items():
        if k == "probes" and isinstance(v, dict):
            ident.update({f"capture.probes.{kk}": _canon(vv) for kk, vv in v.items() if kk != "path"})
        else:
            ident[f"capture.{k}"] = _canon(v)
    ident["drafters"] = _canon([d["name"] for d in manifest["drafters"]])
    for d in manifest["drafters"]:
        for k in ("config_hash", "overrides", "weights"):
            ident[f"drafters.{d['name']}.{k}"] = _canon(d.get(k))
    for k in ("config_hash", "weights"):
        ident[f"target.{k}"] = _canon(manifest["target"].get(k))
    prov = manifest["target"].get("provenance")  # e.g. which GGUF the real target came from, its files' hashes
    ident["target.provenance"] = _canon({k: v for k, v in prov.items() if k not in CONVERSION_RUN}
                                        if isinstance(prov, dict) else prov)
    for k in extra_keys:
        ident[k] = _canon(manifest.get(k))
    return ident


def _weights_of(key: str, value: Any) -> Any:
    """An identity entry as compared: the target's provenance without its conversion-run entries (traces written
    before they were left out of the identity still carry them)."""
    if key != "target.provenance" or not isinstance(value, str):
        return value
    try:
        prov = json.loads(value)
    except ValueError:
        return value
    return {k: v for k, v in prov.items() if k not in CONVERSION_RUN} if isinstance(prov, dict) else prov


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """None when `new` may be appended to the trace `old`; else one phrase naming what differs."""
    a, b = old.get("identity"), new.get("identity") or {}
    if not isinstance(a, dict):
        return ("manifest.json has no 'identity' (written by an older drifttool), so the weights and settings "
                "it was captured with cannot be checked")
    diff = sorted(k for k in {*a, *b} if _weights_of(k, a.get(k)) != _weights_of(k, b.get(k)))
    if not diff:
        return None

    def short(v: Any) -> str:
        s = "absent" if v is None else str(v)
        return s if len(s) <= 40 else s[:37] + "..."

    first = diff[0]
    more = f" (and {len(diff) - 1} more: {', '.join(diff[1:4])}{', ...' if len(diff) > 4 else ''})" if len(diff) > 1 else ""
    return (f"the trace was captured with different settings or weights: {first} is {short(a.get(first))} there, "
            f"{short(b.get(first))} now{more}")
