"""drifttool's own engine: probes x drafters through the speculative loop with the capture hooks, one shard per
prompt (the run's shared body: runner.py); plus what identifies a run's models in the manifest."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from ...errors import DriftError
from ...model.checkpoint import load_drafter
from ...model.config import trained_window
from ...model.drafter import Eagle3Drafter
from ...model.target import Target, load_target
from ...trace.identity import flat_identity, folder_weights, module_weights
from ...trace.records import add_rows, prompt_row, prompt_tables
from ...version import __version__
from ..hooks import Capture
from ..loop import check_prompt, positions_needed, speculate, teacher_forcing_data
from ..probes import Probe, check_text_length, load_suite
from ..runner import RunSettings, check_drafters, check_same_aux, prompt_seed, write_run
from ..sinks import SinkSpec


@dataclass
class DrafterSpec:
    """`[NAME=]DIR[?flag=value&flag=value]` on the command line."""

    name: str
    path: str
    overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, common: dict[str, str] | None = None) -> DrafterSpec:
        name, path = (text.split("=", 1) if "=" in text.split("?", 1)[0] else (None, text))
        path, _, query = path.partition("?")
        ov = dict(common or {})
        for kv in filter(None, query.split("&")):
            k, eq, v = kv.partition("=")
            if not eq:
                raise DriftError(f"--drafter {text}: override {kv!r} must look like flag=value")
            ov[k] = v
        p = Path(path)
        return cls(name or (p.name + ("+" + "+".join(f"{k}={v}" for k, v in ov.items()) if ov else "")), path, ov)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for kv in items or []:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise DriftError(f"--override {kv!r}: expected flag=value, e.g. norm_output=true")
        out[k.strip()] = v.strip()
    return out


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def target_identity(target: Target, path: str | None) -> dict[str, Any]:
    cfg = target.config.to_dict() if hasattr(target.config, "to_dict") else {}
    ident = {
        "path": str(path) if path else target.name,
        "architecture": type(target.model).__name__ if target.model is not None  # None: vLLM holds the weights
        else (getattr(target.config, "architectures", None) or ["?"])[0],
        "num_layers": target.num_layers, "hidden_size": target.hidden_size, "vocab_size": target.vocab_size,
        "max_position_embeddings": target.max_positions, "aux_layer_ids": target.aux_layer_ids,
        "config_hash": _hash({k: v for k, v in cfg.items() if not k.startswith("_")}),
        "weights": (folder_weights(path) if path else None) or (
            module_weights(target.model) if target.model is not None else None),
    }
    if path and (Path(path) / "report.json").is_file():
        try:
            ident["report"] = json.loads((Path(path) / "report.json").read_text())
        except (ValueError, RecursionError, OSError):
            ident["report"] = "unreadable report.json"
    from ...zoo.smollm2 import provenance

    prov = provenance(Path(path)) if path else None
    if prov is not None:  # e.g. the real target converted from a GGUF: which file, which precision
        ident["provenance"] = prov
    return ident


def drafter_identity(name: str, d: Eagle3Drafter) -> dict[str, Any]:
    c = d.config
    out = {
        "name": name, "path": c.source, "layout": c.layout, "variant": c.variant, "flags": c.flags(),
        "overrides": c.overrides, "assumptions": c.assumptions, "config_hash": c.config_hash(),
        "aux_layer_ids": c.aux_layer_ids, "aux_convention": c.aux_convention,
        "aux_layer_ids_read": c.input_aux_layer_ids, "sliding_window": c.sliding_window, "model_type": c.model_type,
        "max_position_embeddings": c.max_position_embeddings, "trained_window": c.trained_window,
        "rope_theta": c.rope_theta, "rope_scaling": c.rope_scaling, "has_embed": c.has_embed,
        "hidden_size": c.hidden_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "draft_vocab_size": c.draft_vocab_size,
        "weights": folder_weights(c.source) if c.source else None,
    }
    if out["weights"] is None:  # built in Python (API), not loaded from a folder
        out["weights"] = module_weights(d)
    return out


def capture_one(
    target: Target, name: str, drafter: Eagle3Drafter, cap: Capture, probe: Probe, ids: list[int], depth: int,
    mode: str, max_new_tokens: int, seed: int, temperature: float, forced=None, draft_sampling: str = "greedy",
):
    """One drafter on one prompt through an attached Capture; returns (tables, sampled rows, SpecResult)."""
    t0 = time.perf_counter()
    res = speculate(target, drafter, ids, depth=depth, max_new_tokens=max_new_tokens, mode=mode,
                    temperature=temperature, seed=prompt_seed(seed, probe.id), observers=[cap], forced=forced,
                    draft_sampling=draft_sampling)
    wall = time.perf_counter() - t0
    tabs = prompt_tables(name, probe.id, res.rounds, cap.rounds, drafter.config.input_aux_layer_ids,
                         trained_window(drafter.config.to_dict())["window"], drafter.config.sliding_window)
    tabs["prompts"] = prompt_row(name, probe, len(ids), len(res.output_ids), res.rounds, wall)
    rows = add_rows(tabs, name, probe.id, cap.rounds)
    return tabs, rows, res


def capture_prompt(
    target: Target, drafters: dict[str, Eagle3Drafter], probe: Probe, ids: list[int], depth: int, mode: str,
    max_new_tokens: int, sink: SinkSpec, seed: int, keep_rows: int, temperature: float,
    draft_sampling: str = "greedy",
) -> tuple[dict[str, pd.DataFrame], dict]:
    """All drafters on one prompt (the target's teacher-forced pass shared); the shard's tables and rows."""
    parts: dict[str, list[pd.DataFrame]] = {}
    rows: dict = {}
    forced = teacher_forcing_data(target, ids, depth, max_new_tokens) if mode == "teacher-forced" else None
    for name, d in drafters.items():
        with Capture(d, sink=sink, keep_rows=keep_rows, seed=prompt_seed(seed, probe.id)) as cap:
            try:
                tabs, arr, _ = capture_one(target, name, d, cap, probe, ids, depth, mode, max_new_tokens, seed,
                                           temperature, forced, draft_sampling)
            except DriftError as e:
                if str(e).startswith("target features"):
                    raise
                raise DriftError(f"drafter {name!r}: {e}") from None
        for k, v in tabs.items():
            parts.setdefault(k, []).append(v)
        rows.update(arr)
    return {k: pd.concat(v, ignore_index=True) for k, v in parts.items()}, rows


def build_manifest(target: Target, target_path: str | None, models: dict[str, Eagle3Drafter],
                   capture_settings: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Identity of everything that shaped the numbers, and a hash that --resume checks."""
    m = {"drifttool_version": __version__, "target": target_identity(target, target_path),
         "drafters": [drafter_identity(n, d) for n, d in models.items()], "capture": capture_settings, **(extra or {})}
    m["identity"] = flat_identity(m, sorted(extra or {}))
    m["settings_hash"] = _hash(m["identity"])
    return m


def run_capture(
    target: str | Target,
    drafters: list[DrafterSpec],
    probes: str,
    out: str,
    depth: int = 8,
    mode: str = "generate",
    max_new_tokens: int = 64,
    device: str = "cpu",
    dtype: str = "float32",
    sink: SinkSpec | None = None,
    seed: int = 0,
    keep_rows: int = 2,
    temperature: float = 0.0,
    resume: bool = False,
    overwrite: bool = False,
    limit: int | None = None,
    progress: bool = True,
    extra_manifest: dict[str, Any] | None = None,
    draft_sampling: str = "greedy",
    compact: bool = True,
) -> Path:
    """Capture every probe with every drafter into the trace `out`; returns its path. `draft_sampling`
    (temperature > 0 only): "greedy" as vLLM drafts by default, or "probabilistic" (see loop.DRAFT_SAMPLING).
    `compact`: merge the shards into one file per table when the capture finishes (trace.compact)."""
    st = RunSettings.of(depth=depth, mode=mode, max_new_tokens=max_new_tokens, sink=sink, seed=seed,
                        temperature=temperature, keep_rows=keep_rows, dtype=dtype, device=device, limit=limit,
                        draft_sampling=draft_sampling)  # before anything is loaded or written
    check_drafters(drafters)
    suite = load_suite(probes)
    if limit is not None:
        suite = suite[:limit]
    from ...model.hub import resolve

    # hub ids become their cached snapshot folders here, so identity, tokenizer copy and manifest see files
    tgt_path = None if isinstance(target, (Target, nn.Module)) else str(resolve(target, "target"))
    tgt = load_target(tgt_path or target, device=device, dtype=st.torch_dtype)
    drafters = [DrafterSpec(d.name, str(resolve(d.path, "drafter")), d.overrides) for d in drafters]
    models = {d.name: load_drafter(d.path, target=tgt, overrides=d.overrides, device=device, dtype=st.torch_dtype)
              for d in drafters}
    check_same_aux(models)
    token_ids = {}  # every probe checked before anything is written; the error names the file and the probe
    for probe in suite:
        try:
            check_text_length(probe, tgt, max_new_tokens + depth + 1)
            ids = probe.tokens(tgt)
            check_prompt(ids, tgt, positions_needed(len(ids), probe.max_new_tokens or max_new_tokens, depth))
        except DriftError as e:
            raise DriftError(f"{probes}: probe {probe.id!r}: {e}") from None
        token_ids[probe.id] = ids
    capture_settings = {
        **st.record(probes, len(suite)),
        "attention": "softmax rows of the K draft queries against the round's final key cache (no L x L maps)",
        "draft_sampling": draft_sampling if temperature > 0 else "greedy (temperature 0)",
    }
    if any(p.messages is not None for p in suite):
        capture_settings["chat_format"] = tgt.chat_format
    manifest = build_manifest(tgt, tgt_path, models, capture_settings, extra_manifest)

    def step(writer, bar, probe) -> None:
        mnt = probe.max_new_tokens or max_new_tokens
        try:
            tables, rows = capture_prompt(tgt, models, probe, token_ids[probe.id], depth, mode, mnt, st.sink, seed,
                                          keep_rows, temperature, draft_sampling)
        except DriftError as e:  # e.g. NaN/inf target features: name the target and the probe
            raise DriftError(f"{tgt_path or tgt.name}: probe {probe.id!r}: {e}") from None
        writer.add(probe.id, tables, rows)
        bar.advance(probe.id, int(len(tables.get("rounds", []))))

    writer = write_run(out, manifest, lambda w: [(1, p) for p in suite if p.id not in w.done], step, len(models),
                       resume, overwrite, progress, Path(tgt_path) / "tokenizer.json" if tgt_path else None,
                       compact=compact)
    return writer.path
