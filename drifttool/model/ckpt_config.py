"""Read a drafter config.json the way vLLM reads it: draft-layer family, window, flags, aux ids, overrides
(where each layout keeps them: layouts.py). Whatever the config leaves implicit is decided here and written to
`assumptions`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import DriftError
from . import flags as flag_table
from .cfgcheck import REQUIRED, aux_ids, pos_float, pos_int, rope_scaling, strict_bool
from .config import AUX_CONVENTIONS, DrafterConfig, check_override_key, split_flags
from .layouts import BY_NAME, Layout, detect_layout
from .target import Target, TargetShape, default_aux_layer_ids

MODEL_TYPES = ("llama", "qwen3")
MLA_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2")  # draft layers with multi-head latent attention
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _rope(layer: dict[str, Any], where: str) -> tuple[float, dict | None, str]:
    """rope_theta / rope_scaling (v4) or rope_parameters (v5); the draft config's own values."""
    params = layer.get("rope_parameters")
    if isinstance(params, dict):
        theta = pos_float(params if "rope_theta" in params else layer, "rope_theta", where, 10000.0)
        kind = params.get("rope_type", "default")
        scaling = None if kind == "default" else {k: v for k, v in params.items() if k != "rope_theta"}
        return theta, rope_scaling(scaling, where), "rope_parameters"
    if "rope_theta" in layer:
        return pos_float(layer, "rope_theta", where, 10000.0), rope_scaling(layer.get("rope_scaling"), where), "rope_theta"
    return 10000.0, rope_scaling(layer.get("rope_scaling"), where), "absent (default 10000)"


def _window(layer: dict[str, Any], where: str, assumptions: dict[str, str]) -> int | None:
    """The draft layer's attention window as vLLM resolves it: `sliding_window` applies only when
    `layer_types[0]` is "sliding_attention" (speculators writes both; 0 or null means none)."""
    types, size = layer.get("layer_types"), layer.get("sliding_window")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise DriftError(f"{where}: sliding_window {size!r} is not a non-negative integer")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        raise DriftError(f"{where}: layer_types {types!r} is not a list of strings (expected e.g. "
                         "[\"sliding_attention\"] or [\"full_attention\"])")
    if isinstance(types, list) and types:
        if types[0] != "sliding_attention":
            assumptions["sliding_window"] = f"layer_types[0] is {types[0]!r}: full attention"
            return None
        if not size:
            assumptions["sliding_window"] = "layer_types[0] is 'sliding_attention' but sliding_window is unset: none"
            return None
        return int(size)
    if size:
        assumptions["sliding_window"] = (f"sliding_window {size} without layer_types: not applied (vLLM windows a "
                                         "draft layer only when layer_types marks it 'sliding_attention')")
    return None


def _use_aux(raw: dict[str, Any], assumptions: dict[str, str], where: str) -> bool:
    """vLLM reads use_aux_hidden_state from eagle_config only (absent: true); a top-level one is honoured too,
    and that is recorded."""
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if eagle.get("use_aux_hidden_state") is not None:
        val = strict_bool(eagle["use_aux_hidden_state"], "use_aux_hidden_state", where)
    elif raw.get("use_aux_hidden_state") is not None:
        val = strict_bool(raw["use_aux_hidden_state"], "use_aux_hidden_state", where)
        assumptions["use_aux_hidden_state"] = f"{val} from the top level (vLLM reads it inside eagle_config only)"
    else:
        return True
    if not val:
        assumptions["use_aux_hidden_state"] = ("false: no fc; the drafter reads the target's final hidden state "
                                               "after its last norm (what vLLM passes)")
    return val


def _flags(layout: Layout, top: dict, layer: dict, eagle: dict, assumptions: dict[str, str], where: str) -> dict[str, bool]:
    """The flags of model/flags.py as vLLM reads them: from the top level (vLLM ignores copies inside a nested layer
    config such as speculators' transformer_layer_config), from NVIDIA's eagle_config first where the flag's row
    says so, a legacy name (SGLang's use_aux_norm) turning it on; absent flags take the layout's reading's default
    (speculators: norm_before_residual true), else false."""
    out = {}
    for f in flag_table.FLAGS:
        name = f.name
        default = f.default(layout.reading)
        srcs = (eagle, top) if f.eagle_config else (top,)
        val = next((strict_bool(src[name], name, where) for src in srcs if src.get(name) is not None), None)
        for old in f.legacy:
            if not val and top.get(old) is not None and strict_bool(top[old], old, where):
                val = True
                assumptions[name] = f"from {old} (the legacy name an engine reads as {name})"
        if val is None:
            val = default
            assumptions[name] = f"absent: {str(default).lower()} (as vLLM reads a {layout.name} config)"
        if layer is not top and layer.get(name) is not None and bool(layer[name]) != val:
            assumptions[name] = (f"{val} from the top level; transformer_layer_config's {name}={layer[name]} is "
                                 "ignored, as vLLM ignores it")
        out[name] = val
    return out


def _model_type(layer: dict[str, Any], layer_where: str) -> str:
    """The draft layer's family (absent: llama), refused unless drifttool builds it; EAGLE-3 layers have no biases."""
    model_type = str(layer.get("model_type") or "llama")
    if model_type not in MODEL_TYPES + MLA_TYPES:
        raise DriftError(f"{layer_where}: model_type {model_type!r} unsupported (expected one of "
                         f"{', '.join(MODEL_TYPES + MLA_TYPES)})")
    if layer.get("attention_bias") is not None and strict_bool(layer["attention_bias"], "attention_bias", layer_where):
        raise DriftError(f"{layer_where}: attention_bias true is unsupported (EAGLE-3 draft layers have no biases)")
    return model_type


def _mla(layer: dict[str, Any], layer_where: str) -> dict[str, Any]:
    """The latent-attention fields: q_lora_rank may be null (queries not low-rank); the others are required."""
    mla = {k: pos_int(layer, k, layer_where, default=None if k == MLA_FIELDS[0] else REQUIRED) for k in MLA_FIELDS}
    if mla["qk_rope_head_dim"] % 2:  # RoPE rotates pairs of dimensions
        raise DriftError(f"{layer_where}: qk_rope_head_dim {mla['qk_rope_head_dim']} is odd; rotary embedding "
                         "rotates pairs of dimensions (expected an even number, e.g. 64)")
    return mla


def _top_or_layer(top: dict[str, Any], layer: dict[str, Any], key: str) -> dict[str, Any]:
    """Where a field is read: the top level when it sets it, else the nested layer config."""
    return top if top.get(key) is not None else layer


def _draft_vocab(top: dict[str, Any], layer: dict[str, Any], where: str, vocab: int) -> int:
    """draft_vocab_size (absent: the full vocabulary), never larger than the target vocabulary."""
    dvocab = pos_int(_top_or_layer(top, layer, "draft_vocab_size"), "draft_vocab_size", where, default=vocab)
    if dvocab > vocab:
        raise DriftError(f"{where}: draft_vocab_size {dvocab} exceeds vocab_size {vocab} (the target vocabulary)")
    return dvocab


def _target_hidden(top: dict[str, Any], layer: dict[str, Any], where: str, h: int,
                   assumptions: dict[str, str]) -> int:
    """target_hidden_size; absent, SafeAILab/vLLM size fc from hidden_size (a target of another width is then
    reported by _check_target rather than as an fc.weight shape mismatch)."""
    ht = pos_int(_top_or_layer(top, layer, "target_hidden_size"), "target_hidden_size", where, default=None)
    if ht is None:
        ht = h
        assumptions["target_hidden_size"] = f"absent: drafter hidden_size {h}"
    return int(ht)


def _aux_layers(raw: dict[str, Any], eagle: dict[str, Any], target: Target | TargetShape | None, where: str,
                h: int, ht: int, assumptions: dict[str, str]) -> tuple[Any, bool]:
    """The aux layer ids as written (unchecked; absent: vLLM's default for the target) and use_aux_hidden_state;
    without aux features the target's hidden state enters the layer without fc, so the widths must match."""
    aux = raw.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
    use_aux = _use_aux(raw, assumptions, where)
    if not use_aux:
        if ht != h:
            raise DriftError(f"{where}: use_aux_hidden_state false needs target_hidden_size == hidden_size "
                             f"(got {ht} and {h}): the target's hidden state enters the layer without fc")
        return [], use_aux
    if aux is None:
        if target is None:
            raise DriftError(
                f"{where}: no eagle_aux_hidden_state_layer_ids and no target given to derive the default [2, L//2, L-3]"
            )
        aux = default_aux_layer_ids(target.num_layers)
        assumptions["aux_layer_ids"] = f"absent: vLLM default {aux} for a {target.num_layers}-layer target"
    return aux, use_aux


def normalise_config(raw: dict[str, Any], path: Path, target: Target | TargetShape | None) -> DrafterConfig:
    """config.json -> DrafterConfig; `target` (its shape) is needed only for default aux ids."""
    layout = BY_NAME[detect_layout(raw, where=path)]
    where = str(path / "config.json")
    assumptions: dict[str, str] = {}
    top = raw
    layer, layer_where = layout.layer(raw, where)
    eagle = layout.eagle(raw)
    model_type = _model_type(layer, layer_where)
    h = pos_int(layer, "hidden_size", layer_where)
    nh = pos_int(layer, "num_attention_heads", layer_where)
    nkv = pos_int(layer, "num_key_value_heads", layer_where, default=nh)
    hd = pos_int(layer, "head_dim", layer_where, default=h // nh)
    mla = None
    if model_type in MLA_TYPES:  # heads are decompressed per query head: nkv = nh, head dim = nope + rope
        mla = _mla(layer, layer_where)
        nkv, hd = nh, mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    inter = pos_int(layer, "intermediate_size", layer_where)
    vocab = pos_int(layer, "vocab_size", layer_where)
    dvocab = _draft_vocab(top, layer, where, vocab)
    ht = _target_hidden(top, layer, where, h, assumptions)
    if nh % nkv:
        raise DriftError(f"{layer_where}: num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}")
    aux, use_aux = _aux_layers(raw, eagle, target, where, h, ht, assumptions)
    theta, scaling, rope_src = _rope(layer, layer_where)
    assumptions["rope"] = f"from {rope_src}"
    cfg = DrafterConfig(
        hidden_size=h, num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd, intermediate_size=inter,
        vocab_size=vocab, draft_vocab_size=dvocab, target_hidden_size=ht,
        aux_layer_ids=aux_ids(aux, where) if use_aux else [],
        rms_norm_eps=pos_float(layer, "rms_norm_eps", layer_where, 1e-6), rope_theta=theta, rope_scaling=scaling,
        max_position_embeddings=pos_int(layer, "max_position_embeddings", layer_where, default=2048),
        trained_window=pos_int(top, "trained_window", where, default=None),
        hidden_act=str(layer.get("hidden_act", "silu")),
        sliding_window=_window(layer, layer_where, assumptions), model_type=model_type,
        qk_norm=model_type == "qwen3", mla=mla, use_aux_hidden_state=use_aux,
        **split_flags(_flags(layout, top, layer, eagle, assumptions, where)),
        layout=layout.name, assumptions=assumptions, source=str(path),
    )
    if cfg.hidden_act not in ("silu", "swish"):
        raise DriftError(f"{layer_where}: hidden_act {cfg.hidden_act!r} unsupported (expected silu)")
    layout.note(cfg)
    return cfg


def check_conflicts(cfg: DrafterConfig, where: str) -> None:
    line = flag_table.conflict_line(cfg.flags())
    if line:
        raise DriftError(f"{where}: {line}")




def _aux_ids(value: Any, s: str) -> list[int]:
    """`--override aux_ids=...` as layer ids: ASCII digits only (int() reads '١', an Arabic-Indic one, as 1, and
    5000 digits as a traceback)."""
    parts = list(value) if isinstance(value, (list, tuple)) else [x.strip() for x in s.split(",")]
    if not all(isinstance(x, int) and not isinstance(x, bool) or re.fullmatch(r"[0-9]{1,6}", str(x)) for x in parts):
        raise DriftError(f"--override aux_ids={value}: expected comma-separated layer ids (digits 0-9), e.g. 1,23,44")
    return [int(x) for x in parts]


def parse_override(key: str, value: Any) -> Any:
    """One `--override key=value`: a flag (true/false), aux_ids (comma-separated layer ids), aux_convention
    (input|output), sliding_window (a positive integer, or none) or trained_window (a positive integer, or none:
    the context length the drafter was trained at, where its config does not say)."""
    check_override_key(key)
    s = str(value).strip().lower()
    if key == "aux_ids":
        ids = _aux_ids(value, s)
        if not ids or min(ids) < 0:
            raise DriftError(f"--override aux_ids={value}: expected non-negative layer ids")
        return ids
    if key == "aux_convention":
        if s not in AUX_CONVENTIONS:
            raise DriftError(f"--override aux_convention={value}: expected {' or '.join(AUX_CONVENTIONS)}")
        return s
    if key in ("sliding_window", "trained_window"):
        if s in ("none", "0", "off"):
            return None
        # ASCII digits, no leading zero, a length a context can have: '²' passes isdigit(), '00' read as a 0-slot
        # window, 5000 digits exceed int()'s limit (each was a traceback or a wrong line later)
        if not re.fullmatch(r"[1-9][0-9]{0,11}", s):
            shown = value if len(str(value)) <= 40 else f"{str(value)[:20]}... ({len(str(value))} characters)"
            raise DriftError(f"--override {key}={shown}: expected a positive integer (digits 0-9, no leading zero, at "
                             "most 12 of them) or none")
        return int(s)
    if isinstance(value, bool):
        return value
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise DriftError(f"--override {key}={value}: expected true or false")
