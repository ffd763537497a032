"""What a drafter checkpoint declares against what its weights imply, and what each engine will do with it.

The EAGLE-3.1 flags have been dropped or misread again and again on the way from trainer to engine (a flag
stored where the engine does not look, weights no flag uses, a default that differs between the trainer and
the engine). `static_findings` reads config.json and the tensor names only (no model is built) and names each
such case with what the engines do with it, from the engine's own source (ENGINE_READS; docs/conformance.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DriftError
from .config import FLAG_NAMES
from .layouts import detect_layout

FLAGS = FLAG_NAMES

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


@dataclass
class Finding:
    code: str
    severity: str  # error: an engine will misread or refuse it; warning: likely wrong; info: what was assumed
    message: str
    engines: dict[str, str] = field(default_factory=dict)  # engine -> what it does with this
    flag: str | None = None  # the flag the finding is about, where it is about one
    value: Any = None  # the value the checkpoint stores for it (where it stores one)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    for f in FLAGS:
        if f in raw:
            out[f], where[f] = raw[f], "top level"
        elif f == "norm_before_fc" and f in eagle:
            out[f], where[f] = eagle[f], "eagle_config"
    return out, where


def static_findings(folder: str | Path) -> tuple[dict[str, Any], list[Finding]]:
    """(what the checkpoint declares, findings) for a drafter folder: config.json and tensor names only."""
    p = Path(folder)
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise DriftError(f"{cfg_file}: not found (expected a drafter checkpoint folder)")
    try:
        raw = json.loads(cfg_file.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise DriftError(f"{cfg_file}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise DriftError(f"{cfg_file}: expected a JSON object")
    layout = detect_layout(raw)
    keys = _keys(p)
    flags, where = _declared(raw, layout)
    nested = raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict) else {}
    vllm = "vllm 0.32 (speculators layout)" if layout == "speculators" else "vllm 0.32 (flat Llama config: SafeAILab, SpecForge)"
    vdef = ENGINE_READS[vllm]["defaults"]
    has = {"fc_norm": any(k.startswith("fc_norm.") for k in keys), "input_norm": "input_norm.weight" in keys}
    out: list[Finding] = []

    def on(f: str) -> bool:  # as vLLM reads it: Python truthiness, so the string "false" is on
        return bool(flags.get(f, False))

    for f, v in flags.items():
        if not isinstance(v, bool):
            out.append(Finding("flag_not_boolean", "error",
                               f"{f} is {v!r} ({type(v).__name__}), not a JSON boolean: engines read it by truthiness, "
                               f"so it counts as {bool(v)}" + (" although it says false" if str(v).strip().lower() in
                                                               ("false", "0", "no", "off") else ""),
                               {vllm: f"runs {f}={bool(v)} (Python truthiness)",
                                "drifttool": "refuses to load (expected true or false: a JSON boolean)"},
                               flag=f, value=v))

    if layout == "speculators":
        for f in FLAGS:
            if f not in flags and f in nested:
                out.append(Finding("flag_not_read", "error",
                                   f"{f}={nested[f]!r} is stored in transformer_layer_config, where no engine looks "
                                   "for it; move it to the top level of config.json",
                                   {vllm: f"reads the top level only: runs {f}={vdef[f]}",
                                    "drifttool": f"reads the top level only: runs {f}={vdef[f] if f != 'norm_before_residual' else True}"},
                                   flag=f, value=nested[f]))
        if "norm_before_residual" not in flags and "norm_before_residual" not in nested:
            out.append(Finding("default_differs", "warning",
                               "norm_before_residual is absent: vLLM assumes true, speculators' own default is false; "
                               "state it explicitly",
                               {vllm: "runs norm_before_residual=True (algos.py:33-34)",
                                "speculators": "norm_before_residual=False", "drifttool": "True (as vLLM), recorded"},
                               flag="norm_before_residual"))
    if has["fc_norm"] and not on("fc_norm"):
        out.append(Finding("weights_without_flag", "error",
                           "fc_norm.* weights are present but fc_norm is " + ("false" if "fc_norm" in flags else "absent")
                           + ": an EAGLE-3.1 checkpoint whose flag was dropped, or stray weights",
                           {vllm: "refuses to load (no module fc_norm; model_executor/models/utils.py:443)",
                            "drifttool": "refuses to load (unexpected tensor fc_norm.0.weight)"}))
    if on("fc_norm") and not has["fc_norm"]:
        out.append(Finding("flag_without_weights", "error",
                           ("fc_norm is true" if flags.get("fc_norm") is True else
                            f"fc_norm is {flags.get('fc_norm')!r}, read as true,") + " but the checkpoint has no fc_norm.* "
                           "weights",
                           {vllm: "runs fc_norm with unit weights (RMSNorm's initial value), silently",
                            "drifttool": "refuses to load (missing tensor fc_norm.0.weight) unless overridden"}))
    if on("fc_norm") and on("norm_before_fc"):
        out.append(Finding("exclusive_flags", "error",
                           "norm_before_fc and fc_norm are both true; they exclude each other",
                           {vllm: "applies both, input_norm first (llama_eagle3.py:405-414)",
                            "speculators": "rejects the config", "drifttool": "refuses to load"}))
    if has["input_norm"] and not on("norm_before_fc"):
        out.append(Finding("weights_without_flag", "error",
                           "input_norm.weight is present but norm_before_fc is " + ("false" if "norm_before_fc" in flags else "absent"),
                           {vllm: "drops input_norm.* silently (llama_eagle3.py:464-465)",
                            "drifttool": "ignores input_norm.weight (loaded only under norm_before_fc)"}))
    if on("norm_before_fc") and not has["input_norm"]:
        out.append(Finding("flag_without_weights", "error", "norm_before_fc is true but input_norm.weight is missing",
                           {vllm: "runs input_norm with unit weights, silently", "drifttool": "refuses to load"}))
    if on("fc_norm") or on("norm_output") or on("norm_before_fc"):
        sg = next(k for k in ENGINE_READS if k.startswith("sglang"))
        out.append(Finding("engine_support", "info",
                           "an engine without the EAGLE-3.1 flags serves this checkpoint as EAGLE-3",
                           {sg: "fc_norm / input_norm weights skipped silently and the pre-norm residual fed back"}))
    if on("norm_output") and not (on("fc_norm") or on("norm_before_fc")):
        out.append(Finding("mixed_variant", "warning",
                           "norm_output is true without a feature norm (fc_norm / norm_before_fc): neither EAGLE-3 "
                           "nor EAGLE-3.1; check the trainer wrote both flags"))
    if has["fc_norm"] and on("fc_norm") and not on("norm_output"):
        out.append(Finding("mixed_variant", "warning",
                           "fc_norm without norm_output: EAGLE-3.1 feeds back the post-norm hidden; SpecForge before "
                           "its PR #879 trained such checkpoints with pre-norm feedback"))
    layer = nested if layout == "speculators" else raw
    dv = raw.get("draft_vocab_size", layer.get("draft_vocab_size"))
    vocab = layer.get("vocab_size")
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
    aux = raw.get("eagle_aux_hidden_state_layer_ids") or (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    info = {"layout": layout, "flags": {f: flags.get(f) for f in FLAGS}, "found_at": where,
            "aux_layer_ids": aux, "draft_vocab_size": dv, "vocab_size": vocab,
            "sliding_window": layer.get("sliding_window"), "trained_window": raw.get("trained_window"),
            "rope_theta": layer.get("rope_theta"), "rope_scaling": layer.get("rope_scaling")}
    if aux is None:
        out.append(Finding("assumed", "info", "eagle_aux_hidden_state_layer_ids absent: engines use [2, L//2, L-3]"))
    if layer.get("rope_theta") is None:
        out.append(Finding("assumed", "info", "rope_theta absent: engines use 10000"))
    return info, out

