"""What a drafter checkpoint declares against what its weights imply, and what each engine will do with it.

The EAGLE-3.1 flags have been dropped or misread again and again on the way from trainer to engine (a flag
stored where the engine does not look, weights no flag uses, a default that differs between the trainer and
the engine). `static_findings` reads config.json and the tensor names only (no model is built) and names each
such case with what the engines do with it, from the engine's own source (ENGINE_READS; docs/conformance.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import DriftError
from . import flags as flag_table
from .config import FLAG_NAMES
from .findings import Finding
from .layouts import detect_layout
from .weight_health import weight_findings

FLAGS = FLAG_NAMES  # the flag names at import time (model/flags.py declares them)

# Where each engine reads a flag and what it assumes when the config is silent, from the installed source
# (vLLM 0.32.0, the version scripts/test_vllm.sh installs). Paths are inside the vllm package.
ENGINE_READS: dict[str, dict[str, Any]] = {
    "vllm 0.32 (speculators layout)": {
        "where": "top level of config.json only (transformers_utils/configs/speculators/algos.py:33-38); "
                 "transformer_layer_config is the draft layer's Llama config and is not searched for the flags",
        "defaults": {"fc_norm": False, "norm_output": False, "norm_before_fc": False, "norm_before_residual": True},
        "unused_weights": "refused at load: no module or parameter for a tensor (model_executor/models/utils.py:443)"
                          ", except input_norm.* which is dropped when norm_before_fc is false "
                          "(model_executor/models/llama_eagle3.py:464-465)",
        "missing_weights": "a norm built without its weight keeps RMSNorm's initial ones (no error)",
    },
    "vllm 0.32 (flat Llama config: SafeAILab, SpecForge)": {
        "where": "attributes of the config (model_executor/models/llama_eagle3.py:101, 184-188, 231, 252); "
                 "norm_before_fc from eagle_config first (llama_eagle3.py:184-188)",
        "defaults": {"fc_norm": False, "norm_output": False, "norm_before_fc": False, "norm_before_residual": False},
        "unused_weights": "as above",
        "missing_weights": "as above",
    },
    "sglang (python/sglang/srt/models/llama_eagle3.py, commit 03d5a77)": {
        "where": "nowhere: LlamaForCausalLMEagle3 has no fc_norm, input_norm, norm_output or norm_before_residual",
        "defaults": {"fc_norm": False, "norm_output": False, "norm_before_fc": False, "norm_before_residual": False},
        "unused_weights": "skipped silently (load_weights loads a tensor only if a parameter of that name exists)",
        "missing_weights": "-",
        "feedback": "the pre-norm residual (norm returns (normed, residual); the residual is fed back): EAGLE-3",
    },
    "speculators": {
        "where": "top level of the speculators config (Eagle3SpeculatorConfig fields)",
        "defaults": {"fc_norm": False, "norm_output": False, "norm_before_fc": False, "norm_before_residual": False},
        "unused_weights": "-",
        "missing_weights": "-",
    },
    "drifttool": {
        "where": "model/layouts.py per layout (speculators: top level; NVIDIA: eagle_config first; flat: top level)",
        "defaults": {"fc_norm": False, "norm_output": False, "norm_before_fc": False,
                     "norm_before_residual": "true for speculators (vLLM's reading, recorded as an assumption), "
                                             "else false"},
        "unused_weights": "refused at load (one line naming the tensor)",
        "missing_weights": "fc_norm / input_norm only under an override: unit weights, recorded",
    },
}


def _keys(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor names (drifttool's canonical spelling) and shapes, read from the safetensors headers only."""
    from safetensors import safe_open

    from .layouts import canonical_key

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise DriftError(f"{folder}: no *.safetensors weights (conformance reads safetensors headers only)")
    out = {}
    for f in files:
        try:
            with safe_open(str(f), "pt") as h:
                for k in h.keys():
                    out[canonical_key(k)] = tuple(h.get_slice(k).get_shape())
        except Exception as e:  # noqa: BLE001 - a corrupt header is one line
            raise DriftError(f"{f}: unreadable safetensors header ({str(e).splitlines()[0]})") from None
    return out


def _declared(raw: dict[str, Any], layout: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The flags as the checkpoint states them (absent: missing from the dict) and where each was found."""
    out, where = {}, {}
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    for f in flag_table.FLAGS:
        if f.name in raw:
            out[f.name], where[f.name] = raw[f.name], "top level"
        elif f.eagle_config and f.name in eagle:
            out[f.name], where[f.name] = eagle[f.name], "eagle_config"
    return out, where


def _read_config(p: Path) -> dict[str, Any]:
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise DriftError(f"{cfg_file}: not found (expected a drafter checkpoint folder)")
    try:
        raw = json.loads(cfg_file.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise DriftError(f"{cfg_file}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise DriftError(f"{cfg_file}: expected a JSON object")
    return raw


def _not_boolean(flags: dict[str, Any], vllm: str) -> list[Finding]:
    out = []
    for f, v in flags.items():
        if not isinstance(v, bool):
            says_false = str(v).strip().lower() in ("false", "0", "no", "off")
            out.append(Finding("flag_not_boolean", "error",
                               f"{f} is {v!r} ({type(v).__name__}), not a JSON boolean: engines read it by truthiness, "
                               f"so it counts as {bool(v)}" + (" although it says false" if says_false else ""),
                               {vllm: f"runs {f}={bool(v)} (Python truthiness)",
                                "drifttool": "refuses to load (expected true or false: a JSON boolean)"},
                               flag=f, value=v))
    return out


def _speculators_placement(flags: dict[str, Any], nested: dict[str, Any], vllm: str) -> list[Finding]:
    """Flags stored where vLLM does not look, and silent flags whose default differs between vLLM and speculators."""
    out = []
    for f in flag_table.FLAGS:
        vdef = f.default("vllm-speculators")
        if f.name not in flags and f.name in nested:
            out.append(Finding("flag_not_read", "error",
                               f"{f.name}={nested[f.name]!r} is stored in transformer_layer_config, where no engine "
                               "looks for it; move it to the top level of config.json",
                               {vllm: f"reads the top level only: runs {f.name}={vdef}",
                                "drifttool": f"reads the top level only: runs {f.name}={vdef}"},
                               flag=f.name, value=nested[f.name]))
        if f.name not in flags and f.name not in nested and vdef != f.default("speculators"):
            out.append(Finding("default_differs", "warning",
                               f"{f.name} is absent: vLLM assumes {str(vdef).lower()}, speculators' own default is "
                               f"{str(f.default('speculators')).lower()}; state it explicitly",
                               {vllm: f"runs {f.name}={vdef} (algos.py:33-34)",
                                "speculators": f"{f.name}={f.default('speculators')}",
                                "drifttool": f"{vdef} (as vLLM), recorded"},
                               flag=f.name))
    return out


def _weight_findings(flags: dict[str, Any], keys: dict[str, tuple[int, ...]], vllm: str) -> list[Finding]:
    """Per flag with weights: weights no flag uses, a flag without its weights; exclusive flags both on."""
    out = []
    for f in flag_table.FLAGS:
        if not f.weights:
            continue
        has, on = any(k.startswith(f.weights) for k in keys), bool(flags.get(f.name, False))
        tensor = next((k for k in sorted(keys) if k.startswith(f.weights)), f"{f.weights}*")
        if has and not on:
            out.append(Finding("weights_without_flag", "error",
                               f"{f.weights}* weights are present but {f.name} is "
                               + ("false" if f.name in flags else "absent")
                               + (": an EAGLE-3.1 checkpoint whose flag was dropped, or stray weights" if f.eagle31 else ""),
                               {vllm: f.stray, "drifttool": f"refuses to load (unexpected tensor {tensor})" if f.eagle31
                                else f"ignores {tensor} (loaded only under {f.name})"}, flag=f.name))
        if on and not has:
            said = (f"{f.name} is true" if flags.get(f.name) is True
                    else f"{f.name} is {flags.get(f.name)!r}, read as true,")
            out.append(Finding("flag_without_weights", "error", f"{said} but the checkpoint has no {f.weights}* weights",
                               {vllm: f.missing, "drifttool": "refuses to load unless overridden"}, flag=f.name))
    for a, b in flag_table.conflicts({k: bool(v) for k, v in flags.items()}):
        out.append(Finding("exclusive_flags", "error", f"{a} and {b} are both true; they exclude each other",
                           {vllm: "applies both, input_norm first (llama_eagle3.py:405-414)",
                            "speculators": "rejects the config", "drifttool": "refuses to load"}))
    return out


def _variant_findings(flags: dict[str, Any], keys: dict[str, tuple[int, ...]]) -> list[Finding]:
    """Engines without a flag that is on; EAGLE-3.1 half-declared (a feature norm without post-norm feedback, or
    the reverse)."""
    def on(f: str) -> bool:  # as vLLM reads it: Python truthiness, so the string "false" is on
        return bool(flags.get(f, False))

    out = []
    missing_in = sorted({e for f in flag_table.FLAGS if on(f.name) for e in f.unsupported})
    for e in missing_in:
        eng = next((k for k in ENGINE_READS if k.startswith(e)), e)
        out.append(Finding("engine_support", "info",
                           "an engine without the EAGLE-3.1 flags serves this checkpoint as EAGLE-3",
                           {eng: "fc_norm / input_norm weights skipped silently and the pre-norm residual fed back"}))
    if on("norm_output") and not (on("fc_norm") or on("norm_before_fc")):
        out.append(Finding("mixed_variant", "warning",
                           "norm_output is true without a feature norm (fc_norm / norm_before_fc): neither EAGLE-3 "
                           "nor EAGLE-3.1; check the trainer wrote both flags"))
    if any(k.startswith("fc_norm.") for k in keys) and on("fc_norm") and not on("norm_output"):
        out.append(Finding("mixed_variant", "warning",
                           "fc_norm without norm_output: EAGLE-3.1 feeds back the post-norm hidden; SpecForge before "
                           "its PR #879 trained such checkpoints with pre-norm feedback"))
    return out


def _vocab_findings(dv: Any, vocab: Any, keys: dict[str, tuple[int, ...]], vllm: str) -> list[Finding]:
    out = []
    if "d2t" in keys and isinstance(dv, int) and keys["d2t"] != (dv,):
        out.append(Finding("vocab_mapping", "error",
                           f"d2t has {keys['d2t'][0] if keys['d2t'] else 0} entries, draft_vocab_size is {dv}",
                           {vllm: "fails to load d2t (shape mismatch)", "drifttool": "refuses to load"}))
    if "t2d" in keys and isinstance(vocab, int) and keys["t2d"] != (vocab,):
        out.append(Finding("vocab_mapping", "error", f"t2d has shape {list(keys['t2d'])}, the target vocabulary is {vocab}"))
    if isinstance(dv, int) and isinstance(vocab, int) and dv != vocab and "d2t" not in keys:
        out.append(Finding("vocab_mapping", "error",
                           f"draft_vocab_size {dv} != vocab_size {vocab} but no d2t: draft ids cannot be mapped",
                           {vllm: "maps draft id i to target id i (d2t zeros): wrong tokens", "drifttool": "refuses to load"}))
    return out


def static_findings(folder: str | Path) -> tuple[dict[str, Any], list[Finding]]:
    """(what the checkpoint declares, findings) for a drafter folder: config.json and tensor names, then the weights'
    values for what no header shows (model/weight_health.py: norms that never trained, NaN, zero rows, the
    draft-vocabulary maps). No model is built."""
    p = Path(folder)
    raw = _read_config(p)
    layout = detect_layout(raw)
    keys = _keys(p)
    flags, where = _declared(raw, layout)
    nested = raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict) else {}
    vllm = "vllm 0.32 (speculators layout)" if layout == "speculators" else "vllm 0.32 (flat Llama config: SafeAILab, SpecForge)"
    out = _not_boolean(flags, vllm)
    if layout == "speculators":
        out += _speculators_placement(flags, nested, vllm)
    out += _weight_findings(flags, keys, vllm) + _variant_findings(flags, keys)
    layer = nested if layout == "speculators" else raw
    dv = raw.get("draft_vocab_size", layer.get("draft_vocab_size"))
    vocab = layer.get("vocab_size")
    out += _vocab_findings(dv, vocab, keys, vllm)
    aux = raw.get("eagle_aux_hidden_state_layer_ids") or (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    info = {"layout": layout, "flags": {f: flags.get(f) for f in flag_table.names()}, "found_at": where,
            "aux_layer_ids": aux, "draft_vocab_size": dv, "vocab_size": vocab,
            "sliding_window": layer.get("sliding_window"), "trained_window": raw.get("trained_window"),
            "rope_theta": layer.get("rope_theta"), "rope_scaling": layer.get("rope_scaling")}
    if aux is None:
        out.append(Finding("assumed", "info", "eagle_aux_hidden_state_layer_ids absent: engines use [2, L//2, L-3]"))
    if layer.get("rope_theta") is None:
        out.append(Finding("assumed", "info", "rope_theta absent: engines use 10000"))
    return info, out + weight_findings(p)
